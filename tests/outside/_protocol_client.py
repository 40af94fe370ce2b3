"""A WebSocket client written from docs/protocol.md alone (it imports nothing of rejoinder),
as someone building their own front end would write it, with the shortcuts a simpler
client takes as switches:

- ``confirms_clears=False``: on ``clear`` it drops its queue and goes on counting, never
  sending ``cleared: true``;
- ``reports=False`` (or ``stop_reporting()``): it plays but sends no ``played`` reports.

It plays the agent's audio in real time on a simulated speaker (reports every 100 ms
while playing, once when the queue runs dry) and speaks into the microphone in real
time: 20 ms frames every 20 ms, a tone the scripted VAD hears as speech, or silence.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

FRAME = 0.02


@dataclass
class Seen:
    t: float
    kind: str
    data: dict[str, Any]


@dataclass
class ProtocolClient:
    ws: aiohttp.ClientWebSocketResponse
    rate: int = 16000
    confirms_clears: bool = True
    reports: bool = True
    log: list[Seen] = field(default_factory=list)
    out_rate: int = 0
    queued: int = 0
    played: int = 0
    received: int = 0
    """Agent samples received, ever."""
    close_code: int | None = None
    _play_from: float = 0.0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    # ------------------------------------------------------------------ life

    async def start(self, **fields: Any) -> dict[str, Any]:
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._speaker())]
        await self.ws.send_str(json.dumps({"type": "start", "sample_rate": self.rate, **fields}))
        ready = await self.wait_for(lambda s: s.kind == "ready")
        self.out_rate = int(ready.data["sample_rate"])
        return ready.data

    async def close(self) -> None:
        """Say goodbye: a close frame with 1000 (a connection that just ends is a drop,
        which a server that resumes sessions keeps the session for)."""
        if not self.ws.closed:
            await self.ws.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stop_reporting(self) -> None:
        self.reports = False

    # --------------------------------------------------------------- reading

    def states(self, kind: str = "agent_state") -> list[str]:
        return [s.data["state"] for s in self.log if s.kind == kind]

    def first(self, kind: str, **match: Any) -> Seen | None:
        for seen in self.log:
            if seen.kind == kind and all(seen.data.get(k) == v for k, v in match.items()):
                return seen
        return None

    async def wait_for(self, check: Any, within: float = 10.0) -> Seen:
        async with asyncio.timeout(within):
            index = 0
            while True:
                while index < len(self.log):
                    if check(self.log[index]):
                        return self.log[index]
                    index += 1
                if self.close_code is not None:
                    raise AssertionError(f"the socket closed ({self.close_code}): {self.log}")
                self._changed.clear()
                await self._changed.wait()

    async def wait_state(self, state: str, *, after: float = 0.0, within: float = 10.0) -> Seen:
        return await self.wait_for(
            lambda s: s.kind == "agent_state" and s.data["state"] == state and s.t >= after,
            within,
        )

    async def wait_closed(self, within: float = 10.0) -> int | None:
        async with asyncio.timeout(within):
            while self.close_code is None:
                self._changed.clear()
                await self._changed.wait()
        return self.close_code

    # ------------------------------------------------------------ microphone

    async def speak(self, seconds: float) -> None:
        await self._send_frames(seconds, loud=True)

    async def silence(self, seconds: float) -> None:
        await self._send_frames(seconds, loud=False)

    async def _send_frames(self, seconds: float, *, loud: bool) -> None:
        size = round(FRAME * self.rate)
        t = np.arange(size) / self.rate
        pcm = (np.sin(2 * np.pi * 220 * t) * 6000 if loud else np.zeros(size)).astype("<i2")
        frames = round(seconds / FRAME)
        started = time.monotonic()
        for index in range(frames):
            await self.ws.send_bytes(pcm.tobytes())
            delay = started + (index + 1) * FRAME - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    # -------------------------------------------------------------- internal

    def _note(self, kind: str, data: dict[str, Any]) -> None:
        self.log.append(Seen(time.monotonic(), kind, data))
        self._changed.set()

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    samples = len(msg.data) // 2
                    if not self.queued:
                        self._play_from = time.monotonic()  # the speaker starts now
                    self.queued += samples
                    self.received += samples
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                message = json.loads(msg.data)
                if message.get("type") == "clear":
                    self.queued = 0  # stop at once
                    if self.confirms_clears:
                        await self._report(cleared=True)
                self._note(str(message.get("type")), message)
        finally:
            self.close_code = self.ws.close_code if self.ws.close_code is not None else -1
            self._changed.set()

    async def _speaker(self) -> None:
        """Plays in real time: what came out of the speaker since the last tick (or since
        the audio arrived at an idle speaker), reported every 100 ms."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            since, last = max(last, self._play_from), now
            if not self.queued or not self.out_rate:
                continue
            played = min(self.queued, round((now - since) * self.out_rate))
            self.queued -= played
            self.played += played
            await self._report()

    async def _report(self, *, cleared: bool = False) -> None:
        if not self.reports or self.ws.closed:
            return
        message: dict[str, Any] = {"type": "played", "samples": self.played}
        if cleared:
            message["cleared"] = True
        await self.ws.send_str(json.dumps(message))
