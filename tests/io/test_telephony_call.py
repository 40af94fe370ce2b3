"""Phone calls over a real socket on 127.0.0.1, in real time: ``FakePhoneCall`` plays
Twilio (20 ms μ-law, a jitter buffer, marks echoed when its playout passes them) against
``create_app(..., telephony=["twilio"])`` with the test kit's scripted models.

What is checked is what a caller would notice: the answer is heard; ``speaking`` starts
from an echoed mark, after the caller could hear the audio and at most one mark interval
later; a barge-in clears the line at once and the history keeps what was heard; keys
pressed reach a PIN prompt; a hang-up on either side ends the session with its reason;
twenty calls at once are independent (scenarios H1-H3)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.telephony import TelephonyOptions
from rejoinder.testing import FakePhoneCall, ScriptedTTS, ToolCall, speech_frame

from ._client import scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(60)]

MARK_INTERVAL = 0.16
TICK = 0.02
SECONDS_PER_CHAR = 0.05


def tone(seconds: float) -> np.ndarray[Any, np.dtype[np.int16]]:
    return speech_frame(seconds, 8000).data


class Served:
    def __init__(self, url: str) -> None:
        self.url = url
        self.sessions: list[rj.AgentSession[Any]] = []
        self.conns: list[Connection] = []
        self.states: list[list[tuple[float, str]]] = []
        self.closes: list[list[str]] = []


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(
        make_session: Callable[[], rj.AgentSession[Any]],
        agent: Callable[[], rj.Agent] = lambda: rj.Agent(instructions="test"),
        **options: Any,
    ) -> Served:
        served: Served

        async def entrypoint(conn: Connection) -> None:
            session = make_session()
            states: list[tuple[float, str]] = []
            closes: list[str] = []
            session.on("agent_state_changed", lambda e: states.append((e.created_at, e.new_state)))
            session.on("close", lambda e: closes.append(e.reason))
            served.sessions.append(session)
            served.conns.append(conn)
            served.states.append(states)
            served.closes.append(closes)
            await conn.serve(session, agent())

        options.setdefault("mark_interval", MARK_INTERVAL)
        app = create_app(
            entrypoint,
            telephony=["twilio"],
            telephony_options=TelephonyOptions(**options),
            webrtc=False,
            page=False,
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        served = Served(str(server.make_url("/twilio")))
        return served

    yield start
    for server in servers:
        await server.close()


def scripted(replies: list[list[Any]], transcripts: list[str]) -> Any:
    return scripted_session(
        replies, transcripts, lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR)
    )


def assistant_messages(session: rj.AgentSession[Any]) -> list[rj.ChatMessage]:
    return [
        i for i in session.history.items if isinstance(i, rj.ChatMessage) and i.role == "assistant"
    ]


async def until(condition: Callable[[], bool], timeout: float) -> None:  # noqa: ASYNC109
    """Poll (real time) for what the server side does after the call ended."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - a condition on several objects
            await asyncio.sleep(0.01)


REPLY = "It is noon in Paris."


async def test_h1_a_question_answered_speaking_follows_the_echoed_marks(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve(scripted([[REPLY]], ["What time is it in Paris?"]))
    async with FakePhoneCall.connect(served.url, parameters={"customer": "42"}) as call:
        await call.silence(0.2)
        await call.say(tone(0.5), 8000)
        await call.until(lambda: served.states and served.states[0][-1][1] == "speaking", 5)
        await call.until(lambda: served.states[0][-1][1] == "listening", 10)
        conn, session, states = served.conns[0], served.sessions[0], served.states[0]

    # The call reached the agent with its ids and custom parameters.
    assert conn.transport == "twilio" and conn.call is not None
    assert conn.call.call_id == call.call_sid and conn.call.stream_id == call.stream_sid
    assert conn.call.parameters["customer"] == "42"
    # The whole answer was heard, as sent (G.711 round trip of a 300-level tone).
    expected = len(REPLY) * SECONDS_PER_CHAR
    assert call.heard_seconds() == pytest.approx(expected, abs=0.03)
    assert np.abs(call.heard_audio()).max() > 200
    assert [m.content for m in assistant_messages(session)] == [REPLY]
    assert not assistant_messages(session)[0].interrupted
    # speaking starts once the caller can hear it, within one mark interval, never before.
    audible = call.audible_at()
    speaking = [t for t, s in states if s == "speaking"]
    assert len(speaking) == 1
    assert audible[0] <= speaking[0] <= audible[0] + MARK_INTERVAL + TICK
    # ...and ends when the last chunk has played, not when it was sent.
    listening = next(t for t, s in states if s == "listening" and t > speaking[0])
    # (Bounded loosely above: the reply was sent seconds before it played out, and a loaded
    # machine's loop can be a tenth of a second late.)
    assert audible[-1] <= listening <= audible[-1] + 0.25
    assert call.other == [] and call.clears == []
    # The marks went out at the start, every interval and at the end, all echoed.
    assert len(call.marks_received) >= expected / MARK_INTERVAL
    assert [n for _, n in call.marks_echoed] == [n for _, n in call.marks_received]


LONG = "This is a long answer that keeps going for quite a while, " * 3


@pytest.mark.parametrize("marks_on_clear", ["echo", "drop"])
async def test_h2_barge_in_clears_the_line_and_history_keeps_what_was_heard(
    serve: Callable[..., Awaitable[Served]], marks_on_clear: str
) -> None:
    served = await serve(scripted([[LONG], ["Yes?"]], ["Tell me.", "Wait."]))
    async with FakePhoneCall.connect(served.url, marks_on_clear=marks_on_clear) as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: call.heard_seconds() > 1.5, 10)
        await call.say(tone(0.6), 8000)
        await call.until(lambda: bool(call.clears), 5)
        cleared = call.clears[0]
        session = served.sessions[0]
        await call.until(lambda: len(assistant_messages(session)) == 2, 10)

    # Nothing of the long answer is audible after the clear beyond the chunk in play:
    # all the caller hears afterwards is the second answer, "Yes?", whole.
    heard_long = [h for h in call.heard if h.at < cleared + TICK + 0.005]
    after = [h for h in call.heard if h.at >= cleared + TICK + 0.005]
    assert sum(len(h.pcm) for h in after) / 8000 == pytest.approx(
        len("Yes?") * SECONDS_PER_CHAR, abs=0.021
    )
    cut, answer = assistant_messages(session)
    assert cut.interrupted and LONG.startswith(cut.content) and cut.content
    assert answer.content == "Yes?" and not answer.interrupted
    # The history keeps the text up to the last echoed mark: what the caller heard,
    # within one mark interval (and text is cut back to whole words).
    heard = sum(len(h.pcm) for h in heard_long) / 8000
    kept_chars = len(cut.content)
    assert heard / SECONDS_PER_CHAR - kept_chars >= -1
    assert (
        heard / SECONDS_PER_CHAR - kept_chars <= (MARK_INTERVAL + 2 * TICK) / SECONDS_PER_CHAR + 12
    )


async def test_h3_a_pin_collected_from_the_keypad(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    results: list[rj.Digits] = []

    @rj.function_tool
    async def check_pin() -> str:
        """Ask for the caller's PIN."""
        digits = await rj.CollectDigits("Enter your PIN, then pound.", max_digits=6)
        results.append(digits)
        return digits.digits

    def agent() -> rj.Agent:
        return rj.Agent(instructions="bank", tools=[check_pin])

    served = await serve(
        scripted([["One moment.", ToolCall("check_pin")], ["Thanks."]], ["My account."]),
        agent,
    )
    async with FakePhoneCall.connect(served.url) as call:
        await call.say(tone(0.4), 8000)
        # Keys pressed while the prompt plays stop it and count.
        await call.until(lambda: call.heard_seconds() > len("One moment.") * 0.05 + 0.4, 5)
        await call.press("1234#")
        await call.until(lambda: bool(results), 5)
        session = served.sessions[0]
        await call.until(lambda: "Thanks." in [m.content for m in assistant_messages(session)], 10)
    assert results == [rj.Digits("1234", "terminator")]
    # (The caller's "One moment." was cut when the task started: the prompt took over.)
    prompt = next(m for m in assistant_messages(session) if m.content.startswith("Enter"))
    assert prompt.interrupted and "Enter your PIN, then pound.".startswith(prompt.content)


async def test_caller_hangs_up_mid_reply(serve: Callable[..., Awaitable[Served]]) -> None:
    served = await serve(scripted([[LONG]], ["Go on."]))
    async with FakePhoneCall.connect(served.url) as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: call.heard_seconds() > 1.0, 10)
        await call.hang_up()
    session = served.sessions[0]
    await until(lambda: bool(served.closes[0]), 5)
    assert served.closes[0] == ["call ended"]
    (cut,) = assistant_messages(session)
    assert cut.interrupted and LONG.startswith(cut.content)
    assert session.agent_state != "speaking"


async def test_a_dropped_socket_ends_the_session_as_connection_lost(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve(scripted([[LONG]], ["Go on."]))
    async with FakePhoneCall.connect(served.url) as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: call.heard_seconds() > 0.5, 10)
        await call.ws.close()  # no stop: the line just went away
    await until(lambda: bool(served.closes[0]), 5)
    assert served.closes[0] == ["connection lost"]


async def test_the_agent_hangs_up_after_its_goodbye(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    @rj.function_tool
    async def end_call(context: rj.RunContext) -> str:
        """Hang up."""
        context.session.shutdown(reason="agent hung up")
        return "ok"

    served = await serve(
        scripted([["Goodbye!", ToolCall("end_call")], []], ["Bye."]),
        lambda: rj.Agent(instructions="t", tools=[end_call]),
    )
    async with FakePhoneCall.connect(served.url) as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: call.closed, 10)
    assert served.closes[0] == ["agent hung up"]
    assert call.heard_seconds() == pytest.approx(len("Goodbye!") * SECONDS_PER_CHAR, abs=0.03)
    assert call.close_code == 1000


async def test_twenty_calls_at_once_are_independent(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    counter = iter(range(1000))

    def make() -> rj.AgentSession[Any]:
        n = next(counter)
        return scripted([[f"Answer {n}."]], [f"Question {n}."])()

    served = await serve(make)

    async def one(i: int) -> float:
        async with FakePhoneCall.connect(
            served.url, call_sid=f"CA{i:032d}", stream_sid=f"MZ{i:032d}"
        ) as call:
            await call.say(tone(0.4), 8000)
            await call.until(lambda: call.heard_seconds() > 0.35, 15)
            await asyncio.sleep(0.2)
            return call.heard_seconds()

    heard = await asyncio.gather(*(one(i) for i in range(20)))
    assert len(served.sessions) == 20
    for seconds in heard:
        assert seconds == pytest.approx(len("Answer 10.") * SECONDS_PER_CHAR, abs=0.06)
    answers = sorted(assistant_messages(s)[0].content for s in served.sessions)
    assert answers == sorted(f"Answer {n}." for n in range(20))
    ids = {c.call.call_id for c in served.conns if c.call is not None}
    assert len(ids) == 20
