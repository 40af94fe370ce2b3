"""The console's output: one clean stream, and a quiet exit when it is closed under it."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rejoinder.cli import EXIT_OUTPUT_CLOSED, build_parser, main, run_console
from rejoinder.console import Console, ReplyOutput
from rejoinder.testing import advance

DEMO_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "demo_script.txt"


# ------------------------------------------------------------ a closed output


class ClosingPipe(io.StringIO):
    """A pipe whose reader goes away once ``until`` was written (``| head -1`` for a
    newline): every later write or flush raises ``BrokenPipeError``."""

    def __init__(self, until: str = "\n") -> None:
        super().__init__()
        self._until = until
        self.broken = False
        self.failures = 0

    def write(self, text: str) -> int:
        if self.broken:
            self.failures += 1
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        written = super().write(text)
        self.broken = self._until in self.getvalue()
        return written

    def flush(self) -> None:
        if self.broken:
            self.failures += 1
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")


async def test_output_closed_after_the_first_line_ends_the_run_quietly() -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out, err = ClosingPipe(), io.StringIO()
    args = build_parser().parse_args(["console", "--script", str(DEMO_SCRIPT)])

    code = await run_console(args, out, stderr=err)

    assert code == EXIT_OUTPUT_CLOSED
    assert out.getvalue() == "rejoinder console\n"
    assert err.getvalue() == ""
    assert out.failures == 1  # it stopped writing once it knew
    assert loop.time() - t0 < 3.0  # the script's 3 s timer was not waited for


async def test_output_closed_during_a_reply_stops_the_session_cleanly() -> None:
    out, err = ClosingPipe(until="agent> Hello! "), io.StringIO()
    args = build_parser().parse_args(["console", "--script", str(DEMO_SCRIPT)])

    code = await run_console(args, out, stderr=err)

    assert code == EXIT_OUTPUT_CLOSED
    assert out.getvalue().endswith("agent> Hello! ")
    assert "What's the weather" not in out.getvalue()
    assert err.getvalue() == ""


async def test_output_closed_while_the_user_types_ends_the_run() -> None:
    async def typed() -> AsyncIterator[str]:
        yield "hello\n"
        await advance(0.1)
        yield "help\n"
        await advance(100.0)
        yield "weather\n"

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = ClosingPipe(until="you> help")
    args = build_parser().parse_args(["console"])
    code = await run_console(args, out, stderr=io.StringIO(), lines=typed(), barge_in=True)
    assert code == EXIT_OUTPUT_CLOSED
    assert loop.time() - t0 < 100.0  # it did not wait for more input


def test_main_into_a_closed_pipe_exits_141_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    stdout = os.fdopen(write_end, "w", encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert main(["console", "--script", str(DEMO_SCRIPT)]) == EXIT_OUTPUT_CLOSED
        # The descriptor now goes to the null device: the interpreter's last flush at
        # exit cannot fail (which would print "Exception ignored" and exit 120).
        stdout.write("more\n")
        stdout.flush()
    finally:
        stdout.close()
    assert capsys.readouterr().err == ""


# ------------------------------------------------------- lines never interleave


def test_a_status_waits_for_the_open_reply_line() -> None:
    out = io.StringIO()
    console = Console(out, color=False)
    replies = ReplyOutput(console)

    asyncio.run(replies.capture_text("Hello "))
    console.status(1.0, "agent: thinking → speaking")
    asyncio.run(replies.capture_text("there."))
    replies.flush()

    assert out.getvalue() == "agent> Hello there.\n  [  1.000s] agent: thinking → speaking\n"


def test_a_line_printed_during_a_reply_ends_it_and_the_reply_goes_on_below() -> None:
    out = io.StringIO()
    console = Console(out, color=False)
    replies = ReplyOutput(console)

    asyncio.run(replies.capture_text("Important "))
    console.later("you> help")  # waits for the reply line
    console.line("you> stop")  # ends it now
    asyncio.run(replies.capture_text("notice."))
    replies.flush()
    replies.flush()  # a second end of the reply adds nothing

    assert out.getvalue().splitlines() == [
        "agent> Important ",
        "you> help",
        "you> stop",
        "agent> notice.",
    ]


def test_a_reply_ended_by_someone_else_adds_no_empty_line() -> None:
    out = io.StringIO()
    console = Console(out, color=False)
    replies = ReplyOutput(console)

    asyncio.run(replies.capture_text("Hello! I'm "))
    console.line("you> weather")
    replies.flush()  # the session ends the interrupted reply
    console.status(0.2, "agent: speaking → thinking")

    assert (
        out.getvalue()
        == "agent> Hello! I'm \nyou> weather\n  [  0.200s] agent: speaking → thinking\n"
    )


def test_a_reply_with_newlines_stays_one_block() -> None:
    out = io.StringIO()
    console = Console(out, color=False)
    replies = ReplyOutput(console)

    asyncio.run(replies.capture_text("Two things:\n"))
    asyncio.run(replies.capture_text("- one\n- two"))
    replies.flush()
    assert out.getvalue() == "agent> Two things:\n- one\n- two\n"


def test_the_terminal_ending_the_line_is_taken_into_account() -> None:
    """On a terminal, the Enter of a line typed during a reply was echoed: the cursor is
    already on a new line, so the console does not add an empty one."""
    out = io.StringIO()
    console = Console(out, color=False)
    replies = ReplyOutput(console)

    asyncio.run(replies.capture_text("Hello "))
    console.status(0.1, "agent: thinking → speaking")
    out.write("stop\n")  # what the terminal echoed
    console.line_ended_by_terminal()
    assert not replies.line_open
    asyncio.run(replies.capture_text("there."))
    replies.flush()

    assert out.getvalue().splitlines() == [
        "agent> Hello stop",
        "  [  0.100s] agent: thinking → speaking",
        "agent> there.",
    ]


def test_a_stream_that_cannot_encode_an_arrow_still_gets_the_line() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    console = Console(stream, color=False)
    console.status(0.0, "agent: initializing → listening")
    stream.flush()
    assert raw.getvalue() == b"  [  0.000s] agent: initializing ? listening\n"
    assert not console.gone.is_set()
