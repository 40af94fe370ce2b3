"""The TTS conformance suite: ``TTSHarness`` (what a provider's test fills in for its own
server) and ``TTSConformance`` (the tests, which use only ``rj.TTS``'s public interface
and the harness).

The promises checked: the audio is all the server sent, in frames at the engine's
``sample_rate`` and ``num_channels`` (with word timings, if any, inside it); a
``StreamingTTS`` speaks pushed text the same way; a transient refusal before the first
audio is retried, a final one raises ``TTSError`` with ``retryable`` right and the cause
in the message, and so is a connection cut before the first audio; a cut, malformed data
or a stall mid-audio raise within a bounded time,
never a shorter audio that looks whole; stopping, cancelling or closing a synthesis
midway leaves nothing behind and the next one works; ``aclose`` is idempotent and
releases everything.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest
import pytest_asyncio

from ...models.tts import TTS, StreamingTTS, TTSError, WordTiming
from ._common import (
    NotSupported,
    ServedHarness,
    Snapshot,
    aclose_is_idempotent,
    cancel_after_first,
    elapsed_since,
    only,
    stage,
    stall_bound,
    suite_marks,
    within,
)

__all__ = ["TTSConformance", "TTSHarness"]

GIVE_UP = 120.0
"""Seconds (virtual under looptime) within which any synthesis must end, retries included."""
TEXT = "Hello there."
FRAME_TOLERANCE = 0.05
"""Seconds of audio a synthesis may differ by from what the server sent (one frame's
rounding at its end)."""


class TTSHarness(ServedHarness, ABC):
    """What ``TTSConformance`` needs from a provider's test: a way to make the engine, and
    a way to script what its server answers to the *next* synthesis. A scenario the server
    cannot stage raises ``NotSupported("why")`` and the tests that need it are skipped."""

    stall_timeout: ClassVar[float] = 5.0
    """The longest a synthesis may take to fail once the server went silent, as the
    engines ``make`` returns are configured (for most: their read timeout)."""
    retries: ClassVar[int] = 2
    """How many times the engines ``make`` returns retry a transient failure before the
    first audio (their ``max_retries``); at least 1. Give them a short backoff."""

    @abstractmethod
    def make(self) -> TTS:
        """A new engine that talks to the server, configured as ``stall_timeout`` and
        ``retries`` say."""

    @abstractmethod
    def attempts(self) -> int:
        """How many requests (or connection attempts) the server has received so far,
        refused ones included."""

    def retries_of(self, tts: TTS) -> int:
        """How many retries ``tts`` says it made (its own counter), if it keeps one."""
        raise NotSupported("the engine keeps no count of its retries")

    @abstractmethod
    def speak(self, text: str, *, pace: float = 0.0) -> float:
        """The next synthesis of ``text`` gets its whole audio; returns how many seconds
        of audio the server will send for it. ``pace``: seconds the server waits before
        each piece of audio it sends (a slow server, for the tests that stop a synthesis
        midway)."""

    @abstractmethod
    def refuse(self, *, transient: bool, times: int = 1) -> str:
        """The next ``times`` requests (or connection attempts) are refused: transiently
        (HTTP 429 or 503) or for good (HTTP 401). Returns text the engine's error must
        contain to name the cause (the status, or the server's message)."""

    @abstractmethod
    def drop_before_audio(self, text: str) -> float:
        """The next synthesis of ``text`` is cut before any audio (the connection is lost
        once the request is in), and the one after gets its whole audio; returns its
        seconds, as ``speak`` does."""

    @abstractmethod
    def drop_mid_audio(self, text: str) -> None:
        """The next synthesis of ``text`` gets part of its audio, then the connection is
        cut."""

    @abstractmethod
    def garbage(self, text: str) -> float | None:
        """The next synthesis of ``text`` gets data that is not the API's protocol
        (a malformed message) among its audio, or instead of it. Returns the seconds of
        audio the reply carries besides (what an engine that skips the malformed data
        must yield whole), or ``None`` when the malformed data is all there is (only an
        error is right then)."""

    @abstractmethod
    def stall(self, text: str) -> None:
        """The next synthesis of ``text`` gets part of its audio (or none), then the
        server goes silent and keeps the connection open."""


class Spoken:
    """What one synthesis yielded."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.frames = 0
        self.words: list[WordTiming] = []
        self.first_audio = asyncio.Event()

    def take(self, tts: TTS, item: object) -> None:
        if isinstance(item, WordTiming):
            self.words.append(item)
            return
        from ...models.audio import AudioFrame

        assert isinstance(item, AudioFrame), f"a TTS yielded {item!r}, not audio or words"
        assert (item.sample_rate, item.num_channels) == (tts.sample_rate, tts.num_channels), (
            f"a {item.sample_rate} Hz, {item.num_channels}-channel frame from a TTS that says "
            f"{tts.sample_rate} Hz, {tts.num_channels} channel(s)"
        )
        self.frames += 1
        self.seconds += item.duration
        self.first_audio.set()

    def check_words(self) -> None:
        starts = [word.start for word in self.words]
        assert starts == sorted(starts), f"word timings out of order: {self.words}"
        for word in self.words:
            assert 0 <= word.start <= word.end <= self.seconds + FRAME_TOLERANCE, (
                f"{word} lies outside the {self.seconds:.3f} s of audio"
            )


async def _spoken(tts: TTS, text: str, what: str) -> Spoken:
    """The whole synthesis of ``text``; a ``TTSError`` fails the test saying what it was."""
    spoken = Spoken()

    async def run() -> None:
        async for item in tts.synthesize(text):
            spoken.take(tts, item)

    try:
        with only(TTSError):
            await within(GIVE_UP, run(), what)
    except TTSError as error:
        raise AssertionError(f"{what} failed: {error}") from error
    return spoken


async def _until_error(tts: TTS, text: str, spoken: Spoken) -> TTSError | None:
    """Read the synthesis of ``text`` into ``spoken``; the ``TTSError`` that ended it."""
    try:
        with only(TTSError):
            async for item in tts.synthesize(text):
                spoken.take(tts, item)
    except TTSError as error:
        return error
    return None


def _whole(spoken: Spoken, seconds: float, what: str) -> None:
    assert abs(spoken.seconds - seconds) <= FRAME_TOLERANCE, (
        f"{what}: {spoken.seconds:.3f} s of audio, the server sent {seconds:.3f} s"
    )


class TTSConformance:
    """The tests every ``rj.TTS`` must pass. Subclass it as ``Test...`` and provide a
    ``harness`` fixture (a ``TTSHarness`` over your server); see the package docstring."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = suite_marks()

    @pytest_asyncio.fixture
    async def tts(self, harness: TTSHarness) -> AsyncIterator[TTS]:
        """An engine from the harness, closed after the test."""
        async with contextlib.aclosing(harness.make()) as made:
            yield made

    # -- speech ------------------------------------------------------------------------------

    async def test_the_whole_audio_arrives_in_the_engines_format(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        seconds = harness.speak(TEXT)
        spoken = await _spoken(tts, TEXT, "a synthesis")
        _whole(spoken, seconds, "a synthesis")
        spoken.check_words()

    async def test_streamed_text_is_spoken_whole(self, harness: TTSHarness, tts: TTS) -> None:
        if not isinstance(tts, StreamingTTS):
            pytest.skip("stream() is a StreamingTTS's")
        seconds = harness.speak(TEXT)
        stream = tts.stream()
        spoken = Spoken()

        async def run() -> None:
            async for item in stream:
                spoken.take(tts, item)

        try:
            stream.push_text("Hello ")
            stream.push_text("there.")
            stream.end_input()
            await within(GIVE_UP, run(), "a streamed synthesis")
        finally:
            await stream.aclose()
        _whole(spoken, seconds, "a streamed synthesis")
        spoken.check_words()

    async def test_two_syntheses_at_once_both_complete(self, harness: TTSHarness, tts: TTS) -> None:
        seconds = harness.speak(TEXT)
        assert harness.speak(TEXT) == seconds
        both = await asyncio.gather(
            _spoken(tts, TEXT, "one synthesis"), _spoken(tts, TEXT, "the other")
        )
        for spoken in both:
            _whole(spoken, seconds, "one of two syntheses at once")

    # -- refusals ----------------------------------------------------------------------------

    async def test_a_transient_refusal_is_retried(self, harness: TTSHarness, tts: TTS) -> None:
        stage(harness, "refuse", transient=True)
        seconds = harness.speak(TEXT)
        before = harness.attempts()
        _whole(await _spoken(tts, TEXT, "a retried synthesis"), seconds, "a retried synthesis")
        assert harness.attempts() - before == 2

    async def test_a_drop_before_the_first_audio_is_retried(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        seconds = stage(harness, "drop_before_audio", TEXT)
        before = harness.attempts()
        spoken = await _spoken(tts, TEXT, "a synthesis cut before its audio")
        _whole(spoken, seconds, "a synthesis cut before its audio")
        assert harness.attempts() - before == 2

    async def test_retries_are_counted(self, harness: TTSHarness, tts: TTS) -> None:
        before = stage(harness, "retries_of", tts)
        harness.refuse(transient=True)
        harness.speak(TEXT)
        await _spoken(tts, TEXT, "a retried synthesis")
        assert harness.retries_of(tts) - before == 1

    async def test_retries_give_up_with_a_retryable_error_naming_the_cause(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        cause = stage(harness, "refuse", transient=True, times=harness.retries + 1)
        before = harness.attempts()
        spoken = Spoken()
        error = await within(GIVE_UP, _until_error(tts, TEXT, spoken), "refused synthesis")
        assert error is not None, "no TTSError when every try failed"
        assert spoken.frames == 0
        assert error.retryable is True
        assert cause in str(error), f"the error does not name the cause ({cause!r}): {error}"
        assert harness.attempts() - before == harness.retries + 1

    async def test_a_final_refusal_is_not_retried_and_names_the_cause(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        cause = stage(harness, "refuse", transient=False)
        before = harness.attempts()
        spoken = Spoken()
        error = await within(GIVE_UP, _until_error(tts, TEXT, spoken), "a refused synthesis")
        assert error is not None, f"no TTSError for a refusal ({spoken.seconds:.3f} s of audio)"
        assert error.retryable is False
        assert cause in str(error), f"the error does not name the cause ({cause!r}): {error}"
        assert harness.attempts() - before == 1, "a final refusal was retried"
        seconds = harness.speak(TEXT)
        _whole(await _spoken(tts, TEXT, "the synthesis after"), seconds, "the synthesis after")

    # -- failures mid-audio ------------------------------------------------------------------

    async def test_a_drop_mid_audio_raises(self, harness: TTSHarness, tts: TTS) -> None:
        stage(harness, "drop_mid_audio", TEXT)
        spoken = Spoken()
        error = await within(GIVE_UP, _until_error(tts, TEXT, spoken), "a synthesis cut midway")
        assert error is not None, f"a cut synthesis ended quietly after {spoken.seconds:.3f} s"
        seconds = harness.speak(TEXT)
        _whole(await _spoken(tts, TEXT, "the synthesis after"), seconds, "the synthesis after")

    async def test_garbage_raises_or_is_skipped_never_truncates(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        whole = stage(harness, "garbage", TEXT)
        spoken = Spoken()
        error = await within(GIVE_UP, _until_error(tts, TEXT, spoken), "malformed audio")
        if error is None:
            assert whole is not None, "a reply of malformed data ended quietly, as if spoken"
            _whole(spoken, whole, "a synthesis with malformed data, got past")
        seconds = harness.speak(TEXT)
        _whole(await _spoken(tts, TEXT, "the synthesis after"), seconds, "the synthesis after")

    async def test_a_stall_fails_within_the_timeout(self, harness: TTSHarness, tts: TTS) -> None:
        stage(harness, "stall", TEXT)
        bound = stall_bound(harness.stall_timeout)
        spoken = Spoken()
        started = asyncio.get_running_loop().time()
        error = await within(bound, _until_error(tts, TEXT, spoken), "a stalled synthesis")
        assert error is not None, f"a stalled synthesis ended quietly after {spoken.seconds} s"
        assert error.retryable is True, "a timeout may work on another try"
        assert elapsed_since(started) <= bound

    # -- stopping early, closing -------------------------------------------------------------

    async def test_cancelling_mid_audio_leaves_nothing_behind(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        harness.speak(TEXT)  # connections pooled by a first synthesis are not a leak
        await _spoken(tts, TEXT, "a first synthesis")
        snapshot = Snapshot()
        harness.speak(TEXT, pace=1.0)
        synthesis = tts.synthesize(TEXT)
        await cancel_after_first(synthesis, GIVE_UP, "the first audio", "the cancelled synthesis")
        await snapshot.assert_released("a cancelled synthesis")
        seconds = harness.speak(TEXT)
        _whole(await _spoken(tts, TEXT, "the synthesis after"), seconds, "the synthesis after")

    async def test_closing_a_synthesis_early_leaves_nothing_behind(
        self, harness: TTSHarness, tts: TTS
    ) -> None:
        harness.speak(TEXT)
        await _spoken(tts, TEXT, "a first synthesis")
        snapshot = Snapshot()
        harness.speak(TEXT, pace=1.0)
        if isinstance(tts, StreamingTTS):
            stream = tts.stream()
            stream.push_text(TEXT)
            stream.end_input()
            items = aiter(stream)
            await within(GIVE_UP, anext(items), "the first audio")
            await within(5.0, stream.aclose(), "closing the stream")
            close = getattr(items, "aclose", None)
            if close is not None:
                await within(5.0, close(), "closing the stream's iterator")
        else:
            synthesis = tts.synthesize(TEXT)
            await within(GIVE_UP, anext(synthesis), "the first audio")
            close = getattr(synthesis, "aclose", None)
            if close is not None:  # an async generator: the consumer's way to stop it
                await within(5.0, close(), "closing the synthesis")
        await snapshot.assert_released("a synthesis closed early")
        seconds = harness.speak(TEXT)
        _whole(await _spoken(tts, TEXT, "the synthesis after"), seconds, "the synthesis after")

    async def test_aclose_ends_a_synthesis_in_progress(self, harness: TTSHarness) -> None:
        snapshot = Snapshot(harness.server_port)
        tts = harness.make()
        harness.speak(TEXT, pace=1.0)
        spoken = Spoken()
        reading = asyncio.create_task(_until_error(tts, TEXT, spoken))
        await within(GIVE_UP, spoken.first_audio.wait(), "the first audio")
        started = asyncio.get_running_loop().time()
        await within(10.0, tts.aclose(), "aclose with a synthesis open")
        error = await within(stall_bound(harness.stall_timeout), reading, "the open synthesis")
        assert error is not None, "a synthesis ended quietly when its engine was closed under it"
        assert elapsed_since(started) < harness.stall_timeout, (
            "the open synthesis waited for its timeout instead of ending with aclose"
        )
        await snapshot.assert_released("aclose with a synthesis open")

    async def test_aclose_is_idempotent_and_releases_everything(self, harness: TTSHarness) -> None:
        async def synthesis(tts: TTS) -> None:
            seconds = harness.speak(TEXT)
            _whole(await _spoken(tts, TEXT, "a synthesis"), seconds, "a synthesis")

        await aclose_is_idempotent(harness, "engine", synthesis)
