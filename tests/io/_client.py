"""A Python client of protocol v1 for the real-socket tests: it streams microphone audio in
real time and plays what it receives through a simulated speaker, a clock that consumes
agent samples at the server's rate, reporting ``played`` as a browser page would.

The speaker holds ``jitter`` seconds of audio before it starts a burst (like a real jitter
buffer), so "audio arrived" and "audio is heard" are measurably apart: a server that set
``speaking`` on sending would be caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

import rejoinder as rj
from rejoinder.io.outbox import CloseRequest, Outbox
from rejoinder.io.protocol import (
    AgentStateMessage,
    Clear,
    Ready,
    ServerMessage,
    parse_server_message,
)
from rejoinder.models.tts import TTS
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedVAD

TICK = 0.02
REPORT_EVERY = 0.05  # the protocol asks for at least every 100 ms


@dataclass
class Report:
    at: float
    samples: int
    cleared: bool


@dataclass
class VoiceClient:
    ws: aiohttp.ClientWebSocketResponse
    mic_rate: int
    jitter: float = 0.15
    messages: list[tuple[float, ServerMessage]] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    audio_arrivals: list[tuple[float, int]] = field(default_factory=list)
    """(time, samples) of each agent audio frame received."""
    rate: int = 0
    received: int = 0
    played: int = 0
    queued: int = 0
    dropped: int = 0
    close_code: int | None = None
    _burst_at: float | None = None
    _last_tick: float = 0.0
    _last_report: float = 0.0
    _reported: int = -1
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def start(self, within: float = 10.0, *, timeline: bool = False) -> Ready:
        start: dict[str, Any] = {"type": "start", "sample_rate": self.mic_rate}
        if timeline:
            start["timeline"] = True
        await self.ws.send_str(json.dumps(start))
        self._tasks.append(asyncio.create_task(self._read()))
        ready = await self.wait_for(lambda m: isinstance(m, Ready), within)
        assert isinstance(ready, Ready)
        self.rate = ready.sample_rate
        self._last_tick = self.now
        self._tasks.append(asyncio.create_task(self._play()))
        self._mic_start()
        return ready

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.ws.close()

    # ------------------------------------------------------------ reading

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [m for _, m in self.messages if isinstance(m, kind)]

    def states(self) -> list[tuple[float, str]]:
        return [(t, m.state) for t, m in self.messages if isinstance(m, AgentStateMessage)]

    async def wait_for(
        self, predicate: Callable[[ServerMessage], bool], within: float, *, after: int = 0
    ) -> ServerMessage:
        """The first message (from index ``after``) matching ``predicate``."""
        async with asyncio.timeout(within):
            seen = after
            while True:
                for _, message in self.messages[seen:]:
                    if predicate(message):
                        return message
                seen = len(self.messages)
                if self.ws.closed:
                    raise AssertionError(f"closed ({self.close_code}) while waiting")
                self._changed.clear()
                await self._changed.wait()

    async def until(self, condition: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    message = parse_server_message(msg.data)
                    self.messages.append((self.now, message))
                    if isinstance(message, Clear):
                        await self._clear()
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    samples = len(msg.data) // 2
                    self.audio_arrivals.append((self.now, samples))
                    self._advance()
                    if self.queued == 0:
                        self._burst_at = self.now + self.jitter
                    self.received += samples
                    self.queued += samples
                self._changed.set()
        finally:
            self.close_code = self.ws.close_code
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

    async def _report(self, cleared: bool = False) -> None:
        self.reports.append(Report(self.now, self.played, cleared))
        self._reported = self.played
        self._last_report = self.now
        message: dict[str, Any] = {"type": "played", "samples": self.played}
        if cleared:
            message["cleared"] = True
        await self.ws.send_str(json.dumps(message))

    async def _clear(self) -> None:
        self._advance()
        self.dropped += self.queued
        self.queued = 0
        self._burst_at = None
        await self._report(cleared=True)

    async def _play(self) -> None:
        while not self.ws.closed:
            await asyncio.sleep(TICK)
            self._advance()
            due = self.now - self._last_report >= REPORT_EVERY
            if due and (self.played != self._reported or self.queued):
                await self._report()
                self._changed.set()

    # ---------------------------------------------------------- speaking

    def _mic_start(self) -> None:
        self._speech: asyncio.Queue[tuple[bytes, asyncio.Future[None]]] = asyncio.Queue()
        self._tasks.append(asyncio.create_task(self._mic()))

    async def _mic(self, chunk: float = 0.02) -> None:
        """Like a microphone: a chunk every 20 ms, silence when nothing is said."""
        step = round(chunk * self.mic_rate) * 2
        quiet = bytes(step)
        loop = asyncio.get_running_loop()
        began, sent = loop.time(), 0
        pending, offset, done = b"", 0, None
        while not self.ws.closed:
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
            await self.ws.send_bytes(data)
            sent += 1
            delay = began + sent * chunk - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def speak(self, pcm: bytes) -> None:
        """Say ``pcm`` (PCM16 mono at ``mic_rate``) into the microphone; returns once it
        was sent (in real time)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._speech.put_nowait((pcm, done))
        await done

    async def silence(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def scripted_session(
    replies: list[list[Any]], transcripts: list[str], tts: Callable[[], TTS]
) -> Callable[[], rj.AgentSession[Any]]:
    """A factory for sessions on the test kit's scripted models (one per connection),
    quick to end a turn, that never mark the user away."""

    def make() -> rj.AgentSession[Any]:
        return rj.AgentSession(
            llm=ScriptedLLM(replies),
            vad=ScriptedVAD(),
            stt=ScriptedSTT(transcripts),
            tts=tts(),
            user_away_timeout=None,
            min_endpointing_delay=0.1,
        )

    return make


async def written(outbox: Outbox) -> list[Any]:
    """Everything an outbox holds now (JSON text decoded), up to and with its close."""
    items: list[Any] = []
    while True:
        try:
            item = await asyncio.wait_for(outbox.get(), 0.01)
        except TimeoutError:
            return items
        items.append(json.loads(item) if isinstance(item, str) else item)
        if isinstance(item, CloseRequest):
            return items
