"""``ClientConnection``: one session with a rejoinder server over its WebSocket.

Four tasks per connection, each with one job: the reader (frames in: typed messages,
agent audio into the speaker), the writer (the only one that writes to the socket, so
text, audio and reports go out in the order they were queued), the speaker's clock
(plays in real time, reports ``played``) and, when audio is paced, the microphone (a
frame every 20 ms: what was said, else silence, as a microphone does).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from pydantic import ValidationError

from ..io.protocol import (
    AgentStateMessage,
    Clear,
    CloseCode,
    ErrorCode,
    ErrorMessage,
    Interrupt,
    Mute,
    Played,
    ProtocolError,
    Ready,
    ServerMessage,
    Start,
    UserText,
    encode,
    parse_server_message,
)
from ._errors import ConnectionClosed, ReadyTimeout
from ._speaker import Speaker
from ._view import AGENT_STATES, AgentState, Turn, UserState, View

if TYPE_CHECKING:
    from ..models.audio import AudioFrame

__all__ = ["ClientConnection", "Received"]

MIC_CHUNK = 0.02
"""Seconds of microphone audio per frame when the client paces it."""
MIC_MAX_BEHIND = 1.0
"""Seconds the paced microphone may fall behind (a stalled loop) and still catch up."""
SPEAKER_TICK = 0.02
"""Seconds between two steps of the simulated speaker."""
KEEP_IGNORED = 100
"""Server messages that could not be used, kept for inspection (the latest)."""
CLOSE_FLUSH = 1.0
"""Seconds ``close()`` waits for queued messages to be written before it closes."""


@dataclass(frozen=True, slots=True)
class Received:
    """A server message and when it arrived (the event loop's clock)."""

    at: float
    message: ServerMessage


class _Signal:
    """Wakes every waiter on each change (a fresh event per round: no lost wake-ups)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


_Item = tuple[str | bytes, "asyncio.Future[None] | None"]


class ClientConnection:
    """A connected, ready session; made by ``rejoinder.client.connect``.

    What the server said is kept as it arrives: ``log`` (every typed message, timed),
    ``agent_state``/``user_state``, ``transcripts`` (the turns as a client shows them),
    ``errors``. Agent audio plays on ``speaker``, which reports ``played`` to the server.
    """

    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        *,
        sample_rate: int,
        speaker: Speaker,
        pace_audio: bool,
        owned_http: aiohttp.ClientSession | None,
    ) -> None:
        self.sample_rate = sample_rate
        """Rate of the microphone audio this client sends (``start.sample_rate``)."""
        self.speaker = speaker
        """The simulated speaker playing the agent's audio (playback truth)."""
        self.pace_audio = pace_audio
        """True: the client is the microphone's clock (see ``send_audio``)."""
        self.muted = False
        """What the last ``mute()`` said."""
        self.ready: Ready | None = None
        """The server's ``ready`` (set once connected)."""
        self.log: list[Received] = []
        """Every typed server message, in order, with when it arrived."""
        self.ignored: deque[ProtocolError] = deque(maxlen=KEEP_IGNORED)
        """Server frames this client could not use (the latest 100): unknown message
        types (a newer server: skipped, as the protocol asks), invalid messages (a broken
        server) and audio before ``ready``."""
        self._ws = ws
        self._owned_http = owned_http
        self._view = View()
        self._signal = _Signal()
        self._outbox: asyncio.Queue[_Item] = asyncio.Queue()
        self._speech: deque[tuple[bytes, asyncio.Future[None]]] = deque()
        self._io: list[asyncio.Task[None]] = []  # the reader and the writer
        self._clocks: list[asyncio.Task[None]] = []  # the speaker and the microphone
        self._closed: ConnectionClosed | None = None
        self._closing = False

    # ------------------------------------------------------------ reading

    @property
    def output_rate(self) -> int:
        """Rate of the agent audio the server sends (``ready.sample_rate``)."""
        return self.ready.sample_rate if self.ready is not None else 0

    @property
    def messages(self) -> list[ServerMessage]:
        """Every typed server message so far, in order."""
        return [received.message for received in self.log]

    @property
    def agent_state(self) -> AgentState | None:
        """The agent's state as the server last reported it."""
        return self._view.agent_state

    @property
    def user_state(self) -> UserState | None:
        """The user's state as the server last reported it."""
        return self._view.user_state

    @property
    def agent_states(self) -> list[tuple[float, AgentState]]:
        """Every ``agent_state`` the server sent, with when it arrived."""
        return list(self._view.agent_states)

    @property
    def transcripts(self) -> list[Turn]:
        """The conversation's turns, interim ones replaced as they grow."""
        return list(self._view.turns)

    @property
    def errors(self) -> list[ErrorMessage]:
        """Every ``error`` message the server sent (warnings included)."""
        return list(self._view.errors)

    @property
    def closed(self) -> ConnectionClosed | None:
        """Why the connection closed, or ``None`` while it is open."""
        return self._closed

    async def events(self, *, past: bool = True) -> AsyncIterator[ServerMessage]:
        """The server's messages, typed (``rejoinder.io.protocol``): those received so far
        (unless ``past`` is false), then each as it arrives. Ends when the session ends
        normally; raises ``ConnectionClosed`` when it ends otherwise."""
        index = 0 if past else len(self.log)
        while True:
            while index < len(self.log):
                yield self.log[index].message
                index += 1
            if self._closed is not None:
                if self._closed.normal:
                    return
                raise self._error()
            await self._signal.wait()

    async def wait_for(
        self,
        predicate: Callable[[ServerMessage], bool],
        *,
        within: float = 10.0,
        since: int = 0,
    ) -> ServerMessage:
        """The first message (from index ``since`` of ``log``) that ``predicate`` accepts.
        Raises ``TimeoutError`` after ``within`` seconds, ``ConnectionClosed`` if the
        connection closes first."""
        async with asyncio.timeout(within):
            index = since
            while True:
                while index < len(self.log):
                    message = self.log[index].message
                    index += 1
                    if predicate(message):
                        return message
                if self._closed is not None:
                    raise self._error()
                await self._signal.wait()

    async def wait_for_state(
        self, state: str, *, within: float = 10.0, since: int | None = None
    ) -> None:
        """Until the agent is in ``state``: now, or when the server next says so. With
        ``since`` (an index of ``log``, e.g. ``len(conn.log)`` taken before sending), only
        an ``agent_state`` message from there on counts."""
        if state not in AGENT_STATES:
            raise ValueError(f"{state!r} is not an agent state: one of {sorted(AGENT_STATES)}")
        if since is None:
            if self.agent_state == state:
                return
            since = len(self.log)
        await self.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == state,
            within=within,
            since=since,
        )

    async def wait_closed(self, *, within: float = 10.0) -> ConnectionClosed:
        """Until the connection closes (by either side); returns why."""
        async with asyncio.timeout(within):
            while self._closed is None:
                await self._signal.wait()
        return self._closed

    # ------------------------------------------------------------ sending

    async def send_text(self, text: str) -> None:
        """Typed user input (1–8192 characters): a user turn, like a transcript."""
        try:
            message = UserText(text=text)
        except ValidationError as exc:
            raise ValueError(f"invalid text input: {exc.errors()[0]['msg']}") from None
        await self._enqueue(encode(message), wait=True)

    async def send_audio(self, audio: bytes | bytearray | memoryview | AudioFrame) -> None:
        """Microphone audio: PCM16LE mono bytes at ``sample_rate``, or an ``AudioFrame``
        of that rate, mono.

        Paced (``pace_audio``, the default), the client is the microphone: it sends a
        20 ms frame every 20 ms, silence when nothing is queued, and this returns once
        ``audio`` was sent, in real time (as long as it lasts). Unpaced, it is sent at
        once: the caller is the clock (a live source), and nothing is sent in between.
        """
        pcm = self._pcm(audio)
        if not pcm:
            return
        if not self.pace_audio:
            await self._enqueue(pcm, wait=True)
            return
        self._check_open()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._speech.append((pcm, done))
        await done

    def mute(self, muted: bool = True) -> asyncio.Future[None]:
        """Mute (or unmute) the user: the session hears silence meanwhile. Returns a
        future done once the message was written (awaiting it is optional)."""
        done = self._enqueue_soon(encode(Mute(muted=muted)))
        self.muted = muted
        return done

    def interrupt(self) -> asyncio.Future[None]:
        """Stop what the agent is saying now (a button, not speech); the server answers
        with ``clear``. Returns a future done once written (awaiting it is optional)."""
        return self._enqueue_soon(encode(Interrupt()))

    async def close(self) -> None:
        """Leave: write what is queued (briefly), close the socket (1000) and stop. The
        server closes the session with it. Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        for task in self._clocks:  # nothing new to say or to report
            task.cancel()
        if self._closed is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._outbox.join(), CLOSE_FLUSH)
        with contextlib.suppress(Exception):
            await self._ws.close()
        self._finish(self._ws.close_code or CloseCode.NORMAL, "closed by the client")
        for task in [*self._io, *self._clocks]:
            task.cancel()
        await asyncio.gather(*self._io, *self._clocks, return_exceptions=True)
        if self._owned_http is not None:
            await self._owned_http.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed is not None else f"agent {self.agent_state}"
        return f"<ClientConnection {state}, {self.speaker.played} samples played>"

    # ---------------------------------------------------------- opening

    async def _open(self, start: Start, ready_timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._io = [loop.create_task(self._read()), loop.create_task(self._write())]
        await self._enqueue(encode(start), wait=False)
        try:
            async with asyncio.timeout(ready_timeout):
                while self.ready is None and self._closed is None:
                    await self._signal.wait()
        except TimeoutError:
            await self.close()
            raise ReadyTimeout(f"no ready from the server within {ready_timeout} s") from None
        if self.ready is None:
            await self.close()
            raise self._error()
        self._clocks.append(loop.create_task(self._play()))
        if self.pace_audio:
            self._clocks.append(loop.create_task(self._microphone()))

    # --------------------------------------------------------- the tasks

    async def _read(self) -> None:
        code: int | None = None
        reason = ""
        try:
            while True:
                msg = await self._ws.receive()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self._on_text(msg.data)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    self._on_audio(msg.data)
                elif msg.type == aiohttp.WSMsgType.CLOSE:
                    code, reason = msg.data, msg.extra or ""
                    break
                elif msg.type == aiohttp.WSMsgType.ERROR:
                    reason = f"the connection failed: {msg.data!r}"
                    break
                else:  # CLOSING, CLOSED: our own close() is under way, and says why
                    break
        finally:
            if not self._closing:
                self._finish(code if code is not None else self._ws.close_code, reason)

    async def _write(self) -> None:
        while True:
            data, done = await self._outbox.get()
            try:
                if isinstance(data, str):
                    await self._ws.send_str(data)
                else:
                    await self._ws.send_bytes(data)
            except Exception as exc:
                # The socket is going: the reader will learn how it closed (its code),
                # so only this message fails here, with what the socket said.
                _settle(done, self._error() if self._closed else ConnectionClosed(None, str(exc)))
            else:
                _settle(done, None)
            finally:
                self._outbox.task_done()

    async def _play(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SPEAKER_TICK)
            now = loop.time()
            before = self.speaker.played
            self.speaker.advance(now)
            if self.speaker.report_due(now):
                self._report(now)
            if self.speaker.played != before:
                self._signal.notify()

    async def _microphone(self) -> None:
        loop = asyncio.get_running_loop()
        step = round(MIC_CHUNK * self.sample_rate) * 2
        silence = bytes(step)
        began, sent = loop.time(), 0
        pcm, offset, done = b"", 0, None
        while self._closed is None:
            if offset >= len(pcm) and self._speech:
                (pcm, done), offset = self._speech.popleft(), 0
            if offset < len(pcm):
                chunk = pcm[offset : offset + step]
                offset += step
                last = offset >= len(pcm)
                # the last piece is padded: what is sent stays exactly real time
                self._outbox.put_nowait((chunk.ljust(step, b"\0"), done if last else None))
            else:
                self._outbox.put_nowait((silence, None))
            sent += 1
            delay = began + sent * MIC_CHUNK - loop.time()
            if delay < -MIC_MAX_BEHIND:  # the loop stalled: what was not said is not owed
                began, sent = loop.time(), 0
            # behind a little (a busy loop): catch up at once, as a device's buffer would
            await asyncio.sleep(max(delay, 0.0))

    # -------------------------------------------------------- what comes in

    def _on_text(self, text: str) -> None:
        try:
            message = parse_server_message(text)
        except ProtocolError as exc:
            self.ignored.append(exc)
            return
        if isinstance(message, Ready) and (self.ready is not None or message.sample_rate <= 0):
            why = "a second ready" if self.ready is not None else "a ready without a rate"
            self.ignored.append(ProtocolError(ErrorCode.INVALID_MESSAGE, why))
            return
        now = asyncio.get_running_loop().time()
        if isinstance(message, Ready):
            self.ready = message
            self.speaker.start(message.sample_rate, now)  # audio may follow at once
        self.log.append(Received(now, message))
        self._view.apply(message, now)
        if isinstance(message, Clear) and self.ready is not None:
            self.speaker.clear(now)
            self._report(now, cleared=True)
        self._signal.notify()

    def _on_audio(self, data: bytes) -> None:
        if self.ready is None:
            self.ignored.append(ProtocolError(ErrorCode.NOT_READY, "agent audio before ready"))
            return
        self.speaker.receive(data, asyncio.get_running_loop().time())
        self._signal.notify()

    def _report(self, now: float, *, cleared: bool = False) -> None:
        report = self.speaker.report(now, cleared=cleared)
        if self._closed is None:
            self._outbox.put_nowait((encode(Played(samples=report.samples, cleared=cleared)), None))

    # ------------------------------------------------------------ helpers

    def _finish(self, code: int | None, reason: str) -> None:
        """The connection is over: remember why, and release everyone waiting on it."""
        if self._closed is not None:
            return
        last = self.log[-1].message if self.log else None
        error = last if isinstance(last, ErrorMessage) else None
        self._closed = ConnectionClosed(code, reason, error)
        while self._speech:
            _settle(self._speech.popleft()[1], self._error())
        while not self._outbox.empty():
            _settle(self._outbox.get_nowait()[1], self._error())
            self._outbox.task_done()
        self._signal.notify()

    def _error(self) -> ConnectionClosed:
        """A fresh exception each time it is raised (one instance raised again and again
        would pile up tracebacks)."""
        closed = self._closed
        assert closed is not None
        return ConnectionClosed(closed.code, closed.reason, closed.error)

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._error()

    async def _enqueue(self, data: str | bytes, *, wait: bool) -> None:
        self._check_open()
        done = asyncio.get_running_loop().create_future() if wait else None
        self._outbox.put_nowait((data, done))
        if done is not None:
            await done

    def _enqueue_soon(self, data: str) -> asyncio.Future[None]:
        self._check_open()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # a caller that does not await it must not be warned of an unretrieved error
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._outbox.put_nowait((data, done))
        return done

    def _pcm(self, audio: Any) -> bytes:
        if isinstance(audio, bytes | bytearray | memoryview):
            pcm = bytes(audio)
            if len(pcm) % 2:
                raise ValueError("16-bit PCM needs an even number of bytes")
            return pcm
        from ..models.audio import AudioFrame  # numpy: only for a caller that has frames

        if not isinstance(audio, AudioFrame):
            raise TypeError(f"audio is PCM16LE bytes or an AudioFrame, not {type(audio)!r}")
        if audio.sample_rate != self.sample_rate or audio.num_channels != 1:
            raise ValueError(
                f"this connection sends mono audio at {self.sample_rate} Hz, not "
                f"{audio.num_channels} channel(s) at {audio.sample_rate} Hz: convert it first"
            )
        return audio.to_pcm()


def _settle(done: asyncio.Future[None] | None, error: BaseException | None) -> None:
    if done is None or done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
