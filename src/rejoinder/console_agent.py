"""``rejoinder console FILE``: an agent file's entry point, with the terminal as its client.

The agent file is the one ``rejoinder dev FILE`` serves: its ``entrypoint(conn)`` builds
the session and the agent and runs ``await conn.serve(session, agent)``. Here ``conn``
is a ``rejoinder.io.Connection`` whose client is the terminal, an in-process client of
the protocol (``TerminalClient``): what the session sends (states, the agent's words as
they are heard, tool calls, errors) is printed; what the user types is the protocol's
``text`` message, a user turn that interrupts the agent as a browser's typed text does.
So the session, its agent and its models are exactly those ``dev`` serves.

Where the agent's voice goes:

- text (default): the agent's audio is taken as heard the moment it is made, so its words
  show as fast as its voice is synthesized; the microphone stays silent.
- ``--audio``: the default microphone feeds the session's microphone, and the agent's
  voice plays on the default speaker, which reports what it played
  (``rejoinder.console_audio``): ``speaking`` is what you hear.

Input is read while the agent talks when a person types (stdin is a terminal). Piped
input and ``--script`` keep a turn-by-turn pace: each line waits for the agent to be
``listening`` again (``session.run``). The end of the input lets what is owed finish
(``session.drain``); ``/quit`` closes at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any, TextIO

from .console import (
    _BOLD,
    _CYAN,
    _DIM,
    _QUIT,
    _RED,
    _YELLOW,
    DRAIN_TIMEOUT,
    EXIT_OUTPUT_CLOSED,
    PROG,
    Console,
    ReplyOutput,
    UsageError,
    _from_list,
    is_tty,
    print_error,
    read_script,
    stdin_lines,
)
from .console_audio import AudioDevices, DeviceError, Speaker, open_sound_devices
from .discover import AgentFile, EntrypointError, load_agent_file
from .io.connection import Connection
from .io.microphone import PushAudioInput
from .io.playback import ReportedPlayback
from .io.protocol import (
    AgentStateMessage,
    ErrorMessage,
    Ready,
    ServerMessage,
    ToolMessage,
    TranscriptMessage,
    UserStateMessage,
    UserText,
)
from .models.audio import AudioFrame

__all__ = ["TRANSPORT", "TerminalClient", "run_agent_console"]

TRANSPORT = "console"
"""``conn.transport`` of a console connection."""
TEXT_RATE = 24000
"""The agent audio's rate in text mode, before it is set to the TTS's own (no resampling
for audio nobody plays)."""
MIC_RATE = 16000
"""The silent microphone's rate in text mode."""
CLOSE_TIMEOUT = 10.0
"""Seconds the entry point gets to return once the console closed its connection."""

_DEMO_ONLY = ("llm", "base_url", "api_key")


class TerminalClient:
    """The console's side of the connection: the protocol messages the session sends,
    printed (``receive``), and the session's state as a client knows it."""

    def __init__(self, console: Console, *, started: float, show_user_speech: bool) -> None:
        self.console = console
        self.replies = ReplyOutput(console, prefix=console.style("agent>", _BOLD, _CYAN) + " ")
        self._started = started
        self._show_user_speech = show_user_speech
        self.agent_state = "initializing"
        self.user_state = "listening"
        self.ready: Ready | None = None
        self.listening = asyncio.Event()
        """Set while the agent reports ``listening`` (the end of a turn)."""
        self._shown = ""
        """The agent's words shown so far in the reply being heard."""

    def since_start(self) -> float:
        return asyncio.get_running_loop().time() - self._started

    def status(self, text: str, *codes: str) -> None:
        self.console.status(self.since_start(), text, *codes)

    def receive(self, message: ServerMessage) -> None:
        """A message the session sent (``Connection.send``): printed."""
        if isinstance(message, Ready):
            self.ready = message
        elif isinstance(message, AgentStateMessage):
            old, self.agent_state = self.agent_state, message.state
            if message.state == "listening":
                self.listening.set()
            else:
                self.listening.clear()
            if old != message.state:
                self.status(f"agent: {old} → {message.state}")
        elif isinstance(message, UserStateMessage):
            old, self.user_state = self.user_state, message.state
            if old != message.state:
                self.status(f"user: {old} → {message.state}")
        elif isinstance(message, TranscriptMessage):
            if message.role == "agent":
                self._agent_words(message)
            elif message.final and self._show_user_speech and message.text:
                self.console.later(self.console.style("you>", _BOLD) + " " + message.text)
        elif isinstance(message, ToolMessage):
            self._tool(message)
        elif isinstance(message, ErrorMessage):
            source = f" ({message.source})" if message.source else ""
            self.status(f"error{source}: {message.message}", _RED)

    def _tool(self, message: ToolMessage) -> None:
        # A background tool's result comes back as a call of its own ("..._final").
        background = message.call_id.endswith("_final")
        if message.status == "started":
            if not background:
                self.status(f"tool call: {message.name}", _YELLOW)
            return
        what = "background tool" if background else "tool"
        if message.error:
            self.status(f"{what} failed: {message.name}", _RED)
        else:
            self.status(f"{what} finished: {message.name}", _YELLOW)

    def _agent_words(self, message: TranscriptMessage) -> None:
        """Interim transcripts carry the whole reply heard so far; the final one what was
        heard in all (``interrupted`` when it was cut)."""
        text = message.text
        if message.final and self._shown and not self.replies.line_open:
            # Its line was ended under it (the user typed): the whole of it, on a new line.
            self.replies.flush()
            self._shown = ""
        if text.startswith(self._shown):
            self.replies.write_text(text[len(self._shown) :])
            self._shown = text
        elif not message.final:  # cannot happen (shown text only grows): start over
            self.replies.flush()
            self.replies.write_text(text)
            self._shown = text
        if message.final:
            if message.interrupted and self._shown:
                self.replies.write_text(self.console.style(" [interrupted]", _DIM))
            self.replies.flush()
            self._shown = ""


class _TextSpeaker:
    """Text mode: the agent's audio counts as heard as soon as it is made."""

    def __init__(self, report: Any) -> None:
        self._report = report
        self.played = 0

    def play(self, pcm: bytes) -> None:
        self.played += len(pcm) // 2
        asyncio.get_running_loop().call_soon(self._report, self.played, False)

    def clear(self) -> None:
        asyncio.get_running_loop().call_soon(self._report, self.played, True)


async def run_agent_console(
    args: argparse.Namespace,
    stdout: TextIO,
    *,
    stderr: TextIO | None = None,
    lines: AsyncIterator[str] | None = None,
    devices: AudioDevices | None = None,
    barge_in: bool | None = None,
) -> int:
    """``rejoinder console FILE`` as a coroutine (``main`` runs it with ``asyncio.run``;
    tests await it). ``lines`` replaces stdin; ``devices`` the sound card (with
    ``--audio``); ``barge_in``: send each line at once, as typed (default: when stdin is
    a terminal and there is no ``--script``). Returns the exit status: 0, 1 when the
    entry point failed, 2 for a bad file or usage, ``EXIT_OUTPUT_CLOSED``."""
    errors = stderr if stderr is not None else sys.stderr
    try:
        agent_file, script = _prepare(args)
        if args.audio and devices is None:
            devices = open_sound_devices()
    except (UsageError, EntrypointError, DeviceError) as exc:
        print_error(str(exc), errors)
        return 2

    loop = asyncio.get_running_loop()
    console = Console(stdout, color=is_tty(stdout))
    typing = script is None and lines is None and is_tty(sys.stdin)
    barge_in = typing if barge_in is None else barge_in
    console.line(console.style(f"{PROG} console: {args.file}", _BOLD))
    if devices is not None:
        console.line(f"  audio: {devices.name} (use headphones: the microphone hears the speaker)")
    if script is not None:
        console.line(f"  input: {args.script} ({len(script)} messages)")
    else:
        talk_too = "Talk, or type" if devices is not None else "Type"
        console.line(f"  {talk_too} a message and press Enter. /quit or Ctrl-D ends; Ctrl-C stops.")
    console.line("  state changes are shown as [time since start]")
    if agent_file.prewarm is not None:
        console.line("  running prewarm() first: loading what every session shares")
    console.line()
    try:
        await agent_file.run_prewarm()
    except Exception as exc:
        print_error(f"prewarm in {args.file} failed: {type(exc).__name__}: {exc}", errors)
        return 1

    client = TerminalClient(console, started=loop.time(), show_user_speech=devices is not None)
    conn, speaker = _connect(client, devices, loop)
    entry: asyncio.Future[None] = asyncio.ensure_future(agent_file.entrypoint(conn))
    conn.entry = entry
    if devices is not None:
        _start_devices(devices, conn, speaker, loop)
    source = _from_list(script) if script is not None else (lines or stdin_lines())
    talk = asyncio.ensure_future(_talk(conn, client, source, barge_in=barge_in, echoed=typing))
    gone = asyncio.ensure_future(console.gone.wait())
    try:
        await asyncio.wait((entry, talk, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (talk, gone):
            task.cancel()
        await asyncio.wait((talk, gone))
        close_source = getattr(source, "aclose", None)
        if close_source is not None:
            await close_source()
        conn.client_left("console closed")
        if devices is not None:
            devices.close()
        if not entry.done():
            await asyncio.wait((entry,), timeout=CLOSE_TIMEOUT)
            entry.cancel()
    return _outcome(entry, talk, conn, client, errors)


def _prepare(args: argparse.Namespace) -> tuple[AgentFile, list[str] | None]:
    given = [name for name in _DEMO_ONLY if getattr(args, name, None)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(
            f"{flags}: for the built-in demo only; {args.file} builds its own session "
            f"(its entrypoint chooses the models)"
        )
    script = read_script(args.script) if args.script is not None else None
    return load_agent_file(args.file), script


def _connect(
    client: TerminalClient, devices: AudioDevices | None, loop: asyncio.AbstractEventLoop
) -> tuple[Connection, Speaker | _TextSpeaker]:
    """The connection the entry point gets: the terminal as its client."""
    playback: ReportedPlayback | None = None

    def report(samples: int, cleared: bool) -> None:
        if playback is not None:
            playback.on_played(samples, cleared=cleared)

    speaker: Speaker | _TextSpeaker
    if devices is not None:
        speaker = Speaker(devices.speaker_rate, report, loop)
        rate, mic_rate = devices.speaker_rate, devices.mic_rate
    else:
        speaker, rate, mic_rate = _TextSpeaker(report), TEXT_RATE, MIC_RATE

    async def send_audio(frame: AudioFrame) -> None:
        speaker.play(frame.data.tobytes())

    playback = ReportedPlayback(rate, send_audio, speaker.clear)
    conn = Connection(
        transport=TRANSPORT,
        audio_input=PushAudioInput(mic_rate),
        audio_output=playback,
        send=client.receive,
        remote="terminal",
        match_tts_rate=devices is None,  # a sound card plays at its own rate
    )
    return conn, speaker


def _start_devices(
    devices: AudioDevices,
    conn: Connection,
    speaker: Speaker | _TextSpeaker,
    loop: asyncio.AbstractEventLoop,
) -> None:
    def heard(pcm: bytes) -> None:  # on the device's thread
        with contextlib.suppress(RuntimeError):  # the loop closed
            loop.call_soon_threadsafe(conn.audio_input.push_pcm, pcm)

    assert isinstance(speaker, Speaker)
    devices.start(heard, speaker.fill)


async def _talk(
    conn: Connection,
    client: TerminalClient,
    source: AsyncIterator[str],
    *,
    barge_in: bool,
    echoed: bool,
) -> None:
    """Send the user's lines; at the end of them, let what is owed finish."""
    console = client.console
    async for raw in source:
        text = raw.strip()
        if not text:
            continue
        if text.lower() in _QUIT:
            client.status("quit: closing now; work still owed is dropped")
            return
        if barge_in:
            if echoed and client.replies.line_open:
                console.line_ended_by_terminal()  # the terminal echoed the typing and Enter
            elif not echoed:
                console.line(console.style("you>", _BOLD) + " " + text)
            conn.receive(UserText(text=text))  # a barge-in, as a browser's typed text
            continue
        await client.listening.wait()  # the turn before (or the greeting) is over
        session = conn.session
        if session is None:
            return
        console.line(console.style("you>", _BOLD) + " " + text)
        await session.run(user_input=text)
    session = conn.session
    if session is not None:
        client.status("end of input: finishing anything still owed")
        await session.drain(timeout=DRAIN_TIMEOUT)


def _outcome(
    entry: asyncio.Future[None],
    talk: asyncio.Future[None],
    conn: Connection,
    client: TerminalClient,
    errors: TextIO,
) -> int:
    console = client.console
    if console.gone.is_set():
        return EXIT_OUTPUT_CLOSED
    failure: BaseException | None = None
    if entry.cancelled():
        failure = TimeoutError(f"it did not return within {CLOSE_TIMEOUT:g} s of the close")
    else:
        failure = entry.exception()
    if failure is not None:
        print_error(f"the entrypoint failed: {type(failure).__name__}: {failure}", errors)
        return 1
    sent = None if talk.cancelled() else talk.exception()
    if sent is not None:  # the session refused a turn (it was closing, say)
        print_error(f"sending your message failed: {type(sent).__name__}: {sent}", errors)
        return 1
    if conn.session is None:
        print_error(
            "the entrypoint returned without serving a session: it must end with "
            "`await conn.serve(session, agent)`",
            errors,
        )
        return 1
    client.status("session closed")
    return EXIT_OUTPUT_CLOSED if console.gone.is_set() else 0
