"""A protocol v1 client over an in-memory socket, for the virtual-time tests of the
WebSocket transport: the real socket loop (``hosting.run_socket``), peer and session run,
only the socket is a pair of queues. The client streams its microphone (20 ms frames of
silence, or of a tone the energy VAD hears), plays what it receives after a jitter buffer,
reports ``played`` every 50 ms, answers ``clear``, and can say goodbye (a close with 1000)
or drop (the connection is gone, no close frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from rejoinder.io.hosting import run_socket
from rejoinder.io.protocol import (
    AgentStateMessage,
    Clear,
    Ready,
    ServerMessage,
    parse_server_message,
)
from rejoinder.io.websocket import WebSocketOptions, client_socket
from rejoinder.testing import speech_frame

TICK = 0.02
REPORT_EVERY = 0.05


class MemorySocket:
    """The server's side of one connection (a ``hosting.FrameSocket``)."""

    def __init__(self, client: MemoryClient) -> None:
        self._client = client
        self._in: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self._closed = False
        self.client_code: int | None = None
        """The code of the client's close frame (None: it sent none)."""

    @property
    def closed(self) -> bool:
        return self._closed

    def from_client(self, frame: str | bytes | None) -> None:
        if not self._closed:
            self._in.put_nowait(frame)

    async def receive(self) -> str | bytes | None:
        if self._closed:
            return None
        frame = await self._in.get()
        if frame is None:
            self._closed = True
        return frame

    async def send_text(self, text: str) -> None:
        if self._closed or self._client.gone:
            raise ConnectionError("the socket is gone")
        self._client.got_text(text)

    async def send_bytes(self, data: bytes) -> None:
        if self._closed or self._client.gone:
            raise ConnectionError("the socket is gone")
        self._client.got_audio(len(data) // 2)

    async def close(self, code: int, reason: str) -> None:
        if not self._closed:
            self._closed = True
            self._in.put_nowait(None)
            self._client.closed_by_server(code)


Entrypoint = Callable[[Any], Awaitable[None]]


class MemoryClient:
    def __init__(
        self,
        entrypoint: Entrypoint,
        *,
        resume: Any = None,
        mic_rate: int = 16000,
        jitter: float = 0.05,
        options: WebSocketOptions | None = None,
    ) -> None:
        self.socket = MemorySocket(self)
        self.mic_rate = mic_rate
        self.jitter = jitter
        self.messages: list[tuple[float, ServerMessage]] = []
        self.rate = 0
        self.received = self.played = self.queued = 0
        self.reports: list[tuple[float, int]] = []
        self.close_code: int | None = None
        self.gone = False
        """The client dropped or closed: it reads and sends nothing more."""
        self._burst_at: float | None = None
        self._last_tick = 0.0
        self._speech: asyncio.Queue[tuple[bytes, asyncio.Future[None]]] = asyncio.Queue()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.peer, binding = client_socket(
            entrypoint,
            options or WebSocketOptions(),
            lambda entry, conn: entry(conn),
            remote="memory",
            query={},
            resume=resume,
            goodbye=lambda: self.socket.client_code == 1000,
        )
        self.loop_task = asyncio.ensure_future(run_socket(self.socket, binding))

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    # ----------------------------------------------------------- the session

    async def start(self, resume: str | None = None, within: float = 5.0) -> ServerMessage:
        """Send ``start`` and wait for the answer: a ``ready``, or the error of a refusal."""
        message: dict[str, Any] = {"type": "start", "sample_rate": self.mic_rate}
        if resume is not None:
            message["resume"] = resume
        self.socket.from_client(json.dumps(message))
        answer = await self.wait_for(lambda m: True, within)
        if isinstance(answer, Ready):
            self.rate = answer.sample_rate
            self._last_tick = self.now
            self._tasks += [asyncio.ensure_future(self._play()), asyncio.ensure_future(self._mic())]
        return answer

    def send(self, message: dict[str, Any]) -> None:
        if not self.gone:
            self.socket.from_client(json.dumps(message))

    async def speak(self, seconds: float) -> None:
        """Say a tone of ``seconds`` into the microphone (in real time)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._speech.put_nowait((speech_frame(seconds, self.mic_rate).to_pcm(), done))
        await done

    async def drop(self) -> None:
        """The connection breaks: no close frame; nothing more is read or sent."""
        await self._stop()
        self.socket.from_client(None)

    async def goodbye(self) -> None:
        """Close with 1000."""
        self.socket.client_code = 1000
        await self._stop()
        self.socket.from_client(None)

    async def ended(self, within: float) -> None:
        """Wait until the server is done with this connection."""
        await asyncio.wait_for(asyncio.shield(self.loop_task), within)

    async def _stop(self) -> None:
        self.gone = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._changed.set()

    # ------------------------------------------------------------ reading

    def states(self) -> list[str]:
        return [m.state for _, m in self.messages if isinstance(m, AgentStateMessage)]

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [m for _, m in self.messages if isinstance(m, kind)]

    async def wait_for(
        self, predicate: Callable[[ServerMessage], bool], within: float, *, after: int = 0
    ) -> ServerMessage:
        async with asyncio.timeout(within):
            seen = after
            while True:
                for _, message in self.messages[seen:]:
                    if predicate(message):
                        return message
                seen = len(self.messages)
                if self.close_code is not None:
                    raise AssertionError(f"closed ({self.close_code}) while waiting")
                self._changed.clear()
                await self._changed.wait()

    def got_text(self, text: str) -> None:
        message = parse_server_message(text)
        self.messages.append((self.now, message))
        if isinstance(message, Clear):
            self._advance()
            self.queued = 0
            self._burst_at = None
            self._report(cleared=True)
        self._changed.set()

    def got_audio(self, samples: int) -> None:
        self._advance()
        if self.queued == 0:
            self._burst_at = self.now + self.jitter
        self.received += samples
        self.queued += samples
        self._changed.set()

    def closed_by_server(self, code: int) -> None:
        self.close_code = code
        self.gone = True
        for task in self._tasks:
            task.cancel()
        self._changed.set()

    # ------------------------------------------------------------ playing

    def _advance(self) -> None:
        now = self.now
        if self.queued and self._burst_at is not None and now > self._burst_at:
            since = max(self._last_tick, self._burst_at)
            step = min(self.queued, round((now - since) * self.rate))
            self.played += step
            self.queued -= step
        self._last_tick = now

    def _report(self, cleared: bool = False) -> None:
        self.reports.append((self.now, self.played))
        message: dict[str, Any] = {"type": "played", "samples": self.played}
        if cleared:
            message["cleared"] = True
        self.send(message)

    async def _play(self) -> None:
        last, reported = 0.0, -1
        while True:
            await asyncio.sleep(TICK)
            self._advance()
            if self.now - last >= REPORT_EVERY and (self.played != reported or self.queued):
                last, reported = self.now, self.played
                self._report()
                self._changed.set()

    async def _mic(self) -> None:
        step = round(TICK * self.mic_rate) * 2
        quiet = bytes(step)
        pending, offset, done = b"", 0, None
        loop = asyncio.get_running_loop()
        began, sent = loop.time(), 0
        while True:
            if offset >= len(pending):
                if done is not None and not done.done():
                    done.set_result(None)
                pending, offset, done = b"", 0, None
                if not self._speech.empty():
                    pending, done = self._speech.get_nowait()
            if pending:
                data, offset = pending[offset : offset + step], offset + step
            else:
                data = quiet
            self.socket.from_client(data)
            sent += 1
            await asyncio.sleep(max(0.0, began + sent * TICK - loop.time()))
