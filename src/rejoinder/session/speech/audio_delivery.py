"""AudioDelivery: a speech's text through the TTS to an audio output (see ``delivery``).

With a plain ``TTS`` the text is cut into sentences and each is synthesized as soon as it
is complete; a ``StreamingTTS`` gets the deltas themselves. Either way one task captures
the audio (resampled to the output's rate) and notes when each piece of text, or each
word when the engine reports ``WordTiming``s, starts in the audio, so ``heard()`` can say
what the user heard before an interruption.

The splitter holds a sentence's end until the next visible character shows it really is
one ("e.g. the" is not). A model that pauses right after a sentence (thinking, streaming a
tool call, a slow backend) would keep a finished sentence unspoken for the whole pause, so
after ``QUIET_RELEASE`` seconds without text the held sentence is spoken anyway
(``text_paused``). The timer is one loop ``TimerHandle``, armed only while a sentence end
is held (not per chunk), on the loop's own clock, and cancelled by new text, the end of
the text and an interruption.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ...models.audio import AudioFrame, AudioOutput, PlaybackFinished
from ...models.audio_utils import Resampler
from ...models.speech_text import SpeechText, clean_for_speech, speech_filter
from ...models.text import TextOutput
from ...models.tts import TTS, SentenceSplitter, StreamingTTS, TTSStream, WordTiming
from ..metrics_emit import TTSMeter
from .channel import Channel
from .delivery import Delivery, OnOutputError, OutputError

QUIET_RELEASE = 0.12
"""Seconds without new text after which a sentence held for the character after its end
is spoken. Short, since the listener waits this long on top of the model's pause; long
enough that a model streaming at a usual rate (deltas tens of milliseconds apart) does
not trigger it, and the splitter's rules alone decide ("e.g." / "3.14"). A backend slower
than about 8 deltas a second may trigger it; ``SentenceSplitter.release`` then guesses,
and the worst it does is split a sentence in two, never lose or repeat text."""


@dataclass(slots=True)
class _Segment:
    """One synthesis: a sentence, or everything given to a streaming TTS."""

    text: str
    start: float  # seconds into this speech's audio
    duration: float = 0.0
    silent: bool = False  # nothing to say once cleaned for speech (an emoji, code)


@dataclass(frozen=True, slots=True)
class _Word:
    start: float  # seconds into this speech's audio
    end: float
    word: str


class AudioDelivery(Delivery):
    def __init__(
        self,
        audible: Callable[[], None],
        text_output: TextOutput | None,
        on_error: OnOutputError,
        *,
        tts: TTS,
        audio_output: AudioOutput,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        quiet_release: float = QUIET_RELEASE,
        inaudible: Callable[[], None] | None = None,
    ) -> None:
        if not quiet_release >= 0:  # NaN fails this too
            raise ValueError(f"quiet_release must be >= 0 seconds, got {quiet_release!r}")
        super().__init__(audible, text_output, on_error)
        self._tts = tts
        self._output = audio_output
        self._stream: TTSStream | None = tts.stream() if isinstance(tts, StreamingTTS) else None
        self._splitter = SentenceSplitter()
        self._loop = asyncio.get_running_loop()
        self._quiet_release = quiet_release
        self._quiet: asyncio.TimerHandle | None = None
        # The TTS hears cleaned text; segments, transcript and history keep the original.
        self._speech = speech_filter(getattr(tts, "text_filter", clean_for_speech))
        self._sentences: Channel[str | None] = Channel()
        self._segments: list[_Segment] = []
        self._words: list[_Word] = []
        self._resampler: Resampler | None = None
        self._captured = 0.0
        self._playing = False
        self._failure: Exception | None = None
        self._played: asyncio.Future[PlaybackFinished] = self._loop.create_future()
        self._listening = False
        """This speech holds the output's playback reports (from its first frame on:
        a speech that has produced no audio yet must not take them from one still
        playing)."""
        self._meter: TTSMeter | None = None
        self._inaudible = inaudible
        """Tells the speech's owner nobody hears it any more, though it is still owed
        (the output cut it: a client that dropped and may come back)."""
        self._stopping = False
        self._synthesis = spawn(self._synthesize())

    def observe(self, meter: TTSMeter) -> None:
        """Report this speech's synthesis and its first audible moment to ``meter``."""
        self._meter = meter

    async def push_text(self, text: str) -> None:
        # New text ends the quiet now, not after the text output took it: a slow text
        # output must not let the timer release a sentence this text may continue.
        self._cancel_quiet()
        await super().push_text(text)
        if self._stream is not None:
            if self._meter is not None:
                self._meter.text_sent(text)
            if isinstance(self._speech, SpeechText):
                spoken = self._speech.push(text)
            else:  # a custom filter sees the deltas
                spoken = self._speech(text) if self._speech is not None else text
            if spoken:
                self._stream.push_text(spoken)
            return
        for sentence in self._splitter.push(text):
            self._sentences.put(sentence)
        if self._splitter.holding:
            self._quiet = self._loop.call_later(self._quiet_release, self.text_paused)

    def text_paused(self) -> None:
        """The model's text has paused (no delta for ``quiet_release`` seconds, or the
        stream sent something other than text): speak the sentence whose end is only
        waiting for the character after it. Called by the quiet timer; the stream's
        reader may call it at a non-text chunk to skip the wait."""
        self._cancel_quiet()
        if self._stream is not None or self._synthesis.done():
            return  # a streaming TTS gets every delta; a stopped speech says nothing more
        if sentence := self._splitter.release():
            self._sentences.put(sentence)

    def _cancel_quiet(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None

    async def finish(self) -> None:
        if self._stream is not None:
            if isinstance(self._speech, SpeechText) and (rest := self._speech.flush()):
                self._stream.push_text(rest)
            self._stream.end_input()
        else:
            self._cancel_quiet()  # the end of the text releases everything at once
            rest = self._splitter.flush()
            if rest:
                self._sentences.put(rest)
            self._sentences.put(None)
        await self._synthesis
        if self._failure is not None:
            raise self._failure
        self._end_text_segment()
        if self._captured > 0:
            try:
                self._output.flush()
            except Exception as exc:
                raise OutputError(f"the audio output failed: {exc!r}") from exc
            await asyncio.shield(self._played)

    def stop(self) -> None:
        self._stopping = True
        self._cancel_quiet()
        self._synthesis.cancel()
        self._end_text_segment()
        # Audio handed to the output but not yet reported playing (a far-end player
        # still buffering) must be cleared too, or it plays after the interruption.
        if self._playing or self._listening:
            try:
                self._output.clear_buffer()
            except Exception as exc:  # stop() must not raise: report and go on
                self._on_error(exc)

    @property
    def cut_short(self) -> bool:
        return self._played.done() and self._played.result().interrupted

    def heard(self) -> str:
        if not self._played.done():
            return ""
        played = self._played.result()
        if not played.interrupted and self._parts:
            return "".join(self._parts).strip()  # all of it, as written (not as spoken)
        position = played.position
        if self._words:
            # A word counts once most of it was heard.
            return " ".join(w.word for w in self._words if (w.start + w.end) / 2 <= position)
        if self._stream is not None and self._segments:
            self._segments[0].text = "".join(self._parts)
        spoken: list[str] = []
        for segment in self._segments:
            if segment.silent and position > 0 and segment.start <= position + 1e-6:
                spoken.append(segment.text)
                continue
            if segment.duration <= 0:
                break
            if segment.start + segment.duration <= position + 1e-6:
                spoken.append(segment.text)
            elif segment.start < position:
                # Paced by this segment's own speaking rate, cut back to a whole word.
                cut = segment.text[
                    : int(len(segment.text) * (position - segment.start) / segment.duration)
                ]
                partial = cut.rsplit(" ", 1)[0] if " " in cut else ""
                if partial:
                    spoken.append(partial)
                break
        return " ".join(spoken)

    async def _synthesize(self) -> None:
        # The task lives in the activity's task group: a failure must not escape into it
        # (that would tear the whole activity down); ``finish`` re-raises it instead.
        try:
            if self._stream is not None:
                segment = _Segment("", 0.0)
                self._segments.append(segment)
                try:
                    await self._capture_all(self._stream, segment)
                finally:
                    await self._stream.aclose()
            else:
                while (sentence := await self._sentences.get()) is not None:
                    spoken = self._speech(sentence) if self._speech is not None else sentence
                    if not spoken:  # nothing to say (an emoji, a table rule, code)
                        self._segments.append(_Segment(sentence, self._captured, silent=True))
                        continue
                    segment = _Segment(sentence, self._captured)
                    self._segments.append(segment)
                    if self._meter is not None:
                        self._meter.text_sent(spoken)
                    await self._capture_all(self._tts.synthesize(spoken), segment)
        except Exception as exc:
            self._failure = exc
        finally:
            if self._meter is not None:
                self._meter.ended()

    async def _capture_all(
        self, items: AsyncIterable[AudioFrame | WordTiming], segment: _Segment
    ) -> None:
        """Capture one synthesis. After its first frame (captured at once, so playback
        starts with no extra hop) the TTS is read ahead of the output: an output that
        takes audio only in real time (a phone line, a paced WebRTC track) must not hide
        how long this text's audio is, which ``heard()`` needs to place an interruption."""
        source = aiter(items)
        async for item in source:
            if (frame := self._take(item, segment)) is not None:
                await self._capture(frame)
                break
        else:
            await self._capture_tail(segment)
            return
        frames: Channel[AudioFrame | None] = Channel()
        reader = asyncio.ensure_future(self._read_ahead(source, segment, frames))
        try:
            while (frame := await frames.get()) is not None:
                await self._capture(frame)
            await reader  # its failure, if any, is this synthesis's failure
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    async def _read_ahead(
        self,
        source: AsyncIterator[AudioFrame | WordTiming],
        segment: _Segment,
        frames: Channel[AudioFrame | None],
    ) -> None:
        try:
            async for item in source:
                if (frame := self._take(item, segment)) is not None:
                    frames.put(frame)
            if (tail := self._tail(segment)) is not None:
                frames.put(tail)
        finally:
            frames.put(None)

    def _take(self, item: AudioFrame | WordTiming, segment: _Segment) -> AudioFrame | None:
        """A synthesized item: a word timing is noted; a frame is resampled to the
        output's rate and counted in the segment's length."""
        if isinstance(item, WordTiming):
            self._words.append(
                _Word(segment.start + item.start, segment.start + item.end, item.word)
            )
            return None
        if self._meter is not None:
            self._meter.audio(item.duration)
        frame: AudioFrame | None = item
        rate = self._output.sample_rate
        if rate is not None and item.sample_rate != rate:
            if self._resampler is None:
                self._resampler = Resampler(item.sample_rate, rate, item.num_channels)
            frame = self._resampler.push(item)
        if frame is not None:
            segment.duration += frame.duration
        return frame

    def _tail(self, segment: _Segment) -> AudioFrame | None:
        if self._resampler is None:
            return None
        tail = self._resampler.flush()
        self._resampler = None
        if tail is not None:
            segment.duration += tail.duration
        return tail

    async def _capture_tail(self, segment: _Segment) -> None:
        if (tail := self._tail(segment)) is not None:
            await self._capture(tail)

    async def _capture(self, frame: AudioFrame) -> None:
        if not self._listening:
            self._listening = True
            self._output.set_listener(self._playback_started, self._playback_finished)
        try:
            await self._output.capture_frame(frame)
        except Exception as exc:
            raise OutputError(f"the audio output failed: {exc!r}") from exc
        self._captured += frame.duration

    def _playback_started(self) -> None:
        self._playing = True
        self._audible()
        if self._meter is not None:
            self._meter.heard()

    def _playback_finished(self, event: PlaybackFinished) -> None:
        # Audible ends when the reply closes, in the same floor step: clearing it here
        # would report a 0 ms "thinking" between the end of audio and the close.
        self._playing = False
        if not self._played.done():
            self._played.set_result(event)
            if event.interrupted and not self._stopping and self._inaudible is not None:
                # The output cut it, not we (no barge-in, no interrupt): the reply stays
                # owed while it is still being produced, but nobody hears it now, so it
                # must stop counting as audible (no `speaking` while nobody listens).
                self._inaudible()
