"""The loop behind ``rejoinder console``: input, the session, and one clean output stream.

Input is read while the agent talks when a person is typing (stdin is a terminal): a line
that arrives during a reply is a user turn at once. It interrupts the reply when the reply
allows that, and otherwise waits behind it. Piped input and ``--script`` keep the
turn-by-turn pace: each line is sent once the previous reply is over.

Everything is printed through one ``Console``, which knows whether the agent's reply line
is still open, so status lines and the user's lines never land in the middle of it. When
the output goes away (``rejoinder console | head -1``) the console stops quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any, TextIO

from .demo import MAX_TIMER_SECONDS, DemoAgent, DemoLLM
from .io.text import TextOutput
from .models import LLM, FunctionCall, FunctionCallOutput
from .session import (
    Agent,
    AgentSession,
    AgentStateChangedEvent,
    ConversationItemAddedEvent,
    ErrorEvent,
    SpeechCreatedEvent,
    SpeechHandle,
    UserStateChangedEvent,
)
from .session.tools.tool import expand

__all__ = ["EXIT_OUTPUT_CLOSED", "Console", "ReplyOutput", "run_console", "stdin_lines"]

PROG = "rejoinder"
DEMO_LLM_DESCRIPTION = "built-in rule-based demo LLM (no model, no network)"
# The longest demo timer must fit under the tool watchdog, and the final wait for owed
# work (script end, end of piped input) must outlast it.
_TOOL_WATCHDOG = float(MAX_TIMER_SECONDS + 60)
DRAIN_TIMEOUT = _TOOL_WATCHDOG + 60.0
EXIT_OUTPUT_CLOSED = 141
"""Exit status when the output was closed under the console: 128 + SIGPIPE, what a shell
reports for a program that was writing into ``| head``."""
_QUIT = frozenset({"/quit", "/exit", "/q"})

_RESET, _DIM, _BOLD, _RED, _CYAN, _YELLOW = (
    "\033[0m",
    "\033[2m",
    "\033[1m",
    "\033[31m",
    "\033[36m",
    "\033[33m",
)


class UsageError(Exception):
    """A problem with the command line or its inputs (exit status 2)."""


def print_error(message: str, stream: TextIO | None = None) -> None:
    out = stream if stream is not None else sys.stderr
    with contextlib.suppress(OSError, ValueError):  # stderr is gone too: nothing to tell
        out.write(f"{PROG} console: error: {message}\n")
        out.flush()


# -------------------------------------------------------------------- output


class Console:
    """The one stream everything is printed to.

    It remembers whether the last line is still open (a reply being streamed): a line
    that comes meanwhile either ends it first (``line``) or waits until it ends
    (``status``, ``later``). ``mark`` changes with every write, so a writer can tell
    whether the open line is still its own. If the stream cannot be written any more (a
    closed pipe), the console drops what follows and sets ``gone``."""

    def __init__(self, stream: TextIO, *, color: bool) -> None:
        self._stream = stream
        self.color = color
        self.gone = asyncio.Event()
        self._at_line_start = True
        self._waiting: list[str] = []
        self._mark = 0

    @property
    def at_line_start(self) -> bool:
        return self._at_line_start

    @property
    def mark(self) -> int:
        """Changes whenever something is written (or the line is ended)."""
        return self._mark

    def write(self, text: str) -> int:
        """Write ``text`` as it is; returns the ``mark`` right after it."""
        if not text:
            return self._mark
        self._put(text)
        self._mark += 1
        mark = self._mark
        self._at_line_start = text.endswith("\n")
        if self._at_line_start:
            self._release_waiting()
        return mark

    def flush(self) -> None:
        if self.gone.is_set():
            return
        try:
            self._stream.flush()
        except (OSError, ValueError):
            self._lost()

    def style(self, text: str, *codes: str) -> str:
        return f"{''.join(codes)}{text}{_RESET}" if self.color and codes else text

    def end_line(self) -> None:
        """End the open line, if one is (what waited for it is printed after it)."""
        if not self._at_line_start:
            self.write("\n")

    def line(self, text: str = "") -> None:
        """A whole line, now: an open line is ended first."""
        self.end_line()
        self.write(text + "\n")
        self.flush()

    def later(self, text: str) -> None:
        """A whole line, as soon as no line is open."""
        if self._at_line_start:
            self.line(text)
        else:
            self._waiting.append(text + "\n")

    def status(self, seconds: float, text: str, *codes: str) -> None:
        self.later(self.style(f"  [{seconds:7.3f}s] {text}", *(codes or (_DIM,))))

    def line_ended_by_terminal(self) -> None:
        """The terminal moved to a new line itself: it echoed the Enter of a line the user
        typed while a line was open."""
        if not self._at_line_start:
            self._at_line_start = True
            self._mark += 1
            self._release_waiting()

    def _release_waiting(self) -> None:
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            self._put("".join(waiting))
            self._mark += 1

    def _put(self, text: str) -> None:
        if self.gone.is_set():
            return
        try:
            self._stream.write(text)
        except UnicodeEncodeError:  # a terminal that cannot show "→": show something
            encoding = getattr(self._stream, "encoding", None) or "ascii"
            self._put(text.encode(encoding, "replace").decode(encoding))
        except (OSError, ValueError):  # a closed pipe, a closed file, a hung-up terminal
            self._lost()

    def _lost(self) -> None:
        self._waiting.clear()
        self.gone.set()


class ReplyOutput(TextOutput):
    """The agent's replies as they stream, one line each behind ``prefix``, through the
    ``Console``. Something else may end its line meanwhile (the user typed a line during
    the reply): more words then start a fresh prefixed line, and the end of the reply
    adds no empty one. It never raises: a console whose output is gone drops the text."""

    def __init__(self, console: Console, prefix: str = "agent> ") -> None:
        self._console = console
        self._prefix = prefix
        self._mark: int | None = None
        """The console's mark after this reply's last words; ``None`` between replies."""

    @property
    def line_open(self) -> bool:
        """A reply is being shown and its line is still open."""
        return self._is_last_writer() and not self._console.at_line_start

    async def capture_text(self, text: str) -> None:
        self.write_text(text)

    def write_text(self, text: str) -> None:
        """More of the reply (``capture_text``, without the coroutine: a transport's
        message handler calls it)."""
        if not text:
            return
        if not self._is_last_writer():
            self._console.end_line()
            self._console.write(self._prefix)
        self._mark = self._console.write(text)
        self._console.flush()

    def flush(self) -> None:
        if self.line_open:
            self._console.end_line()
            self._console.flush()
        self._mark = None

    def _is_last_writer(self) -> bool:
        return self._mark is not None and self._mark == self._console.mark


# --------------------------------------------------------------------- input


def read_script(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        raise UsageError(f"script file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read script file {path}: {exc}") from None
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


async def _from_list(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def stdin_lines(stream: TextIO | None = None) -> AsyncIterator[str]:
    """Lines of ``stream`` (default stdin) without blocking the event loop: a daemon thread
    reads them, so a blocked read never keeps the process from exiting (Ctrl-C, /quit)."""
    source: TextIO | None = stream if stream is not None else sys.stdin
    if source is None:  # started with stdin closed: no input at all
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def put(line: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            return False
        return True

    def pump() -> None:
        try:
            while line := source.readline():
                if not put(line):
                    return
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        put(None)

    threading.Thread(target=pump, name="rejoinder-stdin", daemon=True).start()
    while (line := await queue.get()) is not None:
        yield line


# ------------------------------------------------------------- the exchange


class _Conversation:
    """Sends what the user types and keeps the screen readable around it."""

    def __init__(
        self,
        session: AgentSession[Any],
        console: Console,
        replies: ReplyOutput,
        *,
        barge_in: bool,
        echoed: bool,
        started: float,
    ) -> None:
        self._session = session
        self._console = console
        self._replies = replies
        self._barge_in = barge_in
        self._echoed = echoed
        self._started = started
        self._speeches: set[SpeechHandle] = set()
        session.on("speech_created", self._speech_created)

    def since_start(self) -> float:
        return asyncio.get_running_loop().time() - self._started

    def _speech_created(self, ev: SpeechCreatedEvent) -> None:
        handle = ev.speech_handle
        self._speeches.add(handle)
        handle.add_done_callback(self._speeches.discard)

    async def run(self, source: AsyncIterator[str]) -> None:
        async for raw in source:
            text = raw.strip()
            if not text:
                continue
            if text.lower() in _QUIT:
                self._console.status(
                    self.since_start(), "quit: closing now; work still owed is dropped"
                )
                return
            if self._barge_in:
                await self._send_now(text)
            else:
                if not self._echoed:
                    self._show_user(text)
                await self._session.generate_reply(user_input=text)
        self._console.status(self.since_start(), "end of input: finishing anything still owed")
        await self._session.drain(timeout=DRAIN_TIMEOUT)

    def _show_user(self, text: str, *, now: bool = True) -> None:
        line = self._console.style("you>", _BOLD) + " " + text
        if now:
            self._console.line(line)
        else:
            self._console.later(line)

    async def _send_now(self, text: str) -> None:
        """A line that arrived while the agent may be talking: a user turn now. It
        interrupts what the agent is doing if that allows it, else it waits behind it."""
        busy = [h for h in self._speeches if not h.done()]
        if self._echoed and self._replies.line_open:
            # The terminal echoed the typing into the reply line, and its Enter ended it.
            self._console.line_ended_by_terminal()
        # Shown unless the terminal already shows it cleanly: on a terminal, output that
        # came while the user typed got mixed with the typing, so a clean copy is shown.
        show = busy or not self._echoed
        interruptible = [h for h in busy if h.allow_interruptions]
        if not interruptible:
            if show:
                self._show_user(text, now=False)  # after the reply line being shown, if any
            if busy:
                self._console.status(
                    self.since_start(), "the reply cannot be interrupted: yours comes next"
                )
            self._session.generate_reply(user_input=text)  # the session queues it
            return
        # The partial reply line is ended first, then the user's line, then the statuses.
        self._show_user(text)
        self._console.status(self.since_start(), "interrupting the reply")
        await self._interrupt_and_reply(text)

    async def _interrupt_and_reply(self, text: str) -> None:
        """Interrupt and reply in the same step: the new reply is owed before the
        interrupted one lets go, so the agent never reports ``listening`` in between;
        the session records the interrupted reply where it began, before this line."""
        stopping = self._session.interrupt()
        self._session.generate_reply(user_input=text)
        await stopping


def _describe_item(event: ConversationItemAddedEvent) -> tuple[str, str] | None:
    item = event.item
    if isinstance(item, FunctionCall):
        if item.call_id.endswith("_final"):
            return None  # its output line says it all
        return f"tool call: {item.name}({item.arguments})", _YELLOW
    if isinstance(item, FunctionCallOutput):
        final = item.call_id.endswith("_final")
        what = "background tool finished" if final else "tool result"
        if item.is_error:
            return f"{what}: {item.name} failed: {item.output}", _RED
        return f"{what}: {item.name} → {item.output or '(nothing)'}", _YELLOW
    return None


# --------------------------------------------------------------------- the run


def is_tty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a stand-in without isatty, or a closed stream
        return False


def _make_llm(args: argparse.Namespace) -> tuple[LLM, str]:
    """The LLM and a line describing it; ``UsageError`` when it cannot be made."""
    if not args.llm:
        return DemoLLM(), DEMO_LLM_DESCRIPTION
    try:
        from .providers.registry import llm_from_name

        llm = llm_from_name(args.llm, base_url=args.base_url, api_key=args.api_key)
    except Exception as exc:  # a provider is optional, a name can be wrong: say which
        raise UsageError(f"could not set up --llm {args.llm}: {type(exc).__name__}: {exc}") from exc
    where = getattr(llm, "base_url", None) or args.base_url or "its default API"
    description = f"{llm.model} ({llm.provider}) at {where}"
    key_variable = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}.get(llm.provider)
    # a local OpenAI-compatible server (a base URL) needs no key
    local = llm.provider == "openai" and bool(args.base_url or os.environ.get("OPENAI_BASE_URL"))
    if not args.api_key and key_variable and not os.environ.get(key_variable) and not local:
        description += f" (no API key: set {key_variable} or pass --api-key)"
    return llm, description


async def run_console(
    args: argparse.Namespace,
    stdout: TextIO,
    *,
    stderr: TextIO | None = None,
    lines: AsyncIterator[str] | None = None,
    agent: Agent | None = None,
    barge_in: bool | None = None,
) -> int:
    """The console, as a coroutine (``main`` runs it with ``asyncio.run``; tests await it
    on virtual time). ``lines`` replaces stdin; ``agent`` replaces the ``DemoAgent``.

    ``barge_in``: read input while the agent talks, so a line that arrives during a reply
    is a turn at once (it interrupts the reply if the reply allows it). Default: when a
    person types (stdin is a terminal, no ``--script``, no ``lines``); otherwise each line
    is sent once the previous reply is over. Returns the exit status
    (``EXIT_OUTPUT_CLOSED`` when ``stdout`` was closed under it)."""
    errors = stderr if stderr is not None else sys.stderr
    try:
        script = read_script(args.script) if args.script is not None else None
        llm, llm_description = _make_llm(args)
    except UsageError as exc:
        print_error(str(exc), errors)
        return 2

    color = is_tty(stdout)
    console = Console(stdout, color=color)
    away = args.away_timeout if args.away_timeout and args.away_timeout > 0 else None
    session: AgentSession[Any] = AgentSession(
        llm=llm, user_away_timeout=away, obligation_timeouts={"tool": _TOOL_WATCHDOG}
    )
    replies = ReplyOutput(console, prefix=console.style("agent>", _BOLD, _CYAN) + " ")
    session.output.transcription = replies

    agent = agent if agent is not None else DemoAgent()
    typing = script is None and lines is None and is_tty(sys.stdin)
    # The terminal already shows what was typed, unless the output goes elsewhere.
    echoed = typing and color
    barge_in = typing if barge_in is None else barge_in
    console.line(console.style("rejoinder console", _BOLD))
    console.line(f"  LLM:   {llm_description}")
    console.line(f"  agent: {agent.id} (tools: {', '.join(t.name for t in expand(agent.tools))})")
    if script is not None:
        console.line(f"  input: {args.script} ({len(script)} messages)")
    else:
        console.line("  Type a message and press Enter. /quit or Ctrl-D ends; Ctrl-C stops.")
        if barge_in:
            console.line("  Typing while the agent talks interrupts it (unless it must finish).")
    away_text = "off" if away is None else f"{away:g} s"
    console.line(f"  state changes are shown as [time since start]; user away after: {away_text}")
    console.line()

    started = asyncio.get_running_loop().time()
    conversation = _Conversation(
        session, console, replies, barge_in=barge_in, echoed=echoed, started=started
    )

    def on_agent_state(ev: AgentStateChangedEvent) -> None:
        console.status(ev.created_at - started, f"agent: {ev.old_state} → {ev.new_state}")

    def on_user_state(ev: UserStateChangedEvent) -> None:
        console.status(ev.created_at - started, f"user: {ev.old_state} → {ev.new_state}")

    def on_error(ev: ErrorEvent) -> None:
        console.status(conversation.since_start(), f"error ({ev.source}): {ev.error}", _RED)

    def on_item(ev: ConversationItemAddedEvent) -> None:
        described = _describe_item(ev)
        if described is not None:
            console.status(conversation.since_start(), *described)

    session.on("agent_state_changed", on_agent_state)
    session.on("user_state_changed", on_user_state)
    session.on("error", on_error)
    session.on("conversation_item_added", on_item)

    source = _from_list(script) if script is not None else (lines or stdin_lines())
    try:
        if not console.gone.is_set():
            await session.start(agent)
            await _until_output_gone(conversation.run(source), console)
    finally:
        close_source = getattr(source, "aclose", None)
        if close_source is not None:
            await close_source()
        await session.aclose()
        await llm.aclose()
    if console.gone.is_set():
        return EXIT_OUTPUT_CLOSED  # nobody is reading: stop without a word
    console.status(conversation.since_start(), "session closed")
    return EXIT_OUTPUT_CLOSED if console.gone.is_set() else 0


async def _until_output_gone(work: Coroutine[Any, Any, None], console: Console) -> None:
    """Run ``work`` until it ends or the console's output goes away, whichever is first."""
    task: asyncio.Future[None] = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(console.gone.wait())
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
        # Wait for it to stop (it may be reading the input, which is closed next).
        await asyncio.wait((task, gone))
    if not task.cancelled():
        task.result()
