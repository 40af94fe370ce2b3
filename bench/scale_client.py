"""A protocol client for the scale tests and benchmarks (``tests/scale``,
``bench/scale_*.py``): one WebSocket session that speaks Piper clips as a microphone
would (16 kHz PCM16, a 20 ms frame every 20 ms, silence in between), plays the agent's
audio on a simulated real-time speaker (``played`` every 50 ms) and waits for answers.

    client = VoiceClient("ws://127.0.0.1:8000/ws", name="3")
    await client.open(http)               # start, then ready
    answer = await client.ask(clip, "sunny")
    await client.close()

``closed`` is set when the server ends the socket; ``close_code`` says how.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from _voice import FRAME, RATE, Clip, clips, paced_frames

__all__ = ["QUESTIONS", "Answer", "VoiceClient", "question_clips"]

REPORT_EVERY = 0.05

QUESTIONS = (
    ("What's the weather in Paris?", "sunny"),
    ("What's the weather in London?", "rain"),
    # Not Rome: on one machine's CPU Whisper tiny.en heard Piper's "Rome" as "wrong"
    # (the same clip as "Rome" on another), and the scale tests are not about words.
    ("What's the weather in New York?", "partly"),
    ("What's the weather in Tokyo?", "humid"),
    ("What's the weather in Berlin?", "overcast"),
)
"""Spoken questions to the demo agent, each with a word its answer holds."""


async def question_clips() -> list[tuple[Clip, str]]:
    spoken = await clips([text for text, _ in QUESTIONS])
    return [(clip, word) for clip, (_, word) in zip(spoken, QUESTIONS, strict=True)]


@dataclass
class Answer:
    text: str
    latency: float
    """End of the question's speech to the first agent audio of the answer."""


@dataclass
class VoiceClient:
    url: str
    name: str = ""
    ready_timeout: float = 180.0
    ready_at: float | None = None
    opened_at: float | None = None
    close_code: int | None = None
    agent_texts: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.closed = asyncio.Event()
        self.ready = asyncio.Event()
        self.listening = asyncio.Event()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._mic: deque[np.ndarray] = deque()
        self._clip_done: asyncio.Future[float] | None = None
        self._speech_end_sample = 0
        self._rate = 0
        self._queued = 0
        self._played = 0
        self._first_audio: float | None = None
        self._finals: asyncio.Queue[str] = asyncio.Queue()

    # -------------------------------------------------------------- session

    async def open(self, http: aiohttp.ClientSession, *, greeting: bool = True) -> None:
        """Connect, send ``start`` and wait for ``ready`` (a session waiting in the Serve
        proxy's queue for a replica with room waits here)."""
        self.opened_at = time.perf_counter()
        url = f"{self.url}?client={self.name}" if self.name else self.url
        self._ws = await http.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=5))
        await self._ws.send_str(json.dumps({"type": "start", "sample_rate": RATE}))
        self._tasks = [
            asyncio.create_task(self._read()),
            asyncio.create_task(self._speaker()),
            asyncio.create_task(self._microphone()),
        ]
        await asyncio.wait_for(self.ready.wait(), self.ready_timeout)
        self.ready_at = time.perf_counter()
        # the demo agent greets first: let it finish before talking
        if greeting and await self._next_final(60.0) is None:
            raise AssertionError(f"client {self.name}: no greeting ({self.close_code})")

    async def ask(self, clip: Clip, expect: str, within: float = 60.0) -> Answer:
        """Wait for the agent to listen, speak ``clip``, and return the first final agent
        transcript holding ``expect`` (case-insensitive)."""
        await asyncio.wait_for(self.listening.wait(), within)
        while not self._finals.empty():
            self._finals.get_nowait()
        self._first_audio = None
        speech_end = await self._play(clip)
        deadline = time.perf_counter() + within
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or self.closed.is_set():
                raise AssertionError(
                    f"client {self.name}: no answer holding {expect!r} (closed="
                    f"{self.closed.is_set()}, code={self.close_code}, heard={self.agent_texts})"
                )
            text = await self._next_final(left)
            if text is not None and expect.lower() in text.lower():
                heard = self._first_audio or time.perf_counter()
                return Answer(text, max(0.0, heard - speech_end))

    async def _next_final(self, within: float) -> str | None:
        getter = asyncio.ensure_future(self._finals.get())
        closed = asyncio.ensure_future(self.closed.wait())
        done, _ = await asyncio.wait(
            {getter, closed}, timeout=within, return_when=asyncio.FIRST_COMPLETED
        )
        closed.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        return None

    async def close(self) -> None:
        if self._ws is not None and not self._ws.closed:
            with contextlib.suppress(Exception):
                await self._ws.close()
        await self._stop_tasks()

    async def wait_closed(self, within: float) -> bool:
        try:
            await asyncio.wait_for(self.closed.wait(), within)
        except TimeoutError:
            return False
        return True

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # ----------------------------------------------------------- microphone

    async def _play(self, clip: Clip) -> float:
        pcm = np.concatenate([clip.pcm, np.zeros((-clip.pcm.size) % FRAME, np.int16)])
        self._mic.extend(pcm[i : i + FRAME] for i in range(0, pcm.size, FRAME))
        self._speech_end_sample = round(clip.speech_end * RATE)
        self._clip_done = asyncio.get_running_loop().create_future()
        return await self._clip_done

    async def _microphone(self) -> None:
        silence = np.zeros(FRAME, np.int16).tobytes()
        clip_start: float | None = None
        try:
            async for captured in paced_frames(self.closed.is_set):
                assert self._ws is not None
                if self._mic:
                    clip_start = clip_start or captured
                    await self._ws.send_bytes(self._mic.popleft().astype("<i2").tobytes())
                    if not self._mic and self._clip_done is not None:
                        self._clip_done.set_result(clip_start + self._speech_end_sample / RATE)
                        clip_start = None
                else:
                    await self._ws.send_bytes(silence)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass

    # -------------------------------------------------------------- speaker

    async def _speaker(self) -> None:
        last = time.perf_counter()
        reported = -1
        next_report = last
        try:
            while not self.closed.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                if self._queued and self._rate:
                    step = min(self._queued, round((now - last) * self._rate))
                    self._queued -= step
                    self._played += step
                last = now
                if now >= next_report and self._played != reported and self._ws is not None:
                    reported = self._played
                    await self._ws.send_str(json.dumps({"type": "played", "samples": reported}))
                    next_report = now + REPORT_EVERY
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass

    # --------------------------------------------------------------- events

    async def _read(self) -> None:
        assert self._ws is not None
        ws = self._ws
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    self._first_audio = self._first_audio or time.perf_counter()
                    self._queued += len(msg.data) // 2
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                event: dict[str, Any] = json.loads(msg.data)
                kind = event["type"]
                if kind == "ready":
                    self._rate = int(event["sample_rate"])
                    self.ready.set()
                elif kind == "clear":
                    self._queued = 0
                    message = {"type": "played", "samples": self._played, "cleared": True}
                    await ws.send_str(json.dumps(message))
                elif kind == "agent_state":
                    if event["state"] == "listening":
                        self.listening.set()
                    else:
                        self.listening.clear()
                elif kind == "transcript" and event["role"] == "agent" and event["final"]:
                    self.agent_texts.append(event["text"])
                    self._finals.put_nowait(event["text"])
                elif kind == "error":
                    self.errors.append(event)
        finally:
            self.close_code = ws.close_code
            self.closed.set()
