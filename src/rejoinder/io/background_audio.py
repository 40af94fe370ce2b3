"""BackgroundAudio: an ambient loop and a "thinking" sound in the agent's audio output,
never counted as the agent speaking.

    session = rj.AgentSession(llm=..., stt=..., tts=..., vad=...)
    rj.BackgroundAudio(ambient="room_tone", thinking="keyboard").attach(session)
    await conn.serve(session, Assistant())

The **ambient** loop plays from the session's start to its end: under the agent's voice
and in the gaps between replies. The **thinking** sound starts once the agent has been
``thinking`` for ``thinking_delay`` seconds (with the user quiet), and stops at once when
the agent starts speaking, when the user starts speaking, or when the agent leaves
``thinking``. It is never mixed under the voice.

It plays through the session's output when that is a ``ReportedPlayback``: every transport
of ``rejoinder.io`` (WebSocket, WebRTC, the phone media streams, SIP). How it stays out of
the agent's speaking (``speaking``, the ``played`` accounting, the heard text) is in
``playback_background``; in short, the voice keeps every sample and position it would have
without it, and a reply that finds background audio sent ahead takes it back with a clear.

Levels: under the voice the background is scaled down in any frame where the sum would
clip, so the voice is never altered; in the gaps the ambient and thinking sounds are summed
and scaled down together if their sum would clip. Sounds are resampled once to the
output's rate (seamlessly: a loop is resampled with its own ends around it).

Sounds: ``"room_tone"`` and ``"keyboard"`` ship with the package (16 kHz WAV, synthesized
by ``tools/make_background_sounds.py``, Apache-2.0 like the rest of rejoinder), or give a
path to a 16-bit PCM WAV file, or an ``AudioFrame``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import math
import os
import wave
from importlib.resources import files
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt
import soxr  # type: ignore[import-untyped]  # ships no type information

from ..models.audio import AudioFrame
from .playback import ReportedPlayback

if TYPE_CHECKING:
    from ..session import AgentSession

__all__ = ["BUILTIN_SOUNDS", "FRAME", "LEAD", "BackgroundAudio", "Sound"]

logger = logging.getLogger("rejoinder.io")

Sound: TypeAlias = "str | os.PathLike[str] | AudioFrame"
"""A built-in sound's name, a WAV file's path, or the audio itself."""

BUILTIN_SOUNDS = ("room_tone", "keyboard")
"""The sounds that ship with the package (``background_sounds/<name>.wav``)."""

FRAME = 0.02
"""Seconds of background audio sent at a time between replies."""

LEAD = 0.1
"""Seconds of background audio sent ahead of real time between replies: what a network's
jitter may delay without the ambient breaking up. A reply takes back what of it is unheard
(see ``playback_background``), so it never delays the voice."""

Floats = npt.NDArray[np.float32]


class BackgroundAudio:
    """An ambient loop and a thinking sound in a session's audio output (see the module
    docstring). ``volume`` scales both (1.0: the level of the sound given); ``lead``: see
    ``LEAD``. Attach it to one session with ``attach``, before or after it starts."""

    def __init__(
        self,
        ambient: Sound | None = None,
        thinking: Sound | None = None,
        *,
        thinking_delay: float = 0.5,
        volume: float = 1.0,
        lead: float = LEAD,
    ) -> None:
        if ambient is None and thinking is None:
            raise ValueError("BackgroundAudio needs an ambient sound, a thinking sound or both")
        if not (math.isfinite(thinking_delay) and thinking_delay >= 0):
            raise ValueError(f"thinking_delay must be >= 0 seconds, not {thinking_delay!r}")
        if not (math.isfinite(volume) and volume >= 0):
            raise ValueError(f"volume must be >= 0, not {volume!r}")
        if not (math.isfinite(lead) and FRAME <= lead <= 2.0):
            raise ValueError(f"lead must be between {FRAME} and 2 seconds, not {lead!r}")
        self.thinking_delay = thinking_delay
        self.volume = volume
        self.lead = lead
        self._ambient = None if ambient is None else _Loop(ambient, volume)
        self._thinking = None if thinking is None else _Loop(thinking, volume)
        self._session: AgentSession[Any] | None = None
        self._mixer: _Mixer | None = None
        self._warned = False
        self._agent_state = "initializing"
        self._user_speaking = False
        self._since: float | None = None
        """When the agent began thinking with the user quiet (None: it is not)."""
        self._timer: asyncio.TimerHandle | None = None
        self.thinking_on = False
        """The thinking sound is on: the agent has been ``thinking`` longer than
        ``thinking_delay`` and the user is not speaking."""

    @property
    def output(self) -> ReportedPlayback | None:
        """The output it plays through (None: not started, or no output that carries it)."""
        return None if self._mixer is None else self._mixer.output

    # ----------------------------------------------------------- the session

    def attach(self, session: AgentSession[Any]) -> BackgroundAudio:
        """Play in ``session``'s audio output from its start (now, if it started) to its
        close. Returns ``self``."""
        if self._session is not None:
            raise RuntimeError("this BackgroundAudio is attached to a session already")
        self._session = session
        session.on("session_started", self._started)
        session.on("agent_state_changed", self._agent_changed)
        session.on("user_state_changed", self._user_changed)
        session.on("close", self._closed)
        self._agent_state = str(session.agent_state)
        self._user_speaking = session.user_state == "speaking"
        if session.started:
            self._install(session)
        return self

    def detach(self) -> None:
        """Stop playing and let go of the session (its output carries no background)."""
        session, self._session = self._session, None
        if session is None:
            return
        session.off("session_started", self._started)
        session.off("agent_state_changed", self._agent_changed)
        session.off("user_state_changed", self._user_changed)
        session.off("close", self._closed)
        self._stop()

    def _started(self, _event: object) -> None:
        if self._session is not None:
            self._install(self._session)

    def _closed(self, _event: object) -> None:
        self._stop()

    def _install(self, session: AgentSession[Any]) -> None:
        if self._mixer is not None:
            return
        output = _reported_playback(session.output.audio)
        if output is None:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "BackgroundAudio plays through a ReportedPlayback (the io transports); "
                    "this session's audio output is %s: no background audio",
                    type(session.output.audio).__name__,
                )
            return
        if output.background is not None:
            raise RuntimeError("the session's output carries another BackgroundAudio already")
        mixer = self._mixer = _Mixer(self, output)
        output.background = mixer
        mixer.task = asyncio.get_running_loop().create_task(
            mixer.run(), name="rejoinder-background-audio"
        )
        self._update(_now())

    def _stop(self) -> None:
        self._cancel_timer()
        self.thinking_on = False
        mixer, self._mixer = self._mixer, None
        if mixer is None:
            return
        if mixer.output.background is mixer:
            mixer.output.background = None
        if mixer.task is not None:
            mixer.task.cancel()

    # ------------------------------------------------------ the thinking sound

    def _agent_changed(self, event: Any) -> None:
        self._agent_state = str(event.new_state)
        self._update(event.created_at)

    def _user_changed(self, event: Any) -> None:
        self._user_speaking = event.new_state == "speaking"
        self._update(event.created_at)

    def _update(self, now: float) -> None:
        if self._agent_state != "thinking" or self._user_speaking:
            self._since = None
            self._cancel_timer()
            if self.thinking_on:
                self._set_thinking(False)
            return
        if self._since is None:
            self._since = now
        if self.thinking_on or self._timer is not None or self._mixer is None:
            return
        due = self._since + self.thinking_delay
        if due <= now:
            self._set_thinking(True)
        else:
            self._timer = asyncio.get_running_loop().call_at(due, self._thinking_due)

    def _thinking_due(self) -> None:
        self._timer = None
        self._update(_now())

    def _set_thinking(self, on: bool) -> None:
        self.thinking_on = on
        mixer = self._mixer
        if mixer is None:
            return
        if on:
            mixer.thinking_at = 0  # each stretch of thinking starts the sound from its top
        elif mixer.thinking_unheard:
            # Stop now, not after what was sent ahead: take it back (when no voice is
            # outstanding; the voice never carries it).
            mixer.output.recall_background()
            mixer.thinking_unheard = False

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Mixer:
    """The background of one output: the sounds' read positions, the mixing, and the task
    that fills the gaps between replies (a ``BackgroundMixer`` for the output)."""

    def __init__(self, owner: BackgroundAudio, output: ReportedPlayback) -> None:
        self.owner = owner
        self.output = output
        self.task: asyncio.Task[None] | None = None
        self.ambient_at = 0
        self.thinking_at = 0
        self.thinking_unheard = False
        """A frame carrying the thinking sound was sent since the last clear."""
        self._due = 0.0
        """When everything sent would have played out at the real-time pace."""

    # ------------------------------------------------ BackgroundMixer

    def under_voice(self, frame: AudioFrame) -> AudioFrame:
        rate, n = frame.sample_rate, frame.samples_per_channel
        self._sent(rate, n)
        loop = self.owner._ambient
        if loop is None or n == 0:
            return frame
        background, self.ambient_at = loop.read(rate, self.ambient_at, n)
        voice = frame.data.astype(np.float32)
        room = 32767.0 - float(np.max(np.abs(voice)))
        peak = float(np.max(np.abs(background)))
        if peak > room:  # the voice's own peaks come first: only the background gives way
            background *= max(0.0, room) / peak
        return AudioFrame(_pcm(voice + background), rate)

    def cleared(self) -> None:
        self._due = _now()
        self.thinking_unheard = False

    # ---------------------------------------------------- the gaps

    def gap(self, rate: int, n: int) -> tuple[AudioFrame, bool]:
        """The next ``n`` samples between replies, and whether they carry the thinking
        sound (never while any of the voice is outstanding)."""
        mixed = np.zeros(n, np.float32)
        ambient, thinking = self.owner._ambient, self.owner._thinking
        if ambient is not None:
            part, self.ambient_at = ambient.read(rate, self.ambient_at, n)
            mixed += part
        with_thinking = thinking is not None and self.owner.thinking_on and not self.output.pending
        if with_thinking:
            assert thinking is not None
            part, self.thinking_at = thinking.read(rate, self.thinking_at, n)
            mixed += part
        peak = float(np.max(np.abs(mixed))) if n else 0.0
        if peak > 32767.0:
            mixed *= 32767.0 / peak
        return AudioFrame(_pcm(mixed), rate), with_thinking

    async def run(self) -> None:
        """Keep the gaps filled ``lead`` seconds ahead, until the output closes."""
        try:
            await self._fill()
        except Exception:  # background audio failing must not go unseen, nor take more down
            logger.exception("background audio stopped")

    async def _fill(self) -> None:
        output = self.output
        loop = asyncio.get_running_loop()
        while not output.closed:
            now = loop.time()
            rate = output.sample_rate
            if rate is not None and output.takes_background and self._due - now < self.owner.lead:
                # One frame at a time: the voice may come between any two.
                n = max(1, round(FRAME * rate))
                kept = (self.ambient_at, self.thinking_at, self._due, self.thinking_unheard)
                frame, with_thinking = self.gap(rate, n)
                self._sent(rate, n)
                self.thinking_unheard |= with_thinking
                if await output.play_background(frame):
                    continue
                # Refused before it was sent: as if it had never been made.
                self.ambient_at, self.thinking_at, self._due, self.thinking_unheard = kept
                await asyncio.sleep(FRAME)
                continue
            # Topped up every half lead (fewer wake-ups than a frame's), and looked at
            # as often while the voice plays: the gap after it is never missed.
            half = self.owner.lead / 2
            await asyncio.sleep(min(half, max(0.001, self._due - half - loop.time())))

    def _sent(self, rate: int, n: int) -> None:
        self._due = max(self._due, _now()) + n / rate


class _Loop:
    """One sound, read as an endless loop at any rate (resampled once per rate)."""

    def __init__(self, sound: Sound, volume: float) -> None:
        samples, rate = _load(sound)
        if samples.size == 0:
            raise ValueError("a background sound must not be empty")
        self._native = samples * np.float32(volume)
        self._rate = rate
        self._at_rate: dict[int, Floats] = {rate: self._native}

    def read(self, rate: int, at: int, n: int) -> tuple[Floats, int]:
        """``n`` samples from position ``at`` (a copy), and the position after them."""
        loop = self._at_rate.get(rate)
        if loop is None:
            loop = self._at_rate[rate] = _resample_loop(self._native, self._rate, rate)
        size = loop.size
        at %= size
        index = (at + np.arange(n)) % size
        return loop[index], (at + n) % size


def _resample_loop(loop: Floats, rate: int, out_rate: int) -> Floats:
    """``loop`` at ``out_rate``, as a loop: resampled with its own end before it and its
    start after it, so its seam stays as seamless as it was."""
    pad = min(loop.size, rate // 10)
    around = np.concatenate((loop[-pad:], loop, loop[:pad]))
    out = np.asarray(soxr.resample(around, rate, out_rate), np.float32)
    skip = round(pad * out_rate / rate)
    length = max(1, round(loop.size * out_rate / rate))
    return np.ascontiguousarray(out[skip : skip + length])


def _load(sound: Sound) -> tuple[Floats, int]:
    """A sound's samples (mono floats, of int16 full scale) and its rate."""
    if isinstance(sound, AudioFrame):
        data = sound.data.reshape(-1, sound.num_channels).astype(np.float32).mean(axis=1)
        return np.ascontiguousarray(data, np.float32), sound.sample_rate
    if isinstance(sound, str) and sound in BUILTIN_SOUNDS:
        wav = files(__package__ or "rejoinder.io") / "background_sounds" / f"{sound}.wav"
        return _read_wav(io.BytesIO(wav.read_bytes()), sound)
    if isinstance(sound, str | os.PathLike):
        path = os.fspath(sound)
        if not os.path.exists(path):
            known = ", ".join(repr(name) for name in BUILTIN_SOUNDS)
            raise ValueError(f"{path!r} is neither a built-in sound ({known}) nor a file")
        with open(path, "rb") as file:
            return _read_wav(io.BytesIO(file.read()), path)
    raise TypeError(f"a sound is a name, a WAV file's path or an AudioFrame, not {sound!r}")


def _read_wav(data: io.BytesIO, name: str) -> tuple[Floats, int]:
    try:
        with wave.open(data, "rb") as wav:
            if wav.getsampwidth() != 2:
                raise ValueError(f"{name!r}: 16-bit PCM WAV only, not {8 * wav.getsampwidth()}-bit")
            channels, rate = wav.getnchannels(), wav.getframerate()
            pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"{name!r} is not a WAV file this can read: {exc}") from exc
    mono = pcm.reshape(-1, channels).astype(np.float32).mean(axis=1)
    return np.ascontiguousarray(mono, np.float32), rate


def _reported_playback(output: object) -> ReportedPlayback | None:
    """The ``ReportedPlayback`` behind a session's audio output (through wrappers that
    keep it as ``inner``, as the session recorder's does)."""
    for _ in range(8):
        if isinstance(output, ReportedPlayback):
            return output
        output = vars(output).get("inner") if hasattr(output, "__dict__") else None
        if output is None:
            return None
    return None


def _pcm(samples: Floats) -> npt.NDArray[np.int16]:
    return np.clip(np.round(samples), -32768, 32767).astype(np.int16)


def _now() -> float:
    return asyncio.get_running_loop().time()
