"""ProviderObligations: protocol facts in, obligations out (no provider, no socket).

Each test drives the mapping with the facts a provider reports and asserts the whole
agent-state sequence; the over-the-wire scenarios are in tests/scenarios/test_d_*.py.
"""

from __future__ import annotations

import asyncio

import pytest

from rejoinder.floor import SESSION_OWNER, Floor, ObligationKind
from rejoinder.models.realtime import (
    BackendResponseEnded,
    BackendResponseStarted,
    ContinuationFailed,
)
from rejoinder.session.events import AgentStateChangedEvent, EventEmitter
from rejoinder.session.realtime.provider_obligations import ProviderObligations
from rejoinder.session.turn_state import TurnState
from rejoinder.testing import advance


class Rig:
    def __init__(self, *, answer_timeout: float = 3.0, away: float | None = None) -> None:
        self.events = EventEmitter()
        self.states: list[str] = []
        self.unvoiced = 0
        self.events.on("agent_state_changed", self._changed)
        self.floor = Floor(user_away_timeout=away)
        self.state = TurnState(self.floor, self.events, asyncio.get_running_loop())
        self.state.start()
        self.state.entered()  # no agent enters here: the session listens at once
        self.obligations = ProviderObligations(
            self.state, answer_timeout=answer_timeout, on_unvoiced=self._unvoiced
        )

    def _changed(self, event: AgentStateChangedEvent) -> None:
        self.states.append(event.new_state)

    def _unvoiced(self) -> None:
        self.unvoiced += 1

    def play_audio(self) -> None:
        """A burst starts, becomes audible and finishes."""
        # Owed from the start, as a burst of a running response is.
        reply = self.obligations.audio_starting(owed=True)
        self.state.set_audible(reply, True)
        self.obligations.audio_finished(reply, interrupted=False)


def started(resp: str, dlg: str | None = "dlg") -> BackendResponseStarted:
    return BackendResponseStarted(resp, dlg)


def ended(resp: str, status: str = "completed", *, answer: bool = False) -> BackendResponseEnded:
    return BackendResponseEnded(resp, status, "dlg", expects_answer=answer)  # type: ignore[arg-type]


async def test_tool_round_trip_owes_until_the_answer_is_audible() -> None:
    rig = Rig()
    rig.obligations.response_started(started("r1"))
    rig.obligations.tool_called("c1", "weather", "dlg", owner=SESSION_OWNER)
    rig.obligations.response_ended(ended("r1"), audio_playing=False)
    rig.obligations.tool_answered("c1", "continue")
    rig.obligations.response_started(started("r2"))
    rig.obligations.response_ended(ended("r2", answer=True), audio_playing=False)
    assert rig.states == ["listening", "thinking"]
    rig.play_audio()
    assert rig.states == ["listening", "thinking", "speaking", "listening"]
    assert rig.floor.open_count == 0 and rig.obligations.open_count() == 0


async def test_two_outputs_share_one_continuation() -> None:
    rig = Rig()
    rig.obligations.response_started(started("r1"))
    rig.obligations.tool_called("a", "weather", "dlg", owner=SESSION_OWNER)
    rig.obligations.tool_called("b", "weather", "dlg", owner=SESSION_OWNER)
    rig.obligations.response_ended(ended("r1"), audio_playing=False)
    rig.obligations.tool_answered("a", "continue")
    rig.obligations.tool_answered("b", "continue")
    kinds = [ob.kind for ob in rig.floor.open_obligations()]
    assert kinds == [ObligationKind.PROVIDER_CONTINUATION]
    rig.obligations.response_started(started("r2"))
    assert [ob.kind for ob in rig.floor.open_obligations()] == [ObligationKind.BACKEND_RESPONSE]
    assert rig.states == ["listening", "thinking"]


async def test_failed_response_uncommits_its_running_tools() -> None:
    rig = Rig(away=5.0)
    rig.obligations.response_started(started("r1"))
    rig.obligations.tool_called("c1", "slow", "dlg", owner=SESSION_OWNER)
    rig.obligations.response_ended(ended("r1", "failed"), audio_playing=False)
    # Nothing is owed (the provider discarded the call) but the tool still works for the
    # user: listening, and not away.
    assert rig.states == ["listening", "thinking", "listening"]
    await advance(10)
    assert rig.floor.user_state == "listening"
    rig.obligations.tool_answered("c1", "silent")
    assert rig.floor.open_count == 0


async def test_continuation_failure_closes_what_was_owed() -> None:
    rig = Rig()
    rig.obligations.tool_called("c1", "weather", None, owner=SESSION_OWNER)
    rig.obligations.tool_answered("c1", "continue")
    rig.obligations.continuation_failed(ContinuationFailed(None, "rejected"))
    assert rig.states == ["listening", "thinking", "listening"]
    assert rig.floor.open_count == 0


async def test_answer_that_never_comes_is_given_up_after_the_bound() -> None:
    rig = Rig(answer_timeout=3.0)
    rig.obligations.response_started(started("r1"))
    rig.obligations.response_ended(ended("r1", answer=True), audio_playing=False)
    await advance(2.9)
    assert rig.states == ["listening", "thinking"]
    await advance(0.2)
    assert rig.states == ["listening", "thinking", "listening"]
    assert rig.unvoiced == 1


async def test_completed_while_its_answer_is_already_audible_owes_nothing_more() -> None:
    rig = Rig()
    rig.obligations.response_started(started("r1"))
    # Owed from the start, as a burst of a running response is.
    reply = rig.obligations.audio_starting(owed=True)
    rig.state.set_audible(reply, True)
    rig.obligations.response_ended(ended("r1", answer=True), audio_playing=True)
    rig.obligations.audio_finished(reply, interrupted=False)
    assert rig.states == ["listening", "thinking", "speaking", "listening"]


@pytest.mark.parametrize("during", ["response", "tool", "continuation", "answer"])
async def test_connection_lost_closes_everything_it_owed(during: str) -> None:
    rig = Rig()
    rig.obligations.response_started(started("r1"))
    if during != "response":
        rig.obligations.tool_called("c1", "weather", "dlg", owner=SESSION_OWNER)
        rig.obligations.response_ended(ended("r1"), audio_playing=False)
    if during in ("continuation", "answer"):
        rig.obligations.tool_answered("c1", "continue")
    if during == "answer":
        rig.obligations.response_started(started("r2"))
        rig.obligations.response_ended(ended("r2", answer=True), audio_playing=False)
    rig.obligations.connection_lost()
    assert rig.states == ["listening", "thinking", "listening"]
    if during == "tool":
        # The tool still runs (uncommitted); its output can only become context.
        rig.obligations.tool_answered("c1", "silent")
    assert rig.floor.open_count == 0
