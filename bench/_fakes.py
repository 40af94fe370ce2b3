"""Zero-latency fakes shared by the benchmarks: an LLM and an instant text sink."""

from __future__ import annotations

import statistics
import time
from collections.abc import AsyncIterator, Sequence

import rejoinder as rj
from rejoinder.models.llm import ToolChoice

REPLY = "Sure. Here is the first sentence. And here is the second one."
N_CHUNKS = 12


def split_even(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` pieces of (nearly) equal length."""
    size, extra = divmod(len(text), n)
    pieces: list[str] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


CHUNKS: tuple[str, ...] = tuple(split_even(REPLY, N_CHUNKS))
assert "".join(CHUNKS) == REPLY
assert len(CHUNKS) == N_CHUNKS


class InstantLLM(rj.LLM):
    """Streams ``CHUNKS`` with no delay and keeps no state.

    ``rejoinder.testing.ScriptedLLM`` records a copy of every call's chat context in
    ``.calls``; over hundreds of turns that grows memory and GC work and would skew the
    later turns, so the benchmarks use this stateless model instead.
    """

    def __init__(self, chunks: Sequence[str] = CHUNKS) -> None:
        self._chunks = tuple(rj.ChatChunk(delta=c) for c in chunks)

    def chat(
        self,
        chat_ctx: rj.ChatContext,
        tools: Sequence[rj.ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[rj.ChatChunk]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[rj.ChatChunk]:
        for chunk in self._chunks:
            yield chunk


class InstantSink(rj.TextOutput):
    """Accepts every delta at once; remembers when the first delta of a turn arrived."""

    def __init__(self) -> None:
        self.first_delta_at: float | None = None

    def reset(self) -> None:
        self.first_delta_at = None

    async def capture_text(self, text: str) -> None:
        if self.first_delta_at is None:
            self.first_delta_at = time.perf_counter()

    def flush(self) -> None:
        pass


def clear_context(session: rj.AgentSession[None]) -> None:
    """Drop the conversation so far so every turn sees the same (empty) context."""
    session.current_agent.chat_ctx.items.clear()
    session.history.items.clear()


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    ordered = sorted(v * 1000 for v in values_s)
    return {
        "median": round(statistics.median(ordered), 4),
        "p90": round(percentile(ordered, 90), 4),
        "p99": round(percentile(ordered, 99), 4),
    }


class InstantTTS:
    """Returns 0.5 s of 24 kHz audio per sentence as 25 prebuilt 20 ms frames, at once."""

    def __new__(cls) -> rj.TTS:  # built lazily so text-only benchmarks never import numpy
        import numpy as np

        from rejoinder.models.tts import TTS

        frame = rj.AudioFrame(np.zeros(480, np.int16), 24000)

        class _InstantTTS(TTS):
            async def synthesize(self, text: str) -> AsyncIterator[rj.AudioFrame]:
                for _ in range(25):
                    yield frame

        return _InstantTTS(sample_rate=24000)


def instant_audio_output() -> rj.AudioOutput:
    """An output that accepts frames instantly and finishes a segment on flush."""
    from rejoinder.models.audio import AudioOutput

    class _Instant(AudioOutput):
        def __init__(self) -> None:
            super().__init__(sample_rate=24000, can_pause=False)
            self.first_frame_at: float | None = None
            self._playing = 0.0
            self._open = False

        async def capture_frame(self, frame: rj.AudioFrame) -> None:
            if self.first_frame_at is None:
                self.first_frame_at = time.perf_counter()
            if not self._open:
                self._open = True
                self._report_started()
            self._playing += frame.duration

        def flush(self) -> None:
            if self._open:
                self._open = False
                played, self._playing = self._playing, 0.0
                self._report_finished(played, False)

        def clear_buffer(self) -> None:
            self.flush()

    return _Instant()
