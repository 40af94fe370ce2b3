"""Phone calls on the ASGI host and on aiohttp, over real sockets on 127.0.0.1 in real
time: ``FakePhoneCall`` plays Twilio (20 ms μ-law, a jitter buffer, marks echoed as its
playout passes them). A call answered with ``speaking`` following the echoed marks; a
barge-in clear; a stream announced by a signed webhook, and one that was not; a full
server; junk on the socket. Every test runs on both hosts and expects the same."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
import pytest

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.io.telephony import TelephonyOptions
from rejoinder.io.telephony.twilio_webhook import TOKEN_PARAMETER, twilio_signature
from rejoinder.testing import FakePhoneCall, ScriptedTTS, speech_frame

from ._client import scripted_session
from .test_asgi_server import AUTH, CALL, Host, Start, host, post, stream_of

__all__ = ["host"]

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

MARK_INTERVAL = 0.16
TICK = 0.02
SECONDS_PER_CHAR = 0.05
REPLY = "It is noon in Paris."
LONG = "This is a long answer that keeps going for quite a while, " * 2


def tone(seconds: float) -> np.ndarray[Any, np.dtype[np.int16]]:
    return speech_frame(seconds, 8000).data


class Calls:
    def __init__(self) -> None:
        self.sessions: list[rj.AgentSession[Any]] = []
        self.conns: list[Connection] = []
        self.states: list[list[tuple[float, str]]] = []
        self.closes: list[list[str]] = []

    def state(self) -> str | None:
        return self.states[0][-1][1] if self.states and self.states[0] else None

    def entrypoint(self, replies: list[list[Any]], heard: list[str]) -> Any:
        make = scripted_session(
            replies, heard, lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR)
        )

        async def entrypoint(conn: Connection) -> None:
            session = make()
            states: list[tuple[float, str]] = []
            closes: list[str] = []
            session.on("agent_state_changed", lambda e: states.append((e.created_at, e.new_state)))
            session.on("close", lambda e: closes.append(e.reason))
            self.sessions.append(session)
            self.conns.append(conn)
            self.states.append(states)
            self.closes.append(closes)
            await conn.serve(session, rj.Agent(instructions="test"))

        return entrypoint


async def phone_host(
    host: Start, calls: Calls, replies: list[list[Any]], heard: list[str], **options: Any
) -> Host:
    max_sessions = options.pop("max_sessions", None)
    options.setdefault("mark_interval", MARK_INTERVAL)
    return await host(
        calls.entrypoint(replies, heard),
        telephony=["twilio"],
        telephony_options=TelephonyOptions(**options),
        max_sessions=max_sessions,
    )


def assistant(session: rj.AgentSession[Any]) -> list[rj.ChatMessage]:
    return [
        i for i in session.history.items if isinstance(i, rj.ChatMessage) and i.role == "assistant"
    ]


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:  # noqa: ASYNC109
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - a condition on several objects
            await asyncio.sleep(0.01)


# On ASGI only: the aiohttp host runs the same call in test_telephony_call.py (h1, h2),
# and these run in real time.
@pytest.mark.parametrize("host", ["asgi"], indirect=True)
async def test_a_call_is_answered_and_speaking_follows_the_echoed_marks(host: Start) -> None:
    calls = Calls()
    served = await phone_host(host, calls, [[REPLY]], ["What time is it in Paris?"])
    url = served.ws + "/twilio"
    async with FakePhoneCall.connect(url, parameters={"customer": "42"}) as call:
        await call.silence(0.2)
        await call.say(tone(0.5), 8000)
        await call.until(lambda: calls.state() == "speaking", 5)
        await call.until(lambda: calls.state() == "listening", 10)
        await call.hang_up()  # a stop: the session ends as "call ended"
    await until(lambda: bool(calls.closes[0]))
    conn, session, states = calls.conns[0], calls.sessions[0], calls.states[0]
    assert conn.transport == "twilio" and conn.call is not None
    assert conn.call.call_id == call.call_sid and conn.call.parameters["customer"] == "42"
    assert call.heard_seconds() == pytest.approx(len(REPLY) * SECONDS_PER_CHAR, abs=0.03)
    assert [m.content for m in assistant(session)] == [REPLY]
    # speaking starts once the caller can hear it, within one mark interval, and ends
    # when the last chunk has played
    audible = call.audible_at()
    speaking = [t for t, s in states if s == "speaking"]
    assert len(speaking) == 1
    assert audible[0] <= speaking[0] <= audible[0] + MARK_INTERVAL + TICK
    listening = next(t for t, s in states if s == "listening" and t > speaking[0])
    assert audible[-1] <= listening <= audible[-1] + 0.25  # (loosely: see test_telephony_call)
    # marks at the start, every interval and the end, all echoed
    assert len(call.marks_received) >= len(REPLY) * SECONDS_PER_CHAR / MARK_INTERVAL
    assert [n for _, n in call.marks_echoed] == [n for _, n in call.marks_received]
    assert call.clears == [] and call.other == []
    assert calls.closes[0] == ["call ended"]


# On ASGI only: the aiohttp host runs the same call in test_telephony_call.py (h1, h2),
# and these run in real time.
@pytest.mark.parametrize("host", ["asgi"], indirect=True)
async def test_a_barge_in_clears_the_line_and_the_history_keeps_what_was_heard(
    host: Start,
) -> None:
    calls = Calls()
    served = await phone_host(host, calls, [[LONG], ["Yes?"]], ["Tell me.", "Wait."])
    async with FakePhoneCall.connect(served.ws + "/twilio") as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: call.heard_seconds() > 1.2, 10)
        await call.say(tone(0.6), 8000)
        await call.until(lambda: bool(call.clears), 5)
        cleared = call.clears[0]
        session = calls.sessions[0]
        await call.until(lambda: len(assistant(session)) == 2, 10)
    after = [h for h in call.heard if h.at >= cleared + TICK + 0.005]
    assert sum(len(h.pcm) for h in after) / 8000 == pytest.approx(
        len("Yes?") * SECONDS_PER_CHAR, abs=0.021
    )
    cut, answer = assistant(session)
    assert cut.interrupted and cut.content and LONG.startswith(cut.content)
    assert answer.content == "Yes?" and not answer.interrupted
    heard_long = sum(len(h.pcm) for h in call.heard if h.at < cleared + TICK + 0.005) / 8000
    assert heard_long / SECONDS_PER_CHAR - len(cut.content) >= -1


async def test_only_a_stream_a_signed_webhook_announced_is_answered(host: Start) -> None:
    calls = Calls()
    served = await phone_host(host, calls, [[REPLY]], ["Hello."], twilio_auth_token=AUTH)
    url = served.base + "/twilio/twiml"
    async with aiohttp.ClientSession() as http:
        status, _, body = await post(http, url, CALL, twilio_signature(AUTH, url, CALL))
    assert status == 200
    stream_url, params = stream_of(body)
    assert stream_url == served.ws + "/twilio"
    sid = CALL["CallSid"]
    # a stream nobody announced is refused with 1008 and the reason
    async with FakePhoneCall.connect(stream_url, call_sid=sid) as stranger:
        await stranger.until(lambda: stranger.closed, 5)
    assert stranger.close_code == 1008 and calls.conns == []
    async with FakePhoneCall.connect(stream_url, call_sid=sid, parameters=params) as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: calls.state() == "speaking", 5)
        await call.until(lambda: calls.state() == "listening", 5)
    assert call.heard_seconds() == pytest.approx(len(REPLY) * SECONDS_PER_CHAR, abs=0.03)
    assert calls.conns[0].call is not None
    assert calls.conns[0].call.parameters[TOKEN_PARAMETER] == params[TOKEN_PARAMETER]
    # the token was used up: a replay is refused
    async with FakePhoneCall.connect(stream_url, call_sid=sid, parameters=params) as replay:
        await replay.until(lambda: replay.closed, 5)
    assert replay.close_code == 1008 and len(calls.conns) == 1


async def test_a_full_server_rejects_the_call_and_refuses_the_media_socket(host: Start) -> None:
    calls = Calls()
    served = await phone_host(host, calls, [[REPLY]], ["Hello."], max_sessions=1)
    async with FakePhoneCall.connect(served.ws + "/twilio") as call:
        await until(lambda: bool(calls.conns))
        async with aiohttp.ClientSession() as http:
            status, _, body = await post(http, served.base + "/twilio/twiml", CALL, None)
            assert status == 200 and "<Reject" in body and 'reason="busy"' in body
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(served.ws + "/twilio")
            assert refused.value.status == 503
        assert not call.closed


async def test_junk_is_dropped_and_a_binary_frame_ends_the_call(host: Start) -> None:
    calls = Calls()
    served = await phone_host(host, calls, [[REPLY]], ["Hello."], start_timeout=0.3)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(served.ws + "/twilio") as ws:
            await ws.send_str("not json")  # junk: dropped, the socket stays
            await ws.send_str('{"event": "nothing"}')
            msg = await ws.receive(timeout=5)  # then no start: closed with the reason
            assert msg.type == aiohttp.WSMsgType.CLOSE
            assert (msg.data, msg.extra) == (1000, "no start message")
        async with FakePhoneCall.connect(served.ws + "/twilio") as call:
            await until(lambda: bool(calls.conns))
            await call.ws.send_bytes(b"\x00" * 10)
            await call.until(lambda: call.closed, 5)
        assert call.close_code == 1003
        async with http.ws_connect(served.ws + "/twilio") as ws:
            await ws.send_str("x" * (64 * 1024 + 1))  # over max_frame_bytes
            msg = await ws.receive(timeout=5)
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1009)
    await until(lambda: bool(calls.closes and calls.closes[0]))
    assert calls.closes[0] == ["binary frames are not part of this protocol"]


@pytest.mark.parametrize("signed", [True, False])
async def test_a_junk_host_header_gets_a_4xx_never_a_500(host: Start, signed: bool) -> None:
    """The webhook's URL comes from the request's Host header, which is whatever the
    sender wrote: a bracket or a port out of range is refused, on both hosts, with or
    without a token to check, and the server answers the next real webhook."""
    calls = Calls()
    auth = {"twilio_auth_token": AUTH} if signed else {}
    served = await phone_host(host, calls, [[REPLY]], ["Hello."], **auth)
    port = int(served.base.rsplit(":", 1)[1])
    body = b"CallSid=CA1&From=%2B1555"
    for junk in ("example.com[", "]example.com", "example.com:99999", "[::1"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /twilio/twiml HTTP/1.1\r\nHost: " + junk.encode() + b"\r\n"
            b"X-Twilio-Signature: abc\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
        )
        await writer.drain()
        status_line = (await asyncio.wait_for(reader.readline(), 5)).decode()
        writer.close()
        status = int(status_line.split()[1])
        assert 400 <= status < 500 or (status == 200 and not signed), (junk, status_line)
    url = served.base + "/twilio/twiml"
    async with aiohttp.ClientSession() as http:
        status, _, _ = await post(http, url, CALL, twilio_signature(AUTH, url, CALL))
    assert status == 200
