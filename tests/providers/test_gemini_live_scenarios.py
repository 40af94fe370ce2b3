"""Whole sessions on google.Live over the loopback server: the realtime scenarios (D1 tool
round trip, barge-in, a lost connection, a GoAway, handoffs, an AgentTask, a fatal error,
garbage, our own turn detection), each asserting the whole agent/user state timeline.
The rig (tests/scenarios/realtime_rig.py) feeds the microphone silence, as a phone line
does, and plays agent audio on virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.providers.google.live import Live
from rejoinder.testing import ScriptedVAD, now, speech_frame
from rejoinder.testing.gemini_live_server import GeminiLiveServer

from .._samples import run_example
from ..scenarios.realtime_rig import Rig, Weather, start_rig
from ._live import rigs_fixture, spoken_turn
from ._servers import serving

pytestmark = pytest.mark.looptime(noop_cycles=2000)


server = serving(GeminiLiveServer)


rigs = rigs_fixture()


async def gemini(
    server: GeminiLiveServer,
    rigs: list[Rig],
    agent: rj.Agent | None = None,
    *,
    model: dict[str, Any] | None = None,
    **options: Any,
) -> Rig:
    """A rig on google.Live (a ``Weather`` agent unless told), closed by ``rigs``."""
    llm = Live(api_key="test", base_url=server.base_url, **(model or {}))
    rig = await start_rig(llm, agent or Weather(), **options)
    rigs.append(rig)
    return rig


async def user_asks(server: GeminiLiveServer, rig: Rig, text: str) -> None:
    await server.input_transcript(text)
    await rig.settle(0.3)


# ----------------------------------------------------------------------- D1


async def test_d1_blocking_tool_round_trip_with_a_preamble(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(server, rigs)
    await user_asks(server, rig, "What's the weather in Paris?")
    assert rig.session.user_state == "speaking"
    t_turn = now()
    await server.output_transcript("Let me check.")
    await server.audio(0.6)
    await server.tool_call(("c1", "get_weather", {"city": "Paris"}))
    await server.wait_for("toolResponse")
    await rig.settle(1.0)  # the preamble played; the answer is owed
    assert rig.session.agent_state == "thinking"
    t_answer = now()
    await spoken_turn(server, rig, "It's 18 degrees and sunny in Paris.")

    assert rig.timeline.agent_states(since=t_turn) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    rig.timeline.assert_never("listening", between=(t_turn + 0.01, t_answer + 1.0))
    assert rig.timeline.user_states() == ["listening", "speaking", "listening"]
    (response,) = server.function_responses()
    assert response == {
        "id": "c1",
        "name": "get_weather",
        "response": {"output": "18 C and sunny in Paris"},
    }
    assert rig.messages() == [
        ("user", "What's the weather in Paris?"),
        ("assistant", "Let me check."),
        ("assistant", "It's 18 degrees and sunny in Paris."),
    ]
    assert rig.owed == 0 and rig.errors == []


# ----------------------------------------------------------------- barge-in


async def test_barge_in_cuts_playback_and_keeps_what_was_heard(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(server, rigs)
    await user_asks(server, rig, "Tell me a story.")
    await server.output_transcript("Once upon a time there was a lighthouse keeper.")
    await server.audio(2.0)
    await rig.settle(0.6)
    assert rig.session.agent_state == "speaking"
    t_barge = now()
    await server.interrupted()  # the server's VAD heard the user
    await server.turn_complete()
    await rig.settle(0.1)
    assert rig.session.agent_state == "listening"
    assert rig.session.user_state == "speaking"
    await server.input_transcript("Stop, please.")
    await rig.settle(1.5)  # no answer: the turn ends after 1.2 s of audio with no words

    assert rig.speaker.played_seconds == pytest.approx(0.6, abs=0.05)
    rig.timeline.assert_never("speaking", between=(t_barge + 0.01, now()))
    assert rig.timeline.user_states() == [
        "listening",
        "speaking",
        "listening",
        "speaking",
        "listening",
    ]
    assistant = [m for m in rig.session.history.messages() if m.role == "assistant"]
    assert assistant[-1].interrupted
    assert 0 < len(assistant[-1].content) < len("Once upon a time there was a lighthouse keeper.")
    assert rig.messages()[-1] == ("user", "Stop, please.")
    assert rig.owed == 0


# ------------------------------------------------------- connections replaced


async def test_a_drop_mid_answer_reconnects_and_the_conversation_goes_on(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.output_transcript("Let me see.")
    await server.audio(0.5)
    await rig.settle(0.1)
    await server.drop()
    await server.wait_connected(2)
    await rig.settle(1.0)

    # What was said on the lost connection is owed no more; what arrived still played.
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0
    assert server.connections[1].resumed_from is not None
    await spoken_turn(server, rig, "It is sunny in Oslo.")
    assert rig.messages()[-1] == ("assistant", "It is sunny in Oslo.")
    assert rig.session.agent_state == "listening" and rig.owed == 0


async def test_a_go_away_changes_nothing_the_user_can_see(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(server, rigs, user_away_timeout=5.0)
    await user_asks(server, rig, "Tell me about tides.")
    t0 = now()
    await server.output_transcript("Tides follow the moon.")
    await server.audio(1.0)
    await server.go_away(20.0)  # mid-answer: the switch waits for its end
    await server.generation_complete()
    await rig.settle(0.5)
    assert len(server.connections) == 1
    await server.turn_complete()
    await rig.settle(1.0)
    assert len(server.connections) == 2 and server.connections[1].resumed_from is not None
    await user_asks(server, rig, "And the sun?")
    await spoken_turn(server, rig, "The sun too, a little.")

    assert rig.timeline.agent_states(since=t0) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    assert "away" not in rig.timeline.user_states()
    assert rig.errors == [] and rig.owed == 0
    assert rig.messages()[-2:] == [
        ("user", "And the sun?"),
        ("assistant", "The sun too, a little."),
    ]


# ------------------------------------------------------------------ handoff


class Billing(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You handle billing.", id="billing")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Greet the caller as the billing desk.")


class Front(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You are the front desk.", id="front")

    @rj.function_tool
    async def transfer_to_billing(self) -> rj.Agent:
        """Transfer the caller to billing."""
        return Billing()


async def test_a_handoff_has_no_listening_gap_and_sets_the_new_agent_up(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(server, rigs, Front())
    await user_asks(server, rig, "Billing, please.")
    t0 = now()
    await server.tool_call(("c1", "transfer_to_billing", {}))
    await server.wait_for("toolResponse")
    await server.wait_for("clientContent", count=2)  # the new rules, the greeting request
    await rig.settle(0.2)
    assert rig.session.current_agent.id == "billing"
    assert rig.session.agent_state == "thinking"
    await spoken_turn(server, rig, "Billing desk, how can I help?")
    await rig.settle(1.0)

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    texts = [text for _, text, _ in server.client_texts(1)]
    assert texts[0].endswith("You handle billing.")
    assert texts[1] == "Greet the caller as the billing desk."
    # At the first quiet moment the new agent's setup replaced the old one, resumed.
    assert len(server.connections) == 2
    setup = server.setups[1]
    assert setup["systemInstruction"] == {"parts": [{"text": "You handle billing."}]}
    assert "tools" not in setup  # billing has none
    assert server.connections[1].resumed_from is not None
    assert rig.owed == 0 and rig.errors == []


class GetEmail(rj.AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Ask for the caller's email.", id="get_email")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Ask for the email address.")

    @rj.function_tool
    async def record_email(self, email: str) -> None:
        """Record the email.

        Args:
            email: the address
        """
        self.complete(email)


class Signup(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You sign people up.", id="signup")

    @rj.function_tool
    async def sign_up(self) -> str:
        """Sign the caller up."""
        email = await GetEmail()
        return f"signed up {email}"


async def test_an_agent_task_awaited_by_a_tool_listens_for_the_user(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(server, rigs, Signup())
    await user_asks(server, rig, "Sign me up.")
    t0 = now()
    await server.tool_call(("c1", "sign_up", {}))
    await rig.settle(0.5)
    assert rig.session.current_agent.id == "get_email"
    await spoken_turn(server, rig, "What is your email?")
    await rig.settle(2.0)  # the question was heard: the task waits for the user
    assert rig.session.agent_state == "listening"
    await user_asks(server, rig, "It is a at b dot com.")
    await server.tool_call(("c2", "record_email", {"email": "a@b.com"}))
    await server.wait_for("toolResponse", count=2)
    await rig.settle(0.5)
    assert rig.session.current_agent.id == "signup"
    await spoken_turn(server, rig, "You are signed up.")

    assert rig.timeline.agent_states(since=t0) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    responses = [(r["id"], r["response"]["output"]) for r in server.function_responses()]
    assert responses == [("c2", ""), ("c1", "signed up a@b.com")]
    # The task's rules, then the caller's again, as context; nothing to set up anew.
    texts = [text for _, text, _ in server.client_texts()]
    assert texts[0].endswith("Ask for the caller's email.")
    assert texts[1] == "Ask for the email address."
    assert texts[2].endswith("You sign people up.")
    assert len(server.connections) == 1
    assert rig.messages()[-1] == ("assistant", "You are signed up.")
    assert rig.owed == 0 and rig.errors == []


# -------------------------------------------------------------- bad service


async def test_a_fatal_close_ends_the_session(server: GeminiLiveServer, rigs: list[Rig]) -> None:
    rig = await gemini(server, rigs)
    closed: list[rj.CloseEvent] = []
    rig.session.on("close", closed.append)
    await user_asks(server, rig, "Hello?")
    await server.audio(0.3)
    await rig.settle(0.1)
    await server.close(1008, "API key not valid. Please pass a valid API key.")
    await rig.settle(1.0)
    assert rig.session.agent_state == "listening"
    assert closed and any(not e.recoverable for e in rig.errors)
    assert rig.owed == 0


@pytest.mark.parametrize("garbage", ["text", "binary", "malformed call", "error close"])
async def test_garbage_mid_turn_leaves_nothing_stuck(
    server: GeminiLiveServer, rigs: list[Rig], garbage: str
) -> None:
    rig = await gemini(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    await server.output_transcript("One moment.")
    await server.audio(0.3)
    if garbage == "text":
        await server.send_raw('{"serverContent": {')
    elif garbage == "binary":
        await server.send_binary(b"\x00\x01\x02")
    elif garbage == "malformed call":
        await server.send({"toolCall": {"functionCalls": "get_weather"}})
    else:
        await server.close(1011, "Internal error encountered.")
        await server.wait_connected(2)
    if garbage != "error close":  # the turn goes on after the garbage, and ends
        await server.generation_complete()
        await server.turn_complete()
    await rig.settle(0.5)
    await spoken_turn(server, rig, "Sunny.", seconds=0.5)
    await rig.settle(0.5)
    assert rig.session.agent_state == "listening"
    assert rig.owed == 0
    assert rig.messages()[-2:] == [("assistant", "One moment."), ("assistant", "Sunny.")]
    assert all(e.recoverable for e in rig.errors)
    assert len(rig.errors) == (0 if garbage == "error close" else 1)


# --------------------------------------------------- our own turn detection


async def test_our_vad_sends_activity_and_reports_the_users_turns(
    server: GeminiLiveServer, rigs: list[Rig]
) -> None:
    rig = await gemini(
        server, rigs, model={"activity_detection": None, "vad": ScriptedVAD(min_silence=0.4)}
    )
    assert rig.feeder is not None
    rig.feeder.cancel()  # this test speaks into the microphone itself
    await asyncio.gather(rig.feeder, return_exceptions=True)
    rig.feeder = None
    assert server.setups[0]["realtimeInputConfig"] == {
        "automaticActivityDetection": {"disabled": True}
    }
    t0 = now()
    await rig.mic.push(speech_frame(0.6, 24000))
    await rig.mic.push(AudioFrame.silence(0.6, 24000))
    await rig.settle(0.2)
    await server.input_transcript("Hello there.")
    await server.wait_for("realtimeInput.activityEnd")
    kinds = [k for k in server.kinds() if k != "realtimeInput.audio"]
    assert kinds == ["setup", "realtimeInput.activityStart", "realtimeInput.activityEnd"]
    start = server.kinds().index("realtimeInput.activityStart")
    assert server.kinds()[start + 1] == "realtimeInput.audio"  # the onset, held, then sent
    await spoken_turn(server, rig, "Hi! How can I help?")
    assert rig.timeline.user_states(since=t0) == ["listening", "speaking", "listening"]
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.messages() == [("user", "Hello there."), ("assistant", "Hi! How can I help?")]


def test_the_example_runs_offline() -> None:
    """examples/gemini_live_agent.py, without a key, plays its conversation against the
    loopback server: the search result is sent WHEN_IDLE and owed until it is spoken."""
    out = run_example("gemini_live_agent.py")
    assert "search result sent WHEN_IDLE: two flights to Rome" in out
    assert "agent: initializing → listening → thinking → speaking → thinking → speaking" in out
    assert out.rstrip().endswith("assistant: I found two: 08:10 for 120 euros, 17:45 for 95.")
