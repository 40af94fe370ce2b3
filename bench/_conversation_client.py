"""The conversation benchmark's user: one real-time ``/ws`` client (docs/protocol.md).

- Microphone: a 20 ms frame every 20 ms on the real clock (``_voice.paced_frames``), at
  the connection's rate; between clips it carries the room's noise (or digital silence),
  and clips are added on top of that noise, so the noise runs under the whole stream. On
  the phone band each frame goes through G.711 μ-law and back before it is sent.
- Speaker: consumes the agent's samples in real time (checked every 10 ms), reports
  ``played`` every 50 ms while it plays and once when its queue runs dry; on ``clear`` it
  drops its queue at once and reports ``cleared: true``. The moment audio stops at the
  listener is therefore the moment ``clear`` arrived.
- Log: every server event, and the speaker's own ``play_start`` (agent audio started
  coming out of an idle speaker), ``drained`` (its queue ran dry) and ``clear``, with the
  client's ``time.perf_counter()``. The benchmark reads the figures from this log.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from _voice import paced_frames

REPORT_EVERY = 0.05


@dataclass
class Event:
    t: float
    kind: str  # a server message type, or play_start / drained
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Playing:
    pcm: np.ndarray
    started: asyncio.Future[float]
    done: asyncio.Future[float]
    pos: int = 0


class Client:
    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        rate: int,
        noise: np.ndarray | None,
        line: Callable[[np.ndarray], np.ndarray] | None,
    ) -> None:
        self.ws, self.rate, self.noise, self.line = ws, rate, noise, line
        self.frame = rate // 50
        self.log: list[Event] = []
        self.ready = asyncio.Event()
        self.out_rate = 0
        self.agent_state = ""
        self.user_state = "listening"
        self.closed = False
        self._clip: _Playing | None = None
        self._noise_pos = 0
        self._queued = 0  # agent samples received, not yet played
        self._played = 0
        self._clearing = False  # between a clear and its cleared report: no other report
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(c) for c in (self._read(), self._speaker())]
        await self.ws.send_str(json.dumps({"type": "start", "sample_rate": self.rate}))
        ready = asyncio.ensure_future(self.ready.wait())
        await asyncio.wait([ready, self._tasks[0]], timeout=120, return_when="FIRST_COMPLETED")
        if not self.ready.is_set():
            ready.cancel()
            errors = [e.data for e in self.log if e.kind == "error"]
            raise RuntimeError(f"no ready from the server (errors: {errors})")
        self._tasks.append(asyncio.create_task(self._microphone()))

    async def stop(self) -> None:
        self.closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()

    @property
    def playing(self) -> bool:
        return self._queued > 0

    def agent_quiet(self) -> bool:
        """The agent listens and nothing is playing or being said."""
        return self.agent_state == "listening" and not (self._queued or self._clip)

    def idle(self) -> bool:
        """Nobody talks: the agent listens, the user is silent, the speaker is empty."""
        user_quiet = self.user_state in ("listening", "away")  # away: silent a long time
        return self.agent_state == "listening" and user_quiet and not (self._queued or self._clip)

    # ------------------------------------------------------------ microphone

    def say(self, pcm: np.ndarray) -> tuple[asyncio.Future[float], asyncio.Future[float]]:
        """Start ``pcm`` (at the connection's rate) at the next frame; two futures: the
        capture time of its first sample, and the same time once all of it was sent."""
        loop = asyncio.get_running_loop()
        if self._clip is not None:
            raise RuntimeError("one clip at a time")
        self._clip = _Playing(pcm, loop.create_future(), loop.create_future())
        return self._clip.started, self._clip.done

    def _noise(self, n: int) -> np.ndarray:
        if self.noise is None:
            return np.zeros(n)
        idx = (self._noise_pos + np.arange(n)) % self.noise.size
        self._noise_pos = int(idx[-1] + 1)
        return self.noise[idx]

    async def _microphone(self) -> None:
        n = self.frame
        async for captured in paced_frames(lambda: self.closed):
            frame = self._noise(n)
            clip = self._clip
            if clip is not None:
                if clip.pos == 0:
                    clip.started.set_result(captured)
                part = clip.pcm[clip.pos : clip.pos + n].astype(np.float64)
                frame[: part.size] += part
                clip.pos += n
                if clip.pos >= clip.pcm.size:
                    self._clip = None
                    clip.done.set_result(clip.started.result())
            pcm = np.clip(np.round(frame), -32768, 32767).astype(np.int16)
            if self.line is not None:
                pcm = self.line(pcm)
            await self.ws.send_bytes(pcm.astype("<i2").tobytes())

    # --------------------------------------------------------------- speaker

    async def _speaker(self) -> None:
        last = time.perf_counter()
        reported = 0
        next_report = last
        while not self.closed:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            if self._queued:
                step = min(self._queued, round((now - last) * self.out_rate))
                self._queued -= step
                self._played += step
                if not self._queued:
                    self.log.append(Event(now, "drained"))
                    next_report = now  # the final count, at once
            last = now
            if now >= next_report and self._played != reported and not self._clearing:
                reported = self._played
                await self.ws.send_str(json.dumps({"type": "played", "samples": self._played}))
                next_report = now + REPORT_EVERY

    def _audio(self, data: bytes) -> None:
        if not self._queued:
            self.log.append(Event(time.perf_counter(), "play_start"))
        self._queued += len(data) // 2

    async def _clear(self) -> None:
        self._queued = 0  # dropped at once: the listener hears nothing more
        self._clearing = True
        message = {"type": "played", "samples": self._played, "cleared": True}
        try:
            await self.ws.send_str(json.dumps(message))
        finally:
            self._clearing = False

    # ---------------------------------------------------------------- events

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                self._audio(msg.data)
                continue
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            event: dict[str, Any] = json.loads(msg.data)
            kind = event.get("type", "")
            if kind == "timeline":
                continue
            self.log.append(Event(time.perf_counter(), kind, event))
            if kind == "ready":
                self.out_rate = int(event["sample_rate"])
                self.ready.set()
            elif kind == "clear":
                await self._clear()
            elif kind == "agent_state":
                self.agent_state = event["state"]
            elif kind == "user_state":
                self.user_state = event["state"]
            elif kind == "error":
                print(f"server error: {event}", file=sys.stderr, flush=True)
        self.closed = True
