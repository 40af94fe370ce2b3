"""The STT conformance suite: ``STTHarness`` (what a provider's test fills in for its own
server) and ``STTConformance`` (the tests, which use only ``rj.STT``'s public interface
and the harness).

An utterance is heard as the session hears it: a ``StreamingSTT`` gets each frame pushed
as it is spoken (in loop time), then ``transcribe`` with the same frames; a plain ``STT``
gets ``transcribe`` alone. The promises checked: the transcript is the words the server
heard, utterance by utterance (a reset one never leaks into the next); a transient
refusal is retried, a final one raises ``STTError`` with ``retryable`` right and the cause
in the message; a connection dropped mid-utterance or malformed data raise, or are got
past with the whole transcript (never a partial one passed off as the utterance); a
stalled server is given up on within a bounded time; a cancelled recognition leaves
nothing once the recognizer is closed; ``aclose`` is idempotent and releases everything.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, ClassVar

import pytest
import pytest_asyncio

from ...models.stt import STT, StreamingSTT, STTError
from ._common import (
    NotSupported,
    ServedHarness,
    Snapshot,
    aclose_is_idempotent,
    elapsed_since,
    only,
    stage,
    stall_bound,
    suite_marks,
    within,
)

if TYPE_CHECKING:
    from ...models.audio import AudioFrame

__all__ = ["STTConformance", "STTHarness"]

GIVE_UP = 120.0
"""Seconds (virtual under looptime) within which any recognition must end, retries
included."""
FIRST = "Hello there."
SECOND = "Book a table."


class STTHarness(ServedHarness, ABC):
    """What ``STTConformance`` needs from a provider's test: a way to make the recognizer,
    the audio of an utterance, and a way to script how its server hears the *next*
    utterance (or answers the next connection). A scenario the server cannot stage raises
    ``NotSupported("why")`` and the tests that need it are skipped with that reason."""

    stall_timeout: ClassVar[float] = 5.0
    """The longest a recognition may take once the server went silent, as the recognizers
    ``make`` returns are configured (a read timeout, or how long a streaming recognizer
    waits for its final result)."""
    retries: ClassVar[int] = 2
    """How many times the recognizers ``make`` returns retry a transient refusal (their
    ``max_retries``); at least 1. Give them a short backoff."""

    def speech(self) -> list[AudioFrame]:
        """One utterance of audio the server hears as speech: 0.6 s of a loud tone in
        20 ms frames at 16 kHz, by default."""
        from ..scripted_audio import speech_frame

        return [speech_frame(0.02, 16000) for _ in range(30)]

    @abstractmethod
    def make(self) -> STT:
        """A new recognizer that talks to the server, configured as ``stall_timeout`` and
        ``retries`` say."""

    @abstractmethod
    def attempts(self) -> int:
        """How many requests (or connection attempts) the server has received so far,
        refused ones included."""

    def retries_of(self, stt: STT) -> int:
        """How many retries ``stt`` says it made (its own counter), if it keeps one."""
        raise NotSupported("the recognizer keeps no count of its retries")

    @abstractmethod
    def transcript(self, text: str) -> None:
        """The next utterance is heard as ``text``."""

    @abstractmethod
    def refuse(self, *, transient: bool, times: int = 1) -> str:
        """The next ``times`` requests (or connection attempts) are refused: transiently
        (HTTP 429 or 503) or for good (HTTP 401). Returns text the recognizer's error must
        contain to name the cause (the status, or the server's message)."""

    @abstractmethod
    def drop_mid_utterance(self, text: str) -> None:
        """The next utterance is heard as ``text``, but the connection is cut while its
        audio or its answer is under way."""

    @abstractmethod
    def garbage(self, text: str) -> None:
        """The next utterance is heard as ``text``, with data that is not the API's
        protocol (malformed messages) sent during it, or instead of the answer."""

    @abstractmethod
    def stall(self, text: str) -> None:
        """The server goes silent during the next utterance (it reads on, answers
        nothing) and keeps the connection open."""


async def hear(stt: STT, frames: list[AudioFrame]) -> str:
    """The utterance's transcript, as the session gets it."""
    if isinstance(stt, StreamingSTT):
        for frame in frames:
            stt.push(frame, lambda _interim: None)
            await asyncio.sleep(frame.duration)
    transcript = await stt.transcribe(frames)
    return transcript.text


async def _heard(stt: STT, frames: list[AudioFrame], what: str) -> str:
    """``hear``; an ``STTError`` fails the test saying what was being heard."""
    try:
        with only(STTError):
            return await within(GIVE_UP, hear(stt, frames), what)
    except STTError as error:
        raise AssertionError(f"{what} failed: {error}") from error


async def _outcome(stt: STT, frames: list[AudioFrame], what: str) -> str | STTError:
    """The transcript, or the ``STTError`` recognition raised."""
    try:
        with only(STTError):
            return await within(GIVE_UP, hear(stt, frames), what)
    except STTError as error:
        return error


async def _whole_or_error_then_next(
    harness: STTHarness, stt: STT, fault: str, what: str, partial: str, after: str
) -> None:
    """Stage ``fault`` on an utterance: recognizing it raises ``STTError`` or gives its
    whole transcript, never part of it (``partial`` says so); then the next utterance is
    heard."""
    text = "Hello there, how are you?"
    stage(harness, fault, text)
    outcome = await _outcome(stt, harness.speech(), what)
    if not isinstance(outcome, STTError):
        assert outcome == text, f"{partial}: {outcome!r}"
    harness.transcript(SECOND)
    assert await _heard(stt, harness.speech(), f"the utterance after {after}") == SECOND


class STTConformance:
    """The tests every ``rj.STT`` must pass. Subclass it as ``Test...`` and provide a
    ``harness`` fixture (an ``STTHarness`` over your server); see the package docstring."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = suite_marks()

    @pytest_asyncio.fixture
    async def stt(self, harness: STTHarness) -> AsyncIterator[STT]:
        """A recognizer from the harness, closed after the test."""
        async with contextlib.aclosing(harness.make()) as made:
            yield made

    # -- transcripts -------------------------------------------------------------------------

    async def test_an_utterance_is_transcribed(self, harness: STTHarness, stt: STT) -> None:
        harness.transcript(FIRST)
        assert await _heard(stt, harness.speech(), "an utterance") == FIRST

    async def test_utterances_in_a_row_keep_their_own_words(
        self, harness: STTHarness, stt: STT
    ) -> None:
        harness.transcript(FIRST)
        harness.transcript(SECOND)
        assert await _heard(stt, harness.speech(), "the first utterance") == FIRST
        assert await _heard(stt, harness.speech(), "the second utterance") == SECOND

    async def test_a_reset_utterance_does_not_leak_into_the_next(
        self, harness: STTHarness, stt: STT
    ) -> None:
        if not isinstance(stt, StreamingSTT):
            pytest.skip("reset() is a StreamingSTT's")
        harness.transcript("Never mind.")
        harness.transcript(SECOND)
        for frame in harness.speech():
            stt.push(frame, lambda _interim: None)
            await asyncio.sleep(frame.duration)
        stt.reset()
        assert await _heard(stt, harness.speech(), "the utterance after a reset") == SECOND

    # -- refusals ----------------------------------------------------------------------------

    async def test_a_transient_refusal_is_retried(self, harness: STTHarness, stt: STT) -> None:
        stage(harness, "refuse", transient=True)
        harness.transcript(FIRST)
        before = harness.attempts()
        assert await _heard(stt, harness.speech(), "a retried utterance") == FIRST
        assert harness.attempts() - before == 2

    async def test_retries_are_counted(self, harness: STTHarness, stt: STT) -> None:
        before = stage(harness, "retries_of", stt)
        harness.refuse(transient=True)
        harness.transcript(FIRST)
        assert await _heard(stt, harness.speech(), "a retried utterance") == FIRST
        assert harness.retries_of(stt) - before == 1

    async def test_retries_give_up_with_a_retryable_error_naming_the_cause(
        self, harness: STTHarness, stt: STT
    ) -> None:
        cause = stage(harness, "refuse", transient=True, times=harness.retries + 1)
        before = harness.attempts()
        outcome = await _outcome(stt, harness.speech(), "an utterance refused every time")
        assert isinstance(outcome, STTError), f"no STTError when every try failed: {outcome!r}"
        assert outcome.retryable is True
        assert cause in str(outcome), f"the error does not name the cause ({cause!r}): {outcome}"
        assert harness.attempts() - before == harness.retries + 1

    async def test_a_final_refusal_is_not_retried_and_names_the_cause(
        self, harness: STTHarness, stt: STT
    ) -> None:
        cause = stage(harness, "refuse", transient=False)
        before = harness.attempts()
        outcome = await _outcome(stt, harness.speech(), "a refused utterance")
        assert isinstance(outcome, STTError), f"no STTError for a refusal: {outcome!r}"
        assert outcome.retryable is False
        assert cause in str(outcome), f"the error does not name the cause ({cause!r}): {outcome}"
        assert harness.attempts() - before == 1, "a final refusal was retried"
        harness.transcript(SECOND)
        assert await _heard(stt, harness.speech(), "the utterance after") == SECOND

    # -- failures mid-utterance --------------------------------------------------------------

    async def test_a_drop_mid_utterance_never_gives_a_partial_transcript(
        self, harness: STTHarness, stt: STT
    ) -> None:
        await _whole_or_error_then_next(
            harness,
            stt,
            "drop_mid_utterance",
            "an utterance cut midway",
            "a dropped utterance came back partial",
            "a drop",
        )

    async def test_garbage_raises_or_is_skipped_never_truncates(
        self, harness: STTHarness, stt: STT
    ) -> None:
        await _whole_or_error_then_next(
            harness,
            stt,
            "garbage",
            "an utterance with malformed data",
            "malformed data made the transcript partial",
            "garbage",
        )

    async def test_a_stall_is_given_up_on_within_the_timeout(
        self, harness: STTHarness, stt: STT
    ) -> None:
        stage(harness, "stall", FIRST)
        frames = harness.speech()
        bound = stall_bound(harness.stall_timeout)
        if isinstance(stt, StreamingSTT):
            for frame in frames:
                stt.push(frame, lambda _interim: None)
                await asyncio.sleep(frame.duration)
        started = asyncio.get_running_loop().time()
        try:
            with only(STTError):
                transcript = await within(bound, stt.transcribe(frames), "a stalled recognition")
            heard = transcript.text
        except STTError:
            pass
        else:  # what a streaming recognizer heard before the silence may be all it has
            assert FIRST.startswith(heard), f"a stalled recognition made up words: {heard!r}"
        assert elapsed_since(started) <= bound

    # -- cancelling, closing -----------------------------------------------------------------

    async def test_a_cancelled_recognition_leaves_nothing_once_closed(
        self, harness: STTHarness
    ) -> None:
        snapshot = Snapshot(harness.server_port)
        stt = harness.make()
        try:
            stage(harness, "stall", FIRST)
            task = asyncio.create_task(hear(stt, harness.speech()))
            await asyncio.sleep(1.0)  # the audio is out; the answer is awaited
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await within(5.0, task, "the cancelled recognition")
        finally:
            await within(10.0, stt.aclose(), "aclose")
        await snapshot.assert_released("a cancelled recognition, then aclose")

    async def test_aclose_ends_a_recognition_in_progress(self, harness: STTHarness) -> None:
        snapshot = Snapshot(harness.server_port)
        stt = harness.make()
        stage(harness, "stall", FIRST)
        frames = harness.speech()
        task = asyncio.create_task(hear(stt, frames))
        await asyncio.sleep(sum(frame.duration for frame in frames) + 0.2)  # answer awaited
        started = asyncio.get_running_loop().time()
        await within(10.0, stt.aclose(), "aclose with a recognition open")
        try:
            with only(STTError):
                heard = await within(stall_bound(harness.stall_timeout), task, "the recognition")
        except STTError:
            pass
        else:
            assert FIRST.startswith(heard), f"a recognition closed midway made up words: {heard!r}"
        assert elapsed_since(started) < harness.stall_timeout, (
            "the recognition waited for its timeout instead of ending with aclose"
        )
        await snapshot.assert_released("aclose with a recognition open")

    async def test_aclose_is_idempotent_and_releases_everything(self, harness: STTHarness) -> None:
        async def utterance(stt: STT) -> None:
            harness.transcript(FIRST)
            assert await _heard(stt, harness.speech(), "an utterance") == FIRST

        await aclose_is_idempotent(harness, "recognizer", utterance)
