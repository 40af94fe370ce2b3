"""Non-blocking functions on google.Live (``non_blocking={name: "when_idle" | "interrupt" |
"silent"}``): the declarations, the ``scheduling`` each result is sent with, the facts
reported, and, over whole sessions, that ``thinking``, ``listening`` and ``away`` stay
true for each: a ``when_idle`` result is owed (thinking) until it is spoken and never cuts
the user off; a ``silent`` one owes nothing (listening) yet keeps the user from being
marked away while it runs; an ``interrupt`` one pre-empts the model's speech without the
user being reported speaking."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models import FunctionCallOutput
from rejoinder.models.realtime import (
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    RealtimeConfig,
    ToolCallRequested,
    UserSpeechStarted,
)
from rejoinder.models.tools import ToolDefinition
from rejoinder.providers.google._live_protocol import SILENT_DELEGATION
from rejoinder.providers.google.live import Live
from rejoinder.testing import now
from rejoinder.testing.gemini_live_server import GeminiLiveServer

from ..scenarios.realtime_rig import Rig, start_rig
from ._live import rigs_fixture, spoken_turn
from ._servers import serving
from .test_gemini_live import Connect, connecting

pytestmark = pytest.mark.looptime(noop_cycles=2000)

MODES = {"search_flights": "when_idle", "watch_price": "interrupt", "log_preference": "silent"}


def tool(name: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"{name} (for the test).",
        parameters={"type": "object", "properties": {"what": {"type": "string"}}},
    )


TOOLS = [tool("search_flights"), tool("watch_price"), tool("log_preference"), tool("book")]


server = serving(GeminiLiveServer)
connect = connecting()


def result(call_id: str, name: str, text: str = "done") -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, name=name, output=text)


# -- the wire and the facts ------------------------------------------------------------------


async def test_non_blocking_results_are_scheduled_as_configured(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(RealtimeConfig("x", tools=TOOLS), non_blocking=MODES)
    declarations = server.setups[0]["tools"][0]["functionDeclarations"]
    assert [d.get("behavior") for d in declarations] == [
        "NON_BLOCKING",
        "NON_BLOCKING",
        "NON_BLOCKING",
        None,
    ]
    await server.tool_call(
        ("c1", "search_flights", {}),
        ("c2", "watch_price", {}),
        ("c3", "log_preference", {}),
        ("c4", "search_flights", {}),
    )
    await recorder.wait_for(ToolCallRequested, count=4)
    fates = [
        session.submit_tool_output(result("c1", "search_flights"), reply_required=True),
        session.submit_tool_output(result("c2", "watch_price"), reply_required=True),
        session.submit_tool_output(result("c3", "log_preference"), reply_required=True),
        # No reply wanted: SILENT, whatever the function's mode.
        session.submit_tool_output(result("c4", "search_flights"), reply_required=False),
    ]
    assert fates == ["continue", "continue", "silent", "silent"]
    await server.wait_for("toolResponse", count=4)
    entries = server.function_responses()  # one message each: they come when they come
    assert [(e["id"], e["scheduling"], e["response"]["scheduling"]) for e in entries] == [
        ("c1", "WHEN_IDLE", "WHEN_IDLE"),
        ("c2", "INTERRUPT", "INTERRUPT"),
        ("c3", "SILENT", "SILENT"),
        ("c4", "SILENT", "SILENT"),
    ]
    assert entries[0]["response"]["output"] == "done"


async def test_a_non_blocking_call_leaves_the_turn_running(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(RealtimeConfig("x", tools=TOOLS), non_blocking=MODES)
    await server.audio(0.2)
    await server.tool_call(("c1", "search_flights", {"what": "Rome"}))
    await server.audio(0.2)  # the model goes on talking
    await server.generation_complete()
    await server.turn_complete()
    await recorder.wait_for(BackendResponseEnded)
    assert recorder.kinds().count("AgentAudioStarted") == 1  # one stretch, not cut
    assert recorder.kinds().count("BackendResponseStarted") == 1
    call = recorder.of(ToolCallRequested)[0]
    assert call.delegation_id is None and call.call.arguments == '{"what": "Rome"}'


async def test_a_silent_call_is_reported_owing_nothing(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(RealtimeConfig("x", tools=TOOLS), non_blocking=MODES)
    await server.tool_call(("c1", "log_preference", {"what": "aisle"}))
    await recorder.wait_for(BackendResponseEnded, count=1)
    turn, silent = recorder.of(BackendResponseStarted)
    assert turn.response_id == "turn_1_1"
    assert silent == BackendResponseStarted("silent_c1", SILENT_DELEGATION)
    assert recorder.events[1:] == [
        silent,
        ToolCallRequested(recorder.of(ToolCallRequested)[0].call, SILENT_DELEGATION),
        BackendResponseEnded("silent_c1", "cancelled", SILENT_DELEGATION),
    ]


async def test_an_interrupt_result_pre_empts_the_model_without_user_speech(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(RealtimeConfig("x", tools=TOOLS), non_blocking=MODES)
    await server.tool_call(("c1", "watch_price", {}))
    await server.turn_complete()
    await recorder.wait_for(BackendResponseEnded)
    await server.audio(0.5)  # the model talks about something else
    await recorder.wait_for(AgentAudioStarted)
    session.submit_tool_output(result("c1", "watch_price", "99 EUR"), reply_required=True)
    await server.wait_for("toolResponse")
    await server.interrupted()  # caused by our INTERRUPT result
    await server.audio(0.2)  # the model voices the result
    await recorder.wait_for(AgentAudioStarted, count=2)
    assert recorder.of(UserSpeechStarted) == []
    assert [e.status for e in recorder.of(BackendResponseEnded)] == ["completed", "cancelled"]
    assert recorder.of(BackendResponseStarted)[-1].response_id == "turn_1_3"


# -- whole sessions: what the agent and the user are reported as --------------------------


class Trips(rj.Agent):
    """Travel tools, each held until its gate is set."""

    def __init__(self) -> None:
        super().__init__(instructions="You plan trips.")
        self.gates = {name: asyncio.Event() for name in MODES}
        self.reply_required = True

    @rj.function_tool
    async def search_flights(self, city: str) -> rj.ToolResult:
        """Search flights.

        Args:
            city: where to
        """
        await self.gates["search_flights"].wait()
        return rj.ToolResult(f"2 flights to {city}", reply_required=self.reply_required)

    @rj.function_tool
    async def watch_price(self, route: str) -> str:
        """Watch a fare.

        Args:
            route: the route
        """
        await self.gates["watch_price"].wait()
        return f"the fare for {route} dropped to 99 EUR"

    @rj.function_tool
    async def log_preference(self, note: str) -> str:
        """Write down a preference.

        Args:
            note: the preference
        """
        await self.gates["log_preference"].wait()
        return "logged"


async def trips(server: GeminiLiveServer, rigs: list[Rig], **options: Any) -> tuple[Rig, Trips]:
    agent = Trips()
    model = Live(api_key="test", base_url=server.base_url, non_blocking=MODES)
    rig = await start_rig(model, agent, **options)
    rigs.append(rig)
    return rig, agent


rigs = rigs_fixture()


async def test_when_idle_is_owed_until_spoken_and_waits_for_the_user(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig, agent = await trips(server, rigs, user_away_timeout=2.0)
    await server.input_transcript("Find me flights to Rome.")
    await rig.settle(0.3)
    t0 = now()
    await server.output_transcript("I'm looking, it takes a moment.")
    await server.tool_call(("c1", "search_flights", {"city": "Rome"}))
    await spoken_turn(server, rig, "", seconds=1.0)
    await rig.settle(4.0)  # twice the away timeout: the search still runs
    assert rig.session.agent_state == "thinking"  # its result is owed
    assert rig.session.user_state == "listening"  # never away while it runs
    await server.input_transcript("Is it expensive?")  # the user talks meanwhile
    await rig.settle(0.3)
    agent.gates["search_flights"].set()  # the result comes while the user speaks
    await server.wait_for("toolResponse")
    await rig.settle(0.5)
    assert server.function_responses()[0]["scheduling"] == "WHEN_IDLE"
    assert rig.session.user_state == "speaking"  # not cut off
    assert rig.session.agent_state == "thinking"
    t_spoken = now()
    await spoken_turn(server, rig, "Two flights to Rome, both cheap.")

    assert rig.timeline.agent_states(since=t0) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    rig.timeline.assert_never("listening", between=(t0 + 0.01, t_spoken + 1.0))
    assert "away" not in rig.timeline.user_states()
    assert rig.messages()[-2:] == [
        ("user", "Is it expensive?"),
        ("assistant", "Two flights to Rome, both cheap."),
    ]
    assert rig.owed == 0 and rig.errors == []
    await rig.settle(2.5)
    assert rig.session.user_state == "away"  # mutual silence counts again


async def test_a_result_that_needs_no_reply_is_silent_and_owes_nothing_after(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig, agent = await trips(server, rigs)
    agent.reply_required = False
    await server.input_transcript("Look for flights, no need to tell me.")
    await rig.settle(0.3)
    t0 = now()
    await server.tool_call(("c1", "search_flights", {"city": "Oslo"}))
    await spoken_turn(server, rig, "Sure.", seconds=0.5)
    assert rig.session.agent_state == "thinking"  # a when_idle result may be spoken
    agent.gates["search_flights"].set()
    await server.wait_for("toolResponse")
    await rig.settle(0.2)
    assert server.function_responses()[0]["scheduling"] == "SILENT"
    assert rig.session.agent_state == "listening"
    assert rig.timeline.agent_states(since=t0) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "listening",
    ]
    assert rig.owed == 0


async def test_silent_owes_nothing_but_the_user_is_not_away_while_it_runs(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig, agent = await trips(server, rigs, user_away_timeout=2.0)
    await server.input_transcript("I prefer aisle seats.")
    await rig.settle(0.3)
    t0 = now()
    await server.tool_call(("c1", "log_preference", {"note": "aisle"}))
    await spoken_turn(server, rig, "Noted.", seconds=0.5)
    assert rig.session.agent_state == "listening"  # nothing will be said of it
    await rig.settle(5.0)
    assert rig.session.user_state == "listening"  # but it works for the user: not away
    agent.gates["log_preference"].set()
    await server.wait_for("toolResponse")
    await rig.settle(0.2)
    assert server.function_responses()[0]["scheduling"] == "SILENT"

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0
    await rig.settle(2.5)
    assert rig.session.user_state == "away"  # the timer runs once the work is done


async def test_interrupt_pre_empts_the_models_speech_and_is_never_user_speech(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig, agent = await trips(server, rigs, user_away_timeout=2.0)
    await server.input_transcript("Tell me when the Rome fare drops, and tell me about Rome.")
    await rig.settle(0.3)
    t0 = now()
    await server.tool_call(("c1", "watch_price", {"route": "Rome"}))
    await server.output_transcript("Rome has seven hills and a great many churches.")
    await server.audio(0.5)  # what the model says while the fare is watched
    await rig.settle(0.3)
    assert rig.session.agent_state == "speaking"
    t_alert = now()
    agent.gates["watch_price"].set()
    await server.wait_for("toolResponse")
    assert server.function_responses()[0]["scheduling"] == "INTERRUPT"
    await server.interrupted()  # the result cuts the model off on the server
    await server.turn_complete()
    await spoken_turn(server, rig, "The fare dropped to 99 euros!")  # 1 s of audio
    await rig.settle(1.5)
    result_played = t_alert + 1.0

    assert "speaking" not in rig.timeline.user_states(since=t_alert)[1:]  # no fake user turn
    # Owed throughout: no listening between the call and the result's end (not even for
    # an instant when the interrupted turn's own turnComplete arrives).
    rig.timeline.assert_never("listening", between=(t0 + 0.01, result_played - 0.01))
    assert rig.timeline.agent_states(since=t_alert) == [
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    assert rig.session.agent_state == "listening"
    # The server stopped the pre-empted turn and the session its playback at once
    # (AgentAudioCut): of its 0.5 s only the 0.3 s played before the result was heard,
    # then the result was spoken.
    assert rig.speaker.segments == [pytest.approx(t_alert - t0, abs=0.03), pytest.approx(1.0)]
    assert rig.messages()[-2] == ("assistant", "Rome has seven hills and a")
    assert rig.messages()[-1] == ("assistant", "The fare dropped to 99 euros!")
    assert rig.owed == 0 and rig.errors == []


async def test_a_withdrawn_call_stops_its_tool_and_owes_nothing(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    """toolCallCancellation (the user cut off the turn that made the call): the running
    tool is cancelled, nothing is sent for it, and the agent listens again."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    class Slow(rj.Agent):
        def __init__(self) -> None:
            super().__init__(instructions="You look things up slowly.")

        @rj.function_tool
        async def look_up(self, topic: str) -> str:
            """Look a topic up.

            Args:
                topic: what to look up
            """
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "never"

    rig = await start_rig(Live(api_key="test", base_url=server.base_url), Slow())
    rigs.append(rig)
    await server.input_transcript("Look up the history of Rome.")
    await rig.settle(0.3)
    await server.tool_call(("c1", "look_up", {"topic": "Rome"}))
    await rig.settle(0.3)
    assert started.is_set() and rig.session.agent_state == "thinking"
    await server.tool_call_cancellation("c1")
    await rig.settle(0.3)
    assert cancelled.is_set()
    assert rig.session.agent_state == "listening" and rig.owed == 0
    assert server.of_kind("toolResponse") == []
    assert rig.errors == []
