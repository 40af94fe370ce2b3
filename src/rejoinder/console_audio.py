"""The microphone and the speaker of ``rejoinder console FILE --audio`` (the ``audio``
extra: sounddevice, on the PortAudio library).

The speaker keeps playback truth as a browser does: ``Speaker`` counts the agent
samples the sound card has taken and reports them as a client's ``played`` (at least
every ``REPORT_EVERY`` seconds while it plays, and when its queue runs dry), so the agent
is ``speaking`` while it is heard; a clear drops what is queued and reports where it
stopped. (Counted when the card takes them, which leads what is audible by the card's
own latency, tens of milliseconds.)

The devices' callbacks run on PortAudio's thread: they copy bytes under a lock and hand
the rest to the event loop. ``AudioDevices`` is what the console needs of the sound card,
so a test can stand in for it; ``open_sound_devices`` is the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

from . import _extras

__all__ = [
    "BLOCK_SECONDS",
    "REPORT_EVERY",
    "AudioDevices",
    "DeviceError",
    "SoundDevices",
    "Speaker",
    "open_sound_devices",
]

REPORT_EVERY = 0.05
"""Seconds of played audio between two reports (the protocol asks for at most 0.1)."""
BLOCK_SECONDS = 0.02
"""Each device callback moves this much audio (20 ms: the session's own frame)."""

Report = Callable[[int, bool], None]
"""``report(samples_played_in_total, cleared)``: ``ReportedPlayback.on_played``."""


class DeviceError(Exception):
    """The sound card cannot be used (the extra, PortAudio or a device is missing)."""


class Speaker:
    """Agent audio (PCM16LE mono at ``rate``) waiting for the sound card, and what it
    played. ``play`` and ``clear`` are called on the event loop, ``fill`` on the device's
    thread; ``report`` is always called on the loop."""

    def __init__(self, rate: int, report: Report, loop: asyncio.AbstractEventLoop) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self._report = report
        self._loop = loop
        self._lock = threading.Lock()
        self._queue = bytearray()
        self._played = 0
        self._reported = 0
        self._report_samples = max(1, round(rate * REPORT_EVERY))

    @property
    def played(self) -> int:
        """Agent samples the card has taken, ever."""
        return self._played

    @property
    def queued(self) -> int:
        """Samples waiting for the card."""
        return len(self._queue) // 2

    def play(self, pcm: bytes) -> None:
        with self._lock:
            self._queue += pcm[: len(pcm) - len(pcm) % 2]

    def clear(self) -> None:
        """Drop what waits (the user talked over it); the report that answers the clear
        says where playback stopped."""
        with self._lock:
            self._queue.clear()
            played = self._reported = self._played
        self._loop.call_soon(self._report, played, True)

    def fill(self, out: Any) -> None:
        """Fill ``out`` (a writable buffer of whole samples) for the card: queued audio,
        then silence. Runs on the device's thread."""
        size = len(out)
        with self._lock:
            take = min(size, len(self._queue))
            data = bytes(self._queue[:take])
            del self._queue[:take]
            self._played += take // 2
            played = self._played
            due = played - self._reported >= self._report_samples
            dry = take > 0 and not self._queue
            if due or dry:
                self._reported = played
        out[:take] = data
        out[take:size] = bytes(size - take)
        if due or dry:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
                self._loop.call_soon_threadsafe(self._report, played, False)


class AudioDevices(Protocol):
    """A microphone and a speaker, mono 16-bit, each at its own rate."""

    mic_rate: int
    speaker_rate: int
    name: str

    def start(self, on_mic: Callable[[bytes], None], fill: Callable[[Any], None]) -> None:
        """Start both: ``on_mic(pcm)`` gets the microphone's audio, ``fill(buffer)`` is
        asked for the speaker's (both from the devices' thread)."""

    def close(self) -> None:
        """Stop both (idempotent)."""


class SoundDevices:
    """The default input and output devices through sounddevice (raw int16 streams)."""

    def __init__(self, sd: Any, *, mic_rate: int, speaker_rate: int, name: str) -> None:
        self._sd = sd
        self.mic_rate = mic_rate
        self.speaker_rate = speaker_rate
        self.name = name
        self._streams: list[Any] = []

    def start(self, on_mic: Callable[[bytes], None], fill: Callable[[Any], None]) -> None:
        def heard(indata: Any, frames: int, time: Any, status: Any) -> None:
            on_mic(bytes(indata))

        def wanted(outdata: Any, frames: int, time: Any, status: Any) -> None:
            fill(outdata)

        try:
            for stream in (
                self._sd.RawInputStream(
                    samplerate=self.mic_rate,
                    channels=1,
                    dtype="int16",
                    blocksize=round(self.mic_rate * BLOCK_SECONDS),
                    callback=heard,
                ),
                self._sd.RawOutputStream(
                    samplerate=self.speaker_rate,
                    channels=1,
                    dtype="int16",
                    blocksize=round(self.speaker_rate * BLOCK_SECONDS),
                    callback=wanted,
                ),
            ):
                self._streams.append(stream)
                stream.start()
        except Exception as exc:  # sounddevice.PortAudioError: no device, a busy device
            self.close()
            raise DeviceError(f"cannot open the sound card: {exc}") from exc

    def close(self) -> None:
        streams, self._streams = self._streams, []
        for stream in streams:
            with contextlib.suppress(Exception):  # closing what failed to open, or twice
                stream.stop()
                stream.close()


def open_sound_devices() -> SoundDevices:
    """The default microphone and speaker, at their own default rates (the session
    resamples); ``DeviceError`` saying what is missing."""
    try:
        with _extras.needed("audio", "rejoinder console --audio", error=DeviceError):
            import sounddevice  # type: ignore[import-untyped]  # ships no type information
    except OSError as exc:  # the package is there, the PortAudio library is not
        raise DeviceError(
            f"rejoinder console --audio needs the PortAudio library ({exc}): install it "
            "with your system's packages (Debian/Ubuntu: apt install libportaudio2; "
            "macOS: brew install portaudio)"
        ) from exc
    try:
        mic = sounddevice.query_devices(kind="input")
        speaker = sounddevice.query_devices(kind="output")
    except Exception as exc:  # sounddevice.PortAudioError: no default device
        raise DeviceError(f"no microphone or speaker to use: {exc}") from exc
    return SoundDevices(
        sounddevice,
        mic_rate=int(mic["default_samplerate"]),
        speaker_rate=int(speaker["default_samplerate"]),
        name=f"{mic['name']} → {speaker['name']}",
    )
