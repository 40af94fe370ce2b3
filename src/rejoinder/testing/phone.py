"""FakePhoneCall: a Twilio Media Streams peer for tests, over a real WebSocket, in real time.

It behaves as Twilio does on a call answered with ``<Connect><Stream>``: it sends
``connected`` and ``start`` (call and stream ids, custom parameters), then the caller's
audio as base64 μ-law, 20 ms a message, continuously (silence between phrases, as a phone
line does). The agent's audio goes into a playout buffer that a 20 ms clock drains in real
time, after a small jitter delay; what it plays is recorded with the time it was heard.
A mark is echoed when the playout passes it (at once when nothing is buffered); ``clear``
empties the buffer and, like Twilio, echoes the marks it held (``marks_on_clear="drop"``
drops them instead, as Plivo does). ``press`` sends keypad digits, ``hang_up`` a ``stop``.

It can also be the far end the agent calls: ``keys_heard`` decodes the DTMF tones in what
it played (the audio alone, ``keypad_tones.detect_dtmf``), and ``answer_menu`` runs a
phone menu (``MenuNode``): it speaks a prompt, waits for a key in what it hears, follows it
to the next prompt, until a prompt with no keys.

    async with FakePhoneCall.connect(url) as call:
        await call.say(pcm, rate)                 # the caller speaks (resampled to 8 kHz)
        await call.say_wav("question.wav")        # or from a WAV file
        await call.until(lambda: call.heard_seconds() > 1.0, timeout=10)
        await call.hang_up()
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import wave
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import numpy as np

from ..models import g711
from ..models.audio import PCM16, AudioFrame
from ..models.audio_utils import resample

__all__ = ["FakePhoneCall", "Heard", "MenuNode"]

RATE = 8000
TICK = 0.02
CHUNK = 160  # samples per 20 ms
ACCOUNT_SID = "AC00000000000000000000000000000001"
SILENCE = g711.ulaw_encode(np.zeros(CHUNK, np.int16))
KEY_RELEASE = 0.1
"""Seconds of quiet after a key before the menu answers (its tone has ended)."""


@dataclass(frozen=True, slots=True)
class Heard:
    """20 ms (or less) of agent audio the caller heard, and when."""

    at: float
    pcm: PCM16


@dataclass(frozen=True, slots=True)
class MenuNode:
    """One prompt of a phone menu, and the prompt each key leads to (none: the end)."""

    prompt: str
    keys: Mapping[str, MenuNode] = field(default_factory=dict)


@dataclass
class FakePhoneCall:
    """A caller on Twilio's media-stream protocol, over a real WebSocket, in real time::

        async with FakePhoneCall.connect("ws://127.0.0.1:8000/twilio") as call:
            await call.say(pcm, 16000)            # the caller speaks (resampled to 8 kHz)
            await call.until(lambda: call.heard_seconds() > 1.0, timeout=10)
            await call.press("1#")
            await call.hang_up()

    It sends the caller's audio continuously (silence between phrases), plays the
    agent's audio through a small jitter buffer on a 20 ms clock, echoes each mark once
    its playout passes it, and on ``clear`` empties the buffer. The fields below record
    what happened on the call."""

    ws: aiohttp.ClientWebSocketResponse
    call_sid: str = "CA00000000000000000000000000000001"
    stream_sid: str = "MZ00000000000000000000000000000001"
    jitter: float = 0.06
    """Audio buffered before a burst starts playing (as a real jitter buffer)."""
    marks_on_clear: Literal["echo", "drop"] = "echo"
    line_noise: float = 0.0
    """RMS level (of 32768) of the noise an idle line carries: 0 is digital silence, ~30
    a quiet phone line (so a VAD has real audio to work on between phrases)."""
    heard: list[Heard] = field(default_factory=list)
    marks_received: list[tuple[float, str]] = field(default_factory=list)
    marks_echoed: list[tuple[float, str]] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    received_samples: int = 0
    media_sent: int = 0
    """Media messages (20 ms each) sent so far: phrases and the idle line."""
    other: list[dict[str, Any]] = field(default_factory=list)
    """Messages that were neither media, mark nor clear (there should be none)."""
    close_code: int | None = None
    menu_log: list[tuple[float, str, str]] = field(default_factory=list)
    """What ``answer_menu`` did, when: ``("said", prompt)`` once a prompt was spoken,
    ``("key", key)`` once a key was detected in the audio heard."""
    _buffer: deque[PCM16 | str] = field(default_factory=deque)
    _buffered: int = 0
    _playing: bool = False
    _waiting_since: float | None = None
    _mic: deque[bytes] = field(default_factory=deque)
    _sequence: int = 0
    _chunk_no: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _began: float = 0.0
    _noise: list[bytes] = field(default_factory=list)

    # ---------------------------------------------------------------- setup

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        url: str,
        *,
        parameters: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        **options: Any,
    ) -> AsyncIterator[FakePhoneCall]:
        """Open the media socket at ``url`` and start the stream (with ``parameters`` as
        Twilio's ``customParameters``); on exit, hang up if still on the line."""
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(url, headers=dict(headers or {}))
            call = cls(ws, **options)
            try:
                await call.start(parameters or {})
                yield call
            finally:
                await call.aclose()

    async def start(self, parameters: Mapping[str, str]) -> None:
        if self.line_noise > 0:  # one second of it, looped
            rng = np.random.default_rng(abs(hash(self.call_sid)) % 2**32)
            noise = rng.normal(0.0, self.line_noise, RATE).clip(-32768, 32767)
            encoded = g711.ulaw_encode(noise.astype(np.int16))
            self._noise = [encoded[i : i + CHUNK] for i in range(0, RATE, CHUNK)]
        loop = asyncio.get_running_loop()
        self._began = loop.time()
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send(
            {
                "event": "start",
                "sequenceNumber": self._next_sequence(),
                "start": {
                    "accountSid": ACCOUNT_SID,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": dict(parameters),
                },
                "streamSid": self.stream_sid,
            }
        )
        self._tasks = [
            asyncio.create_task(self._read(), name="fake-call-reader"),
            asyncio.create_task(self._clock(), name="fake-call-clock"),
        ]

    # ------------------------------------------------------------ the caller

    async def say(self, pcm: PCM16, sample_rate: int) -> None:
        """Speak ``pcm`` into the line (real time: returns once it was all sent)."""
        audio = resample(AudioFrame(np.asarray(pcm, np.int16), sample_rate), RATE).data
        encoded = g711.ulaw_encode(audio)
        for start in range(0, len(encoded), CHUNK):
            self._mic.append(encoded[start : start + CHUNK].ljust(CHUNK, SILENCE[:1]))
        await self.until(lambda: not self._mic, timeout=len(encoded) / RATE + 5)

    async def say_wav(self, path: str | Path) -> None:
        """Speak a WAV file (16-bit PCM, any rate; channels are mixed down to mono)."""
        with wave.open(str(path), "rb") as wav:
            if wav.getsampwidth() != 2:
                raise ValueError(f"{path}: only 16-bit PCM WAV files are supported")
            channels, rate = wav.getnchannels(), wav.getframerate()
            pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
        if channels > 1:
            pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
        await self.say(pcm.astype(np.int16), rate)

    def save_heard(self, path: str | Path) -> None:
        """Write what the caller heard (gaps left out) as an 8 kHz mono WAV file."""
        with wave.open(str(path), "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(RATE)
            wav.writeframes(self.heard_audio().astype("<i2").tobytes())

    async def silence(self, seconds: float) -> None:
        """Say nothing for ``seconds`` (the line carries silence meanwhile)."""
        await asyncio.sleep(seconds)  # the clock sends silence meanwhile

    async def press(self, digits: str, *, gap: float = 0.15) -> None:
        """Press keys on the keypad, ``gap`` seconds apart."""
        for digit in digits:
            await self._send(
                {
                    "event": "dtmf",
                    "streamSid": self.stream_sid,
                    "sequenceNumber": self._next_sequence(),
                    "dtmf": {"track": "inbound_track", "digit": digit},
                }
            )
            await asyncio.sleep(gap)

    async def hang_up(self) -> None:
        """The caller hangs up: ``stop``, then the socket closes."""
        if self.ws.closed:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._send(
                {
                    "event": "stop",
                    "sequenceNumber": self._next_sequence(),
                    "streamSid": self.stream_sid,
                    "stop": {
                        "accountSid": ACCOUNT_SID,
                        "callSid": self.call_sid,
                    },
                }
            )
        await self.aclose()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if not self.ws.closed:
            await self.ws.close()
        self.close_code = self.ws.close_code if self.close_code is None else self.close_code

    # --------------------------------------------------------- observations

    def heard_seconds(self) -> float:
        """Seconds of agent audio the caller has heard so far."""
        return sum(len(h.pcm) for h in self.heard) / RATE

    def heard_audio(self) -> PCM16:
        """Everything the caller heard, end to end (gaps left out)."""
        if not self.heard:
            return np.zeros(0, np.int16)
        return np.concatenate([h.pcm for h in self.heard])

    def audible_at(self, *, threshold: int = 200) -> list[float]:
        """Times of the played chunks that were not near-silence."""
        return [h.at for h in self.heard if len(h.pcm) and int(np.abs(h.pcm).max()) > threshold]

    def keys_heard(self, since: float | None = None) -> str:
        """The DTMF keys in what the caller heard (from loop time ``since`` on), decoded
        from the audio alone, in order."""
        from ..io.telephony.keypad_tones import detect_dtmf

        pieces = [h.pcm for h in self.heard if since is None or h.at >= since]
        return detect_dtmf(np.concatenate(pieces), RATE) if pieces else ""

    async def answer_menu(
        self,
        menu: MenuNode,
        voice: Callable[[str], PCM16],
        *,
        key_timeout: float = 5.0,
    ) -> MenuNode:
        """Be a phone menu: speak ``voice(prompt)`` (8 kHz PCM) into the line, wait for a
        key in the audio heard since the prompt began (keys pressed over the prompt count,
        as on a real menu), and go where it leads; a key the menu does not know repeats
        the prompt. Returns the node with no keys once its prompt was spoken;
        ``TimeoutError`` when no key comes within ``key_timeout`` of a prompt's end."""
        loop = asyncio.get_running_loop()
        node = menu
        while True:
            began = loop.time()
            await self.say(voice(node.prompt), RATE)
            self.menu_log.append((loop.time(), "said", node.prompt))
            if not node.keys:
                return node
            async with asyncio.timeout(key_timeout):
                while not (keys := self.keys_heard(since=began)):  # noqa: ASYNC110
                    await asyncio.sleep(0.04)  # a decode every two chunks played
            self.menu_log.append((loop.time(), "key", keys[0]))
            # The next prompt once the keys went quiet (their end must not count again).
            async with asyncio.timeout(key_timeout):
                while loop.time() - max(self.audible_at(), default=0.0) < KEY_RELEASE:  # noqa: ASYNC110
                    await asyncio.sleep(TICK)
            node = node.keys.get(keys[0], node)

    @property
    def closed(self) -> bool:
        """Whether the media socket is closed."""
        return self.ws.closed

    async def until(self, condition: Callable[[], bool], timeout: float) -> None:  # noqa: ASYNC109
        """Wait (real time) until ``condition()`` holds; TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while not condition():
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 0.05)

    # -------------------------------------------------------------- internal

    def _next_sequence(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    async def _send(self, message: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(message))

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            message = json.loads(msg.data)
            event = message.get("event")
            now = loop.time()
            if event == "media":
                pcm = g711.ulaw_decode(base64.b64decode(message["media"]["payload"]))
                self._buffer.append(pcm)
                self._buffered += len(pcm)
                self.received_samples += len(pcm)
            elif event == "mark":
                name = message["mark"]["name"]
                self.marks_received.append((now, name))
                if self._buffered == 0 and not self._buffer:
                    await self._echo(name, now)  # nothing buffered: Twilio answers at once
                else:
                    self._buffer.append(name)
            elif event == "clear":
                self.clears.append(now)
                pending = [item for item in self._buffer if isinstance(item, str)]
                self._buffer.clear()
                self._buffered = 0
                self._playing = False
                self._waiting_since = None
                if self.marks_on_clear == "echo":
                    for name in pending:
                        await self._echo(name, now)
            else:
                self.other.append(message)
            self._changed.set()
        self.close_code = self.ws.close_code
        self._changed.set()

    async def _clock(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        while not self.ws.closed:
            next_tick += TICK
            await asyncio.sleep(max(0.0, next_tick - loop.time()))
            now = loop.time()
            await self._send_mic()
            await self._play(now)
            self._changed.set()

    async def _send_mic(self) -> None:
        if self._mic:
            payload = self._mic.popleft()
        elif self._noise:
            payload = self._noise[self._chunk_no % len(self._noise)]
        else:
            payload = SILENCE
        self._chunk_no += 1
        self.media_sent = self._chunk_no
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._send(
                {
                    "event": "media",
                    "sequenceNumber": self._next_sequence(),
                    "media": {
                        "track": "inbound",
                        "chunk": str(self._chunk_no),
                        "timestamp": str(self._chunk_no * 20),
                        "payload": base64.b64encode(payload).decode("ascii"),
                    },
                    "streamSid": self.stream_sid,
                }
            )

    async def _play(self, now: float) -> None:
        if not self._playing:
            if self._buffered == 0:
                await self._echo_leading_marks(now)
                self._waiting_since = None
                return
            if self._waiting_since is None:
                self._waiting_since = now
            if self._buffered < self.jitter * RATE and now - self._waiting_since < self.jitter:
                return
            self._playing = True
        need = CHUNK
        pieces: list[PCM16] = []
        while need and self._buffer:
            item = self._buffer[0]
            if isinstance(item, str):
                self._buffer.popleft()
                await self._echo(item, now)
                continue
            take = item[:need]
            pieces.append(take)
            need -= len(take)
            self._buffered -= len(take)
            if len(take) == len(item):
                self._buffer.popleft()
            else:
                self._buffer[0] = item[len(take) :]
        if pieces:
            self.heard.append(Heard(now, np.concatenate(pieces)))
        # Marks right behind this chunk are echoed on the next tick, once it has played.
        if self._buffered == 0:
            self._playing = False  # underrun: the next burst waits for the jitter again

    async def _echo_leading_marks(self, now: float) -> None:
        while self._buffer and isinstance(self._buffer[0], str):
            name = self._buffer.popleft()
            assert isinstance(name, str)
            await self._echo(name, now)

    async def _echo(self, name: str, now: float) -> None:
        self.marks_echoed.append((now, name))
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._send(
                {
                    "event": "mark",
                    "sequenceNumber": self._next_sequence(),
                    "streamSid": self.stream_sid,
                    "mark": {"name": name},
                }
            )
