"""The realtime conformance suite: ``RealtimeHarness`` (what a provider's test fills in
for its own server) and ``RealtimeConformance`` (the tests, which use only the
``RealtimeModel``/``RealtimeSession`` interface and the harness).

A realtime server talks when it likes, so the harness's scripting methods that act on a
live connection are ``async``: they send the events to the connection the session has
open. The promises checked: a spoken reply arrives as agent audio at the model's
``sample_rate`` between ``AgentAudioStarted`` and ``AgentAudioEnded``, with its
transcript; a tool call arrives once, whole; usage comes with the response's end where
the provider reports it; a transient refusal to connect is retried, a final one fails
``start`` with ``RealtimeError(fatal=True)`` naming the cause, and ``events()`` ends; a
connection cut during its set-up is retried; a set-up that never completes fails
``start`` within the connect timeout; a dropped
connection is reported (``ConnectionLost``) and either reconnected (the next reply works)
or the events end; a malformed frame is a non-fatal ``ProviderError`` and the session
goes on; a cancelled ``start`` and ``aclose`` (idempotent, concurrent) leave nothing
running or connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, TypeVar

import pytest
import pytest_asyncio

from ...models.chat import FunctionCallOutput
from ...models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioStarted,
    BackendResponseEnded,
    ConnectionLost,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    RealtimeModel,
    RealtimeSession,
    Reconnected,
    ResponseUsage,
    ToolCallRequested,
    Transcript,
)
from ...models.tools import ToolDefinition
from ._common import (
    NotSupported,
    ServedHarness,
    Snapshot,
    elapsed_since,
    only,
    stage,
    stage_async,
    stall_bound,
    suite_marks,
    within,
)

__all__ = ["RealtimeConformance", "RealtimeHarness"]

E = TypeVar("E")

GIVE_UP = 60.0
"""Seconds (virtual under looptime) within which anything the suite waits for must come."""
WEATHER = ToolDefinition(
    name="get_weather",
    description="Look up the weather.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CONFIG = RealtimeConfig(instructions="Be brief.", tools=[WEATHER])


class RealtimeHarness(ServedHarness, ABC):
    """What ``RealtimeConformance`` needs from a provider's test: a way to make the model,
    to refuse or stall its next connections, and to script what the server sends on the
    live one. A scenario the server cannot stage raises ``NotSupported("why")`` and the
    tests that need it are skipped with that reason."""

    stall_timeout: ClassVar[float] = 5.0
    """The longest ``start`` may take when the server accepts the connection but never
    completes the set-up, as the models ``make`` returns are configured (their connect
    timeout)."""
    retries: ClassVar[int] = 2
    """How many times ``start`` retries a transient refusal with the models ``make``
    returns (their ``max_retries``); at least 1. Give them a short backoff."""

    @abstractmethod
    def make(self) -> RealtimeModel:
        """A new model whose sessions connect to the server, configured as
        ``stall_timeout`` and ``retries`` say, and allowed to reconnect."""

    @abstractmethod
    def attempts(self) -> int:
        """How many connection attempts the server has received so far, refused ones
        included."""

    def retries_of(self, session: RealtimeSession) -> int:
        """How many times ``session`` says it retried its first connection, if it counts."""
        raise NotSupported("the session keeps no count of its connect retries")

    @abstractmethod
    def refuse(self, *, transient: bool, times: int = 1) -> str:
        """The next ``times`` connection attempts are refused: transiently (HTTP 429 or
        503) or for good (HTTP 401). Returns text the ``RealtimeError`` must contain to
        name the cause (the status, or the server's message)."""

    @abstractmethod
    def stall_setup(self) -> None:
        """The next connection is accepted but its set-up never completes (the server
        stays silent). Called before ``make``."""

    @abstractmethod
    async def cut_stalled_setup(self) -> None:
        """After ``stall_setup``, while ``start`` waits on the stalled connection: cut it
        (no closing handshake), and let the next connection's set-up complete."""

    @abstractmethod
    async def reply(self, text: str, *, usage: ResponseUsage | None = None) -> None:
        """Send a whole spoken reply on the live connection: audio, its transcript
        ``text`` (reported by the time the audio ended), and its end (with ``usage``, the
        token counts as the API reports them; ``NotSupported`` if it reports none)."""

    @abstractmethod
    async def call_tool(self, name: str, arguments: dict[str, Any]) -> None:
        """Send one call of tool ``name`` on the live connection, as the API streams one,
        with the response it belongs to ended."""

    @abstractmethod
    async def drop_mid_reply(self, text: str) -> None:
        """Start a reply on the live connection (some audio), then cut the connection
        without a closing handshake."""

    @abstractmethod
    async def garbage(self) -> None:
        """Send a frame that is not the API's protocol (not JSON) on the live connection."""


class Recorder:
    """Reads a session's events in a task, so the tests can wait for them by type."""

    def __init__(self, session: RealtimeSession) -> None:
        self.events: list[RealtimeEvent] = []
        self.ended = False
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._read(session), name="conformance-recorder")

    async def _read(self, session: RealtimeSession) -> None:
        try:
            async for event in session.events():
                self.events.append(event)
                self._changed.set()
        finally:
            self.ended = True
            self._changed.set()

    def of(self, kind: type[E], since: int = 0) -> list[E]:
        return [event for event in self.events[since:] if isinstance(event, kind)]

    async def wait_for(self, kind: type[E], *, since: int = 0, within: float = GIVE_UP) -> E:
        """The first ``kind`` event at or after index ``since``."""
        await self._until(lambda: bool(self.of(kind, since)), within, f"a {kind.__name__}")
        return self.of(kind, since)[0]

    async def wait_ended(self, within: float = GIVE_UP) -> None:
        await self._until(lambda: self.ended, within, "the end of events()")

    async def _until(self, predicate: Callable[[], bool], seconds: float, what: str) -> None:
        async def wait() -> None:
            while not predicate():
                if self.ended:
                    raise AssertionError(f"events() ended before {what}: {self.kinds()}")
                self._changed.clear()
                await self._changed.wait()

        await within(seconds, wait(), f"waiting for {what} (events so far: {self.kinds()})")

    def kinds(self) -> list[str]:
        return [type(event).__name__ for event in self.events]


async def _start(session: RealtimeSession) -> Recorder:
    recorder = Recorder(session)
    try:
        with only(RealtimeError):
            await within(GIVE_UP, session.start(CONFIG), "start")
    except RealtimeError as error:
        raise AssertionError(f"start failed: {error}") from error
    return recorder


async def _start_fails(session: RealtimeSession) -> RealtimeError:
    """``start`` must fail; its error, once ``events()`` ended too."""
    recorder = Recorder(session)
    try:
        with only(RealtimeError):
            await within(GIVE_UP, session.start(CONFIG), "a start that must fail")
    except RealtimeError as error:
        await recorder.wait_ended(within=10.0)
        return error
    raise AssertionError("start succeeded where it had to fail")


async def _spoken(recorder: Recorder, since: int, text: str, sample_rate: int) -> None:
    """A reply sent after index ``since`` arrived whole."""
    await recorder.wait_for(AgentAudioEnded, since=since)
    events = recorder.events[since:]
    audio = [e for e in events if isinstance(e, AgentAudio)]
    assert audio, f"no agent audio before AgentAudioEnded: {recorder.kinds()}"
    started = [i for i, e in enumerate(events) if isinstance(e, AgentAudioStarted)]
    first_audio = next(i for i, e in enumerate(events) if isinstance(e, AgentAudio))
    assert started and started[0] < first_audio, "agent audio came before AgentAudioStarted"
    rates = {event.frame.sample_rate for event in audio}
    assert rates == {sample_rate}, f"agent audio at {rates} Hz, the model says {sample_rate}"
    said = "".join(e.text for e in events if isinstance(e, Transcript) and e.role == "assistant")
    assert said == text, f"the reply's transcript is {said!r}, the server sent {text!r}"


async def _start_unanswered(
    harness: RealtimeHarness,
) -> tuple[RealtimeModel, RealtimeSession, Recorder, asyncio.Task[None]]:
    """A session starting against a server that accepted the connection and leaves the
    set-up unanswered: its model, itself, its recorder and the ``start`` task."""
    stage(harness, "stall_setup")
    model = harness.make()
    session = model.session()
    recorder = Recorder(session)
    starting = asyncio.create_task(session.start(CONFIG))
    await asyncio.sleep(min(1.0, harness.stall_timeout / 2))  # connected, set-up unanswered
    return model, session, recorder, starting


class RealtimeConformance:
    """The tests every ``RealtimeModel`` must pass. Subclass it as ``Test...`` and provide
    a ``harness`` fixture (a ``RealtimeHarness`` over your server); see the package
    docstring."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = suite_marks()

    @pytest_asyncio.fixture
    async def model(self, harness: RealtimeHarness) -> AsyncIterator[RealtimeModel]:
        """A model from the harness, closed after the test."""
        async with contextlib.aclosing(harness.make()) as made:
            yield made

    @pytest_asyncio.fixture
    async def live(self, model: RealtimeModel) -> AsyncIterator[tuple[RealtimeSession, Recorder]]:
        """A started session of ``model`` and the recorder of its events; closed after."""
        session = model.session()
        try:
            recorder = await _start(session)
            yield session, recorder
        finally:
            await within(10.0, session.aclose(), "aclose")

    # -- a live session ----------------------------------------------------------------------

    async def test_a_spoken_reply_arrives_with_its_transcript(
        self, harness: RealtimeHarness, model: RealtimeModel, live: tuple[Any, Recorder]
    ) -> None:
        _, recorder = live
        await stage_async(harness, "reply", "Hello there.")
        await _spoken(recorder, 0, "Hello there.", model.sample_rate)
        assert recorder.of(ProviderError) == [], f"errors on a clean reply: {recorder.events}"
        assert recorder.of(ConnectionLost) == []

    async def test_a_tool_call_arrives_once_whole(
        self, harness: RealtimeHarness, live: tuple[RealtimeSession, Recorder]
    ) -> None:
        session, recorder = live
        arguments = {"city": "Paris"}
        await stage_async(harness, "call_tool", "get_weather", arguments)
        request = await recorder.wait_for(ToolCallRequested)
        call = request.call
        assert call.name == "get_weather"
        assert isinstance(call.call_id, str) and call.call_id
        assert json.loads(call.arguments) == arguments
        await asyncio.sleep(1.0)
        assert len(recorder.of(ToolCallRequested)) == 1, "a tool call was reported twice"
        output = FunctionCallOutput(call_id=call.call_id, name=call.name, output="sunny")
        assert session.submit_tool_output(output, reply_required=True) in ("continue", "silent")

    async def test_usage_comes_with_the_end_of_the_response(
        self, harness: RealtimeHarness, live: tuple[RealtimeSession, Recorder]
    ) -> None:
        _, recorder = live
        usage = ResponseUsage(input_tokens=20, output_tokens=7)
        await stage_async(harness, "reply", "Hi.", usage=usage)
        ended = await recorder.wait_for(BackendResponseEnded)
        assert ended.usage is not None, "the response's end carries no usage"
        assert (ended.usage.input_tokens, ended.usage.output_tokens) == (20, 7)

    # -- connecting --------------------------------------------------------------------------

    async def test_a_transient_refusal_is_retried(
        self, harness: RealtimeHarness, model: RealtimeModel
    ) -> None:
        stage(harness, "refuse", transient=True)
        before = harness.attempts()
        session = model.session()
        try:
            recorder = await _start(session)
            assert harness.attempts() - before == 2
            await stage_async(harness, "reply", "Hello there.")
            await _spoken(recorder, 0, "Hello there.", model.sample_rate)
        finally:
            await within(10.0, session.aclose(), "aclose")

    async def test_connect_retries_are_counted(
        self, harness: RealtimeHarness, model: RealtimeModel
    ) -> None:
        session = model.session()
        try:
            before = stage(harness, "retries_of", session)
            harness.refuse(transient=True)
            await _start(session)
            assert harness.retries_of(session) - before == 1
        finally:
            await within(10.0, session.aclose(), "aclose")

    async def test_retries_give_up_with_a_non_fatal_error_naming_the_cause(
        self, harness: RealtimeHarness, model: RealtimeModel
    ) -> None:
        cause = stage(harness, "refuse", transient=True, times=harness.retries + 1)
        before = harness.attempts()
        session = model.session()
        try:
            error = await _start_fails(session)
        finally:
            await within(10.0, session.aclose(), "aclose")
        assert error.fatal is False, "a transient refusal may work later"
        assert cause in str(error), f"the error does not name the cause ({cause!r}): {error}"
        assert harness.attempts() - before == harness.retries + 1

    async def test_a_final_refusal_is_fatal_and_not_retried(
        self, harness: RealtimeHarness, model: RealtimeModel
    ) -> None:
        cause = stage(harness, "refuse", transient=False)
        before = harness.attempts()
        session = model.session()
        try:
            error = await _start_fails(session)
        finally:
            await within(10.0, session.aclose(), "aclose")
        assert error.fatal is True, f"a refused key must be fatal: {error}"
        assert cause in str(error), f"the error does not name the cause ({cause!r}): {error}"
        assert harness.attempts() - before == 1, "a final refusal was retried"

    async def test_a_set_up_that_never_completes_fails_within_the_timeout(
        self, harness: RealtimeHarness
    ) -> None:
        stage(harness, "stall_setup")
        snapshot = Snapshot(harness.server_port)
        model = harness.make()
        session = model.session()
        bound = stall_bound(harness.stall_timeout)
        started = asyncio.get_running_loop().time()
        try:
            error = await within(bound, _start_fails(session), "a stalled set-up")
            assert error.fatal is False, "a set-up that timed out may work later"
            assert elapsed_since(started) <= bound
        finally:
            await within(10.0, session.aclose(), "aclose")
            await model.aclose()
        await snapshot.assert_released("a failed start")

    async def test_a_connection_cut_during_set_up_is_retried(
        self, harness: RealtimeHarness
    ) -> None:
        stage(harness, "stall_setup")
        model = harness.make()
        session = model.session()
        starting = asyncio.create_task(_start(session))
        try:
            await stage_async(harness, "cut_stalled_setup")
            await within(GIVE_UP, starting, "start after a connection cut during its set-up")
            try:
                retries = harness.retries_of(session)
            except NotSupported:
                return
            assert retries == 1, f"the session counts {retries} connect retries, not 1"
        finally:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            await within(10.0, session.aclose(), "aclose")
            await model.aclose()

    # -- failures of a live session ----------------------------------------------------------

    async def test_a_dropped_connection_is_reported_and_the_session_recovers_or_ends(
        self, harness: RealtimeHarness, model: RealtimeModel, live: tuple[Any, Recorder]
    ) -> None:
        _, recorder = live
        await stage_async(harness, "drop_mid_reply", "Hello there.")
        lost = await recorder.wait_for(ConnectionLost)
        if not lost.reconnecting:
            await recorder.wait_ended()
            return
        await recorder.wait_for(Reconnected)
        mark = len(recorder.events)
        await harness.reply("Still here.")
        await _spoken(recorder, mark, "Still here.", model.sample_rate)

    async def test_a_malformed_frame_is_reported_and_the_session_goes_on(
        self, harness: RealtimeHarness, model: RealtimeModel, live: tuple[Any, Recorder]
    ) -> None:
        _, recorder = live
        await stage_async(harness, "garbage")
        reported = await recorder.wait_for(ProviderError)
        assert reported.error.fatal is False, "one malformed frame need not end the session"
        mark = len(recorder.events)
        await harness.reply("Still here.")
        await _spoken(recorder, mark, "Still here.", model.sample_rate)
        assert recorder.of(ConnectionLost) == [], "a malformed frame cost the connection"

    # -- cancelling, closing -----------------------------------------------------------------

    async def test_a_cancelled_start_leaves_nothing_behind(self, harness: RealtimeHarness) -> None:
        snapshot = Snapshot(harness.server_port)
        model, session, recorder, starting = await _start_unanswered(harness)
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await within(10.0, starting, "the cancelled start")
        await within(10.0, session.aclose(), "aclose after a cancelled start")
        await recorder.wait_ended(within=10.0)
        await model.aclose()
        await snapshot.assert_released("a cancelled start")

    async def test_aclose_ends_a_start_in_progress(self, harness: RealtimeHarness) -> None:
        snapshot = Snapshot(harness.server_port)
        model, session, recorder, starting = await _start_unanswered(harness)
        started = asyncio.get_running_loop().time()
        await within(10.0, session.aclose(), "aclose during start")
        with pytest.raises(RealtimeError):
            await within(stall_bound(harness.stall_timeout), starting, "the start")
        assert elapsed_since(started) < harness.stall_timeout / 2, (
            "start waited for its timeout instead of ending with aclose"
        )
        await recorder.wait_ended(within=10.0)
        await model.aclose()
        await snapshot.assert_released("aclose during start")

    async def test_aclose_is_idempotent_ends_the_events_and_releases_everything(
        self, harness: RealtimeHarness
    ) -> None:
        snapshot = Snapshot(harness.server_port)
        model = harness.make()
        unused = model.session()
        await within(10.0, unused.aclose(), "aclose of an unstarted session")
        session = model.session()
        try:
            recorder = await _start(session)
            await harness.reply("Hello there.")
            await _spoken(recorder, 0, "Hello there.", model.sample_rate)
        finally:
            closing = asyncio.gather(session.aclose(), session.aclose())
            await within(10.0, closing, "two aclose at once")
        await within(10.0, session.aclose(), "a third aclose")
        await recorder.wait_ended(within=10.0)
        assert recorder.of(ConnectionLost) == [], "closing is not a lost connection"
        await model.aclose()
        await model.aclose()
        await snapshot.assert_released("aclose")
