"""Opt-in recording of a session: a stereo WAV of what was heard, and its transcript.

``SessionRecorder(session, "call.wav")``, made before ``session.start``, writes
``call.wav`` (16-bit stereo: the microphone on the left, the agent on the right, both on
the session's loop clock from ``start`` to the ``close`` event) and, on close,
``call.json`` (the history, the agent segments heard and, if the session keeps one, its
timeline). The agent channel holds only what the listener heard: each segment is laid out
from the loop time its output reported *playback started*, cut to the ``position`` of its
*playback finished* report, with the output's pauses kept as silence.

The slots are wrapped when the session starts (its ``session_started`` event), so a
transport that fills them just before ``start`` (``Connection.serve``) is recorded too.
The wrappers forward every call and every playback report unchanged. The WAV is written as
time advances: memory holds about a second of microphone, and a segment until it ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import wave
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .models.audio import PCM16, AudioFrame, AudioInput, AudioOutput, PlaybackFinished
from .models.audio_utils import Resampler, resample

__all__ = ["RecordingError", "SessionRecorder"]

logger = logging.getLogger("rejoinder")

_MIC_LAG = 0.5  # seconds the file trails the clock, so a late mic frame is still placed
_MIC_SLACK = 0.03  # a mic frame this late after the previous one's end is contiguous
_WRITE_EVERY = 1.0  # seconds gathered before a write (the close writes the rest)

Chunks = list[tuple[int, PCM16]]


class RecordingError(OSError):
    """The recording cannot be written (raised when the recorder is attached)."""


@dataclass
class _Segment:
    """One output segment: its captured frames, start and pauses (loop times)."""

    frames: list[tuple[int, PCM16]] = field(default_factory=list)  # (rate, mono samples)
    started_at: float | None = None
    paused_at: float | None = None
    pauses: list[tuple[float, float]] = field(default_factory=list)  # (offset, seconds)

    def offset_at(self, t: float) -> float:
        start = self.started_at if self.started_at is not None else t
        return max(0.0, t - start - sum(d for _, d in self.pauses))


class SessionRecorder:
    """Records ``session`` to ``path`` (a WAV) and ``path`` with ``.json`` (see the module
    docstring). Attach before ``session.start``; it finishes by itself on ``close``."""

    def __init__(self, session: Any, path: str | Path, *, sample_rate: int = 16000) -> None:
        if not isinstance(sample_rate, int) or sample_rate <= 0:
            raise ValueError("sample_rate must be a positive int")
        if session.started:
            raise RuntimeError("attach the recorder before session.start()")
        self.session = session
        self.path = Path(path)
        self.json_path = self.path.with_suffix(".json")
        self.sample_rate = sample_rate
        self.error: BaseException | None = None  # what stopped the recording, if anything
        self.started_at: float | None = None  # loop time of the session's start: sample 0
        self.segments: list[dict[str, Any]] = []
        """Agent segments: ``start`` (seconds into the WAV), ``heard``, ``interrupted``."""
        try:
            self._file: IO[bytes] = self.path.open("wb")
        except OSError as exc:
            why = f"cannot record the session to {self.path}: {exc.strerror or exc}"
            raise RecordingError(exc.errno, why) from exc
        self._wav = wave.open(self._file, "wb")  # noqa: SIM115
        self._wav.setparams((2, 2, sample_rate, 0, "NONE", "not compressed"))
        self._recording = False
        self._written = 0  # samples per channel in the file
        self._left: Chunks = []  # (first sample, samples) on the left channel
        self._right: Chunks = []
        self._mic_cursor = 0
        self._mic_rs: Resampler | None = None
        self._segment = _Segment()
        session.on("session_started", self._on_start)
        session.on("close", self._on_close)

    def _on_start(self, _event: Any) -> None:
        if self.started_at is not None:
            return
        self.session.off("session_started", self._on_start)
        self.started_at = self._now()
        self._recording = True
        slots_in, slots_out = self.session.input, self.session.output
        if isinstance(slots_in.audio, AudioInput):
            slots_in.audio = _TeeInput(slots_in.audio, self)
        if isinstance(slots_out.audio, AudioOutput):
            slots_out.audio = _TeeOutput(slots_out.audio, self)

    def _on_close(self, event: Any) -> None:
        now = self._now()
        if self.started_at is None:
            self.started_at = now
        try:
            if self._recording:
                seg = self._segment
                if seg.started_at is not None:  # no finished report came: as far as played
                    heard = seg.offset_at(now if seg.paused_at is None else seg.paused_at)
                    captured = sum(data.shape[0] / rate for rate, data in seg.frames)
                    self.segment_finished(min(captured, heard), True)
                self._mic_tail()
                self._write_until(self._sample(now))
        except Exception as exc:
            self._fail(exc)
        self._recording = False
        try:
            self._wav.close()
            self._file.close()
        except OSError as exc:
            self._fail(exc)
        self._write_json(now, getattr(event, "reason", None))

    def mic_frame(self, frame: AudioFrame) -> None:
        if not self._recording:
            return
        now = self._now()
        if self._mic_rs is None or self._mic_rs.in_rate != frame.sample_rate:
            self._mic_tail()
            self._mic_rs = Resampler(frame.sample_rate, self.sample_rate)
        out = self._mic_rs.push(AudioFrame(_mono(frame), frame.sample_rate))
        begins = self._sample(now - frame.duration)  # a frame arrives once captured
        self._mic_cursor = max(self._mic_cursor, self._written)
        if begins > self._mic_cursor + _MIC_SLACK * self.sample_rate:
            self._mic_cursor = begins  # the microphone was silent (or gone) meanwhile
        self._place_mic(out)
        self._advance(now)

    def _place_mic(self, out: AudioFrame | None) -> None:
        if out is not None:
            self._left.append((self._mic_cursor, out.data))
            self._mic_cursor += out.data.shape[0]

    def _mic_tail(self) -> None:
        if self._mic_rs is not None:
            self._place_mic(self._mic_rs.flush())
            self._mic_rs = None

    def agent_frame(self, frame: AudioFrame) -> None:
        if self._recording:
            self._segment.frames.append((frame.sample_rate, _mono(frame)))

    def segment_started(self) -> None:
        if self._segment.started_at is None:
            self._segment.started_at = self._now()

    def segment_paused(self) -> None:
        if self._segment.started_at is not None and self._segment.paused_at is None:
            self._segment.paused_at = self._now()

    def segment_resumed(self) -> None:
        seg = self._segment
        if seg.paused_at is not None:
            seg.pauses.append((seg.offset_at(seg.paused_at), self._now() - seg.paused_at))
            seg.paused_at = None

    def segment_finished(self, position: float, interrupted: bool) -> None:
        """Lay out the first ``position`` seconds of the segment where they were heard."""
        seg, self._segment = self._segment, _Segment()
        if not self._recording:
            return
        rate, now = self.sample_rate, self._now()
        start = seg.started_at if seg.started_at is not None else now - position
        audio = _cut(seg.frames, position, rate)
        self.segments.append(
            {"start": start - self._origin(), "heard": position, "interrupted": interrupted}
        )
        first, done, paused = self._sample(start), 0, 0.0
        for offset, seconds in [*seg.pauses, (position + 1.0, 0.0)]:
            cut = min(audio.shape[0], round(offset * rate))
            if cut > done:
                self._right.append((first + done + round(paused * rate), audio[done:cut]))
                done = cut
            paused += seconds
        self._advance(now)

    def _advance(self, now: float) -> None:
        horizon = now - _MIC_LAG
        if self._segment.started_at is not None:  # its heard part is known once it ends
            horizon = min(horizon, self._segment.started_at)
        end = self._sample(horizon)
        if end - self._written >= _WRITE_EVERY * self.sample_rate:
            self._write_until(end)

    def _write_until(self, end: int) -> None:
        if end <= self._written:
            return
        left, right = (_render(c, self._written, end) for c in (self._left, self._right))
        self._wav.writeframes(np.stack((left, right), 1).astype("<i2").tobytes())
        self._written = end

    def _write_json(self, now: float, reason: str | None) -> None:
        origin = self._origin()
        record: dict[str, Any] = {
            "audio": self.path.name,
            "sample_rate": self.sample_rate,
            "channels": ["user", "agent"],
            "started_at": origin,
            "duration": now - origin,
            "close_reason": reason,
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
            "segments": self.segments,
            "history": [_history_item(item) for item in self.session.history],
        }
        timeline = getattr(self.session, "timeline", None)
        if timeline is not None and hasattr(timeline, "entries"):
            record["timeline"] = list(timeline.entries())
        try:
            with self.json_path.open("w", encoding="utf-8") as file:
                json.dump(record, file, indent=2, default=str)
                file.write("\n")
        except (OSError, TypeError, ValueError) as exc:
            self._fail(exc)

    def guard(self, record: Callable[..., None], *args: Any) -> None:
        try:
            record(*args)
        except Exception as exc:  # the recording's failure is never the session's
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Stop recording (the session goes on); the JSON names the error."""
        if self.error is None:
            logger.error("recording to %s failed; recording stops", self.path, exc_info=exc)
            self.error = exc
        self._recording = False
        self._left, self._right = [], []

    def _origin(self) -> float:
        return self.started_at if self.started_at is not None else self._now()

    def _sample(self, t: float) -> int:
        return max(0, round((t - self._origin()) * self.sample_rate))

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()


class _Wrapper:
    inner: Any

    def __getattr__(self, name: str) -> Any:  # what the wrapper lacks, the inner has
        return getattr(vars(self).get("inner"), name)


class _TeeInput(_Wrapper, AudioInput):
    """Yields the wrapped input's frames, handing each to the recorder on arrival."""

    def __init__(self, inner: AudioInput, recorder: SessionRecorder) -> None:
        self.inner, self._recorder = inner, recorder

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        async for frame in self.inner:
            self._recorder.guard(self._recorder.mic_frame, frame)
            yield frame


class _TeeOutput(_Wrapper, AudioOutput):
    """Forwards everything; the inner's reports reach the session unchanged, at once."""

    def __init__(self, inner: AudioOutput, recorder: SessionRecorder) -> None:
        super().__init__(sample_rate=inner.sample_rate, can_pause=inner.can_pause)
        self.inner, self._recorder = inner, recorder
        inner.set_listener(self._started, self._finished)

    async def capture_frame(self, frame: AudioFrame) -> None:
        await self.inner.capture_frame(frame)
        # After: a frame belongs to the segment that is open once the output took it.
        self._recorder.guard(self._recorder.agent_frame, frame)

    def flush(self) -> None:
        self.inner.flush()

    def clear_buffer(self) -> None:
        self.inner.clear_buffer()

    def pause(self) -> None:
        self.inner.pause()
        self._recorder.guard(self._recorder.segment_paused)

    def resume(self) -> None:
        self.inner.resume()
        self._recorder.guard(self._recorder.segment_resumed)

    def _started(self) -> None:
        self._recorder.guard(self._recorder.segment_started)
        self._report_started()

    def _finished(self, report: PlaybackFinished) -> None:
        self._recorder.guard(self._recorder.segment_finished, report.position, report.interrupted)
        if self._on_finished is not None:
            self._on_finished(report)


def _mono(frame: AudioFrame) -> PCM16:
    if frame.num_channels == 1:
        return frame.data
    mixed = frame.data.reshape(-1, frame.num_channels).astype(np.int32).mean(axis=1)
    return np.asarray(mixed, np.int16)


def _cut(frames: list[tuple[int, PCM16]], seconds: float, rate: int) -> PCM16:
    """The first ``seconds`` of ``frames``, at ``rate`` (each run of one rate resampled)."""
    runs: list[tuple[int, list[PCM16]]] = []
    left = seconds
    for frame_rate, data in frames:
        if left <= 0:
            break
        take = min(data.shape[0], round(left * frame_rate))
        left -= take / frame_rate
        if runs and runs[-1][0] == frame_rate:
            runs[-1][1].append(data[:take])
        else:
            runs.append((frame_rate, [data[:take]]))
    parts = [resample(AudioFrame(np.concatenate(run), r), rate).data for r, run in runs]
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def _render(chunks: Chunks, begin: int, end: int) -> PCM16:
    """Mix the chunks' samples in ``[begin, end)``; keep what lies beyond ``end``."""
    out = np.zeros(end - begin, np.int32)
    keep: Chunks = []
    for start, data in chunks:
        stop = start + data.shape[0]
        lo, hi = max(start, begin), min(stop, end)
        if hi > lo:
            out[lo - begin : hi - begin] += data[lo - start : hi - start]
        if stop > end:
            keep.append((max(start, end), data[max(0, end - start) :]))
    chunks[:] = keep
    return np.clip(out, -32768, 32767).astype(np.int16)


def _history_item(item: Any) -> dict[str, Any]:
    """A history item as JSON: an image is described (type, size or URL), not written out."""
    images = getattr(item, "images", ())
    record = dataclasses.asdict(item)
    if images:
        record["images"] = [image.describe() for image in images]
    return record
