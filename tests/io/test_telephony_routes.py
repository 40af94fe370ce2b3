"""The telephony routes over real HTTP and WebSockets on 127.0.0.1, in real time.

Twilio's webhook (signature, TwiML, one-time stream tokens) and its media socket refusing
streams no accepted webhook announced; admission when the server is full; Plivo's answer
XML; whole Telnyx and Plivo calls through a small client of each provider's envelope
(written here: ``FakePhoneCall`` only speaks Twilio); junk and abuse on the socket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.telephony import TelephonyOptions
from rejoinder.io.telephony.twilio_webhook import TOKEN_PARAMETER, twilio_signature
from rejoinder.models import g711
from rejoinder.testing import FakePhoneCall, ScriptedTTS, speech_frame

from ._client import scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

AUTH = "test-auth-token"
TICK = 0.02
CHUNK = 160
SECONDS_PER_CHAR = 0.05
REPLY = "Hi there."
LONG = "This answer goes on and on for quite a while, " * 2
CALL = {
    "AccountSid": "AC00000000000000000000000000000001",
    "CallSid": "CA00000000000000000000000000000001",
    "From": "+14158675310",
    "To": "+18005551212",
    "CallStatus": "ringing",
}


def tone(seconds: float) -> np.ndarray[Any, np.dtype[np.int16]]:
    return speech_frame(seconds, 8000).data


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:  # noqa: ASYNC109
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - a condition on several objects
            await asyncio.sleep(0.01)


class Served:
    def __init__(self, port: int, http: aiohttp.ClientSession) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.ws = f"ws://127.0.0.1:{port}"
        self.http = http
        self.conns: list[Connection] = []
        self.states: list[list[tuple[float, str]]] = []
        self.closes: list[list[str]] = []
        self.dtmf: list[list[str]] = []

    def state(self, i: int = 0) -> str | None:
        return self.states[i][-1][1] if len(self.states) > i and self.states[i] else None

    async def post(
        self, path: str, params: dict[str, str], signature: str | None = None
    ) -> tuple[int, str]:
        headers = {} if signature is None else {"X-Twilio-Signature": signature}
        async with self.http.post(self.base + path, data=params, headers=headers) as resp:
            return resp.status, await resp.text()

    async def token_for(self, call_sid: str) -> str:
        params = {**CALL, "CallSid": call_sid}
        url = self.base + "/twilio/twiml"
        status, body = await self.post("/twilio/twiml", params, twilio_signature(AUTH, url, params))
        assert status == 200, body
        return stream_of(body)[1][TOKEN_PARAMETER]


Serve = Callable[..., Awaitable[Served]]


def twilio_call(served: Served, **options: Any) -> AbstractAsyncContextManager[FakePhoneCall]:
    return FakePhoneCall.connect(served.ws + "/twilio", **options)


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[TestServer] = []
    async with aiohttp.ClientSession() as http:

        async def start(
            reply: str = REPLY,
            *,
            providers: tuple[str, ...] = ("twilio",),
            max_sessions: int | None = None,
            **options: Any,
        ) -> Served:
            make = scripted_session(
                [[reply], ["Yes?"]],
                ["Hello.", "Wait."],  # sentence-final: the turn ends in 0.1 s
                lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR),
            )

            async def entrypoint(conn: Connection) -> None:
                session, i = make(), len(served.conns)
                served.conns.append(conn)
                served.states.append([])
                served.closes.append([])
                served.dtmf.append([])
                on = session.on
                on(
                    "agent_state_changed",
                    lambda e: served.states[i].append((e.created_at, e.new_state)),
                )
                on("close", lambda e: served.closes[i].append(e.reason))
                on("dtmf", lambda e: served.dtmf[i].append(e.digit))
                await conn.serve(session, rj.Agent(instructions="test"))

            app = create_app(
                entrypoint,
                telephony=list(providers),
                telephony_options=TelephonyOptions(**options),
                max_sessions=max_sessions,
                webrtc=False,
                page=False,
            )
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            servers.append(server)
            assert server.port is not None
            served = Served(server.port, http)
            return served

        yield start
        for server in servers:
            await server.close()


def stream_of(twiml: str) -> tuple[str, dict[str, str]]:
    """The <Connect><Stream> URL and its <Parameter>s."""
    stream = ET.fromstring(twiml.encode()).find("Connect/Stream")
    assert stream is not None, twiml
    params = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
    return stream.get("url", ""), params


# ------------------------------------------------------------- the webhook


@pytest.mark.parametrize("query", ["", "?tenant=7&x=a+b"])
async def test_a_signed_webhook_gets_a_stream_with_the_numbers_and_a_token(
    serve: Serve, query: str
) -> None:
    served = await serve(twilio_auth_token=AUTH)
    url = served.base + "/twilio/twiml" + query  # what the server sees, query included
    status, body = await served.post(
        "/twilio/twiml" + query, CALL, twilio_signature(AUTH, url, CALL)
    )
    assert status == 200
    stream_url, params = stream_of(body)
    assert stream_url == served.ws + "/twilio"
    assert params["From"] == CALL["From"] and params["To"] == CALL["To"]
    assert set(params) == {"From", "To", TOKEN_PARAMETER} and len(params[TOKEN_PARAMETER]) >= 16
    # the same signed webhook again is a replay: no second token for the call
    again = await served.post("/twilio/twiml" + query, CALL, twilio_signature(AUTH, url, CALL))
    assert again[0] == 403
    # each call's webhook announces its own stream
    other = {**CALL, "CallSid": CALL["CallSid"] + "0"}
    _, body = await served.post("/twilio/twiml" + query, other, twilio_signature(AUTH, url, other))
    assert stream_of(body)[1][TOKEN_PARAMETER] != params[TOKEN_PARAMETER]


async def test_behind_a_proxy_the_public_url_is_signed_and_streamed_to(serve: Serve) -> None:
    served = await serve(twilio_auth_token=AUTH, public_url="https://abc.example")
    public = "https://abc.example/twilio/twiml"
    status, body = await served.post("/twilio/twiml", CALL, twilio_signature(AUTH, public, CALL))
    assert status == 200
    stream_url, params = stream_of(body)
    assert stream_url == "wss://abc.example/twilio" and TOKEN_PARAMETER in params
    # the URL the server sees locally is not what Twilio signed
    local = twilio_signature(AUTH, served.base + "/twilio/twiml", CALL)
    assert (await served.post("/twilio/twiml", CALL, local))[0] == 403


BAD = ["wrong signature", "tampered", "no header", "other token", "no CallSid"]


@pytest.mark.parametrize("bad", BAD)
async def test_an_unsigned_or_tampered_webhook_is_refused(serve: Serve, bad: str) -> None:
    served = await serve(twilio_auth_token=AUTH)
    url = served.base + "/twilio/twiml"
    params = {k: v for k, v in CALL.items() if bad != "no CallSid" or k != "CallSid"}
    signature = {
        "wrong signature": "L/OH5YylLD5NRKLltdqwSvS0BnU=",
        "no header": None,
        "other token": twilio_signature("another-token", url, params),
    }.get(bad, twilio_signature(AUTH, url, params))
    if bad == "tampered":
        params["From"] = "+15555550100"
    status, body = await served.post("/twilio/twiml", params, signature)
    assert status == (400 if bad == "no CallSid" else 403) and "<Stream" not in body


async def test_without_an_auth_token_any_webhook_gets_a_stream_without_token(serve: Serve) -> None:
    served = await serve()
    status, body = await served.post("/twilio/twiml", CALL)
    assert status == 200
    assert stream_of(body) == (served.ws + "/twilio", {"From": CALL["From"], "To": CALL["To"]})
    # what XML cannot carry is left out, not a server error
    status, body = await served.post("/twilio/twiml", {**CALL, "From": "+1\x01", "To": "<&>"})
    assert status == 200 and stream_of(body)[1] == {"To": "<&>"}


async def test_a_repeated_form_field_is_signed_value_by_value(serve: Serve) -> None:
    served = await serve(twilio_auth_token=AUTH)
    url = served.base + "/twilio/twiml"
    signature = twilio_signature(AUTH, url, {**CALL, "Tag": ["b", "a"]})
    form = [*CALL.items(), ("Tag", "b"), ("Tag", "a")]
    async with served.http.post(url, data=form, headers={"X-Twilio-Signature": signature}) as r:
        assert r.status == 200
    one = twilio_signature(AUTH, url, {**CALL, "Tag": "a"})  # a value dropped: not signed
    async with served.http.post(url, data=form, headers={"X-Twilio-Signature": one}) as r:
        assert r.status == 403


async def test_a_webhook_by_get_is_signed_over_its_url(serve: Serve) -> None:
    # A number's voice URL may use GET: the parameters are in the query Twilio signed.
    served = await serve(twilio_auth_token=AUTH)
    url = served.base + "/twilio/twiml?" + urlencode(CALL)
    signed = {"X-Twilio-Signature": twilio_signature(AUTH, url, {})}
    async with served.http.get(url, headers=signed) as resp:
        assert resp.status == 200
        _, params = stream_of(await resp.text())
    assert params["From"] == CALL["From"] and TOKEN_PARAMETER in params
    tampered = url.replace("CA", "CB")
    async with served.http.get(tampered, headers=signed) as resp:
        assert resp.status == 403


def test_a_bad_public_url_fails_when_the_app_is_made() -> None:
    with pytest.raises(ValueError, match="public URL"):
        create_app(
            lambda conn: conn.serve(None, None),  # type: ignore[arg-type]
            telephony=["twilio"],
            telephony_options=TelephonyOptions(public_url="ftp://abc.example"),
            webrtc=False,
            page=False,
        )


# ---------------------------------------------------- the announced media socket


async def refused(served: Served, call_sid: str, parameters: dict[str, str]) -> int | None:
    async with twilio_call(served, call_sid=call_sid, parameters=parameters) as call:
        await call.until(lambda: call.closed, 5)
    return call.close_code


@pytest.mark.parametrize("token", ["none", "wrong", "other call's"])
async def test_a_stream_no_accepted_webhook_announced_is_refused(serve: Serve, token: str) -> None:
    served = await serve(twilio_auth_token=AUTH)
    sid, other = CALL["CallSid"], "CA00000000000000000000000000000002"
    real = await served.token_for(sid)
    parameters = {
        "none": {},
        "wrong": {TOKEN_PARAMETER: real[::-1]},
        "other call's": {TOKEN_PARAMETER: await served.token_for(other)},
    }[token]
    assert await refused(served, sid, parameters) == 1008
    assert served.conns == []
    # a failed claim does not spoil the real token
    async with twilio_call(served, call_sid=sid, parameters={TOKEN_PARAMETER: real}) as call:
        await until(lambda: bool(served.conns))
        assert not call.closed


async def test_an_announced_stream_is_answered_and_its_token_cannot_be_replayed(
    serve: Serve,
) -> None:
    served = await serve(twilio_auth_token=AUTH)
    sid = CALL["CallSid"]
    token = await served.token_for(sid)
    parameters = {TOKEN_PARAMETER: token, "From": CALL["From"], "To": CALL["To"]}
    async with twilio_call(served, call_sid=sid, parameters=parameters) as call:
        await call.silence(0.1)
        await call.say(tone(0.4), 8000)
        await call.until(lambda: served.state() == "speaking", 5)
        await call.until(lambda: served.state() == "listening", 5)
        assert call.heard_seconds() == pytest.approx(len(REPLY) * SECONDS_PER_CHAR, abs=0.03)
    call_info = served.conns[0].call
    assert call_info is not None and call_info.from_number == CALL["From"]
    assert await refused(served, sid, parameters) == 1008
    assert len(served.conns) == 1


# -------------------------------------------------------------- admission


async def test_a_full_server_rejects_calls_busy_on_every_route(serve: Serve) -> None:
    served = await serve(providers=("twilio", "plivo"), max_sessions=1)
    async with twilio_call(served) as call:
        await until(lambda: bool(served.conns))
        status, body = await served.post("/twilio/twiml", CALL)
        assert status == 200
        root = ET.fromstring(body.encode())
        assert [(e.tag, e.attrib) for e in root] == [("Reject", {"reason": "busy"})]
        async with served.http.get(served.base + "/twilio") as resp:
            assert resp.status == 503
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await served.http.ws_connect(served.ws + "/plivo")
        assert info.value.status == 503
        status, body = await served.post("/plivo/answer", {"CallUUID": "x"})
        root = ET.fromstring(body.encode())
        assert status == 200 and [(e.tag, e.attrib) for e in root] == [
            ("Hangup", {"reason": "busy"})
        ]
        assert not call.closed  # the live call is untouched
        async with served.http.get(served.base + "/metrics") as resp:
            families = text_string_to_metric_families(await resp.text())
            refused = {s.name: s.value for f in families for s in f.samples}
            assert refused["rejoinder_sessions_refused_total"] == 4
    await until(lambda: bool(served.closes[0]))
    await asyncio.sleep(0.05)
    status, body = await served.post("/twilio/twiml", CALL)
    assert stream_of(body)[0] == served.ws + "/twilio"  # room again


# ----------------------------------------------------------- Plivo's answer


@pytest.mark.parametrize(
    ("public_url", "expected"),
    [
        (None, "ws://127.0.0.1:{port}/plivo"),
        ("https://abc.example/base/", "wss://abc.example/base/plivo"),
    ],
)
async def test_plivo_answer_streams_both_ways_in_mulaw(
    serve: Serve, public_url: str | None, expected: str
) -> None:
    served = await serve(providers=("plivo",), public_url=public_url)
    status, body = await served.post("/plivo/answer", {"CallUUID": "u", "From": "1", "To": "2"})
    assert status == 200 and body.startswith("<?xml")
    root = ET.fromstring(body.encode())
    (stream,) = list(root)
    assert (root.tag, stream.tag) == ("Response", "Stream")
    assert stream.get("bidirectional") == "true" and stream.get("keepCallAlive") == "true"
    assert stream.get("contentType") == "audio/x-mulaw;rate=8000"
    assert stream.text == expected.format(port=served.base.rsplit(":", 1)[1])


# ------------------------------------------------ Telnyx and Plivo, end to end


TELNYX_START = {
    "user_id": "3E6F995F-85F7-4705-9741-53B116D28237",
    "call_session_id": "ff55a038-4f7e-11ed-b6a7-02420a0daa69",
    "from": "+13122010094",
    "to": "+13122123456",
    "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
    "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
}
PLIVO_START = {
    "accountId": "MAXXXXXXXXXXXXXXXXXX",
    "tracks": ["inbound"],
    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
}


@dataclass
class ProviderCall:
    """The provider side of a Telnyx or Plivo media stream: 20 ms of μ-law a message from
    ``say`` (silence otherwise), a real-time playout echoing marks/checkpoints when it
    passes them; a clear echoes pending marks (Telnyx) or drops them and answers
    ``clearedAudio`` (Plivo)."""

    ws: aiohttp.ClientWebSocketResponse
    provider: Literal["telnyx", "plivo"]
    stream_id: str = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC"
    call_id: str = "v2:T02llQxIyaRkhfRKxgAP8nY511EhFLizdvdUKJiSw8d6A9BborherQ"
    received: list[dict[str, Any]] = field(default_factory=list)
    heard: list[tuple[float, np.ndarray[Any, np.dtype[np.int16]]]] = field(default_factory=list)
    marks_sent: list[str] = field(default_factory=list)
    marks_echoed: list[tuple[float, str]] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    close_code: int | None = None
    _buffer: deque[Any] = field(default_factory=deque)
    _mic: deque[bytes] = field(default_factory=deque)
    _seq: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def send(self, event: str, **body: Any) -> None:
        """One message in the provider's envelope (Telnyx snake_case, string sequence)."""
        self._seq += 1
        if self.provider == "telnyx":
            head: dict[str, Any] = {"sequence_number": str(self._seq), "stream_id": self.stream_id}
        else:
            head = {"sequenceNumber": self._seq, "streamId": self.stream_id}
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_str(json.dumps({"event": event, **head, **body}))

    async def start(self) -> None:
        if self.provider == "telnyx":
            await self.ws.send_str(json.dumps({"event": "connected", "version": "1.0.0"}))
            await self.send("start", start={**TELNYX_START, "call_control_id": self.call_id})
        else:
            start = {**PLIVO_START, "callId": self.call_id, "streamId": self.stream_id}
            await self.send("start", start=start, extra_headers="userId=12345;sessionId=abc-xyz")
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._clock())]

    async def say(self, pcm: np.ndarray[Any, np.dtype[np.int16]]) -> None:
        encoded = g711.ulaw_encode(pcm)
        for at in range(0, len(encoded), CHUNK):
            self._mic.append(encoded[at : at + CHUNK].ljust(CHUNK, b"\xff"))
        await until(lambda: not self._mic, len(encoded) / 8000 + 5)

    async def press(self, digit: str) -> None:
        if self.provider == "telnyx":
            await self.send("dtmf", occurred_at="2025-06-05T08:54:19Z", dtmf={"digit": digit})
        else:
            await self.send("dtmf", dtmf={"track": "inbound", "digit": digit, "timestamp": "1"})

    async def stop(self) -> None:
        await self.send("stop", stop={"user_id": "3E6F995F", "call_control_id": self.call_id})

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if not self.ws.closed:
            await self.ws.close()
        self.close_code = self.ws.close_code if self.close_code is None else self.close_code

    def heard_seconds(self) -> float:
        return sum(len(pcm) for _, pcm in self.heard) / 8000

    async def _echo(self, name: str) -> None:
        self.marks_echoed.append((asyncio.get_running_loop().time(), name))
        if self.provider == "telnyx":
            await self.send("mark", mark={"name": name})
        else:
            await self.send("playedStream", name=name)

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            message = json.loads(msg.data)
            self.received.append(message)
            event = message.get("event")
            if event in ("media", "playAudio"):
                self._buffer.append(g711.ulaw_decode(base64.b64decode(message["media"]["payload"])))
            elif event in ("mark", "checkpoint"):
                name = message["mark"]["name"] if event == "mark" else message["name"]
                self.marks_sent.append(name)
                if self._buffer:
                    self._buffer.append(name)
                else:
                    await self._echo(name)  # nothing queued: echoed at once
            elif event in ("clear", "clearAudio"):
                self.clears.append(asyncio.get_running_loop().time())
                pending = [item for item in self._buffer if isinstance(item, str)]
                self._buffer.clear()
                if event == "clear":
                    for name in pending:
                        await self._echo(name)
                else:
                    await self.send("clearedAudio")
        self.close_code = self.ws.close_code

    async def _clock(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick, chunk_no = loop.time(), 0
        while not self.ws.closed:
            next_tick += TICK
            await asyncio.sleep(max(0.0, next_tick - loop.time()))
            chunk_no += 1
            payload = base64.b64encode(self._mic.popleft() if self._mic else b"\xff" * CHUNK)
            media = {"track": "inbound", "chunk": str(chunk_no), "timestamp": str(chunk_no * 20)}
            await self.send("media", media={**media, "payload": payload.decode()})
            while self._buffer and isinstance(self._buffer[0], str):  # behind the last chunk
                await self._echo(self._buffer.popleft())
            need, pieces = CHUNK, []
            while need and self._buffer and not isinstance(self._buffer[0], str):
                item = self._buffer.popleft()
                pieces.append(item[:need])
                if len(item) > need:
                    self._buffer.appendleft(item[need:])
                need -= len(pieces[-1])
            if pieces:
                self.heard.append((loop.time(), np.concatenate(pieces)))


@contextlib.asynccontextmanager
async def provider_call(
    url: str, provider: Literal["telnyx", "plivo"]
) -> AsyncIterator[ProviderCall]:
    async with aiohttp.ClientSession() as http:
        call = ProviderCall(await http.ws_connect(url), provider)
        try:
            await call.start()
            yield call
        finally:
            await call.aclose()


def outbound_shapes(call: ProviderCall) -> set[str]:
    """Each message the server sent, as its keys (payloads and names left out)."""
    shapes = set()
    for message in call.received:
        shape = {k: v for k, v in message.items() if k not in ("media", "mark", "name")}
        if "media" in message:
            shape["media"] = {k: v for k, v in message["media"].items() if k != "payload"}
        shapes.add(json.dumps(shape, sort_keys=True))
    return shapes


@pytest.mark.parametrize("provider", ["telnyx", "plivo"])
@pytest.mark.parametrize("ending", ["stop", "close"])
async def test_a_call_end_to_end(
    serve: Serve, provider: Literal["telnyx", "plivo"], ending: str
) -> None:
    served = await serve(providers=(provider,))
    async with provider_call(f"{served.ws}/{provider}", provider) as call:
        await asyncio.sleep(0.1)
        await call.say(tone(0.4))
        await until(lambda: served.state() == "speaking")
        await until(lambda: served.state() == "listening")
        await call.press("1")
        await call.press("#")
        await until(lambda: served.dtmf[0] == ["1", "#"])
        if ending == "stop":
            await call.stop()
            await until(lambda: call.ws.closed)  # the server hangs up in turn
        else:
            await call.ws.close()
    await until(lambda: bool(served.closes[0]))
    assert served.closes[0] == ["call ended" if ending == "stop" else "connection lost"]
    if ending == "stop":
        assert call.close_code == 1000

    info = served.conns[0].call
    assert info is not None and info.provider == provider and info.call_id == call.call_id
    if provider == "telnyx":
        assert info.codec == "mulaw" and info.from_number == "+13122010094"
        media = '{"event": "media", "media": {}}'
        assert outbound_shapes(call) == {media, '{"event": "mark"}'}
    else:
        assert info.parameters == {"userId": "12345", "sessionId": "abc-xyz"}
        media = (
            '{"event": "playAudio", "media": {"contentType": "audio/x-mulaw", "sampleRate": 8000}}'
        )
        checkpoint = json.dumps({"event": "checkpoint", "streamId": call.stream_id})
        assert outbound_shapes(call) == {media, checkpoint}
    # The answer was heard whole, loud, and every mark came back.
    assert call.heard_seconds() == pytest.approx(len(REPLY) * SECONDS_PER_CHAR, abs=0.03)
    loud = [at for at, pcm in call.heard if np.abs(pcm).max() > 200]
    assert loud and len(call.marks_sent) >= 3
    assert [n for _, n in call.marks_echoed] == call.marks_sent
    # speaking and listening follow the echoes: not before the caller heard it.
    states = served.states[0]
    speaking = [t for t, s in states if s == "speaking"]
    assert len(speaking) == 1 and loud[0] - 0.005 <= speaking[0] <= loud[0] + 0.16 + 2 * TICK
    listening = next(t for t, s in states if s == "listening" and t > speaking[0])
    assert loud[-1] - 0.005 <= listening <= loud[-1] + 3 * TICK


@pytest.mark.parametrize("provider", ["telnyx", "plivo"])
async def test_a_barge_in_clears_the_provider_line(
    serve: Serve, provider: Literal["telnyx", "plivo"]
) -> None:
    served = await serve(LONG, providers=(provider,))
    async with provider_call(f"{served.ws}/{provider}", provider) as call:
        await call.say(tone(0.4))
        await until(lambda: call.heard_seconds() > 0.8)
        await call.say(tone(0.5))
        await until(lambda: bool(call.clears))

        def answered_twice() -> bool:
            spoke = [s for _, s in served.states[0]].count("speaking")
            return spoke == 2 and served.state() == "listening"

        await until(answered_twice, 8)
    clear = "clear" if provider == "telnyx" else "clearAudio"
    cleared = [m for m in call.received if m["event"] == clear]
    assert len(cleared) == 1
    if provider == "telnyx":
        assert cleared[0] == {"event": "clear"}
        assert [n for _, n in call.marks_echoed] == call.marks_sent  # echoed on the clear
    else:
        assert cleared[0] == {"event": "clearAudio", "streamId": call.stream_id}
        assert len(call.marks_echoed) < len(call.marks_sent)  # dropped, never echoed
    # the second answer ("Yes?") was heard after the clear
    assert any(at > call.clears[0] + TICK for at, _ in call.heard)


# ----------------------------------------------------------- junk and abuse


async def test_junk_text_is_ignored_and_a_binary_frame_ends_the_call(serve: Serve) -> None:
    served = await serve()
    async with twilio_call(served) as call:
        for junk in [
            "not json",
            "[1, 2]",
            '"text"',
            '{"event": "bogus"}',
            '{"event": 7}',
            '{"event": "media", "media": {"payload": "!!not base64"}}',
            '{"event": "dtmf", "dtmf": {"digit": "Z"}}',
            '{"event": "mark", "mark": {"name": "rj-999-999"}}',
            json.dumps({"event": "start", "start": {"callSid": "CA2", "streamSid": "MZ2"}}),
        ]:
            await call.ws.send_str(junk)
        await call.say(tone(0.4), 8000)
        await call.until(lambda: served.state() == "speaking", 5)
        await call.until(lambda: served.state() == "listening", 5)
        assert not call.closed and len(served.conns) == 1
        assert call.heard_seconds() == pytest.approx(len(REPLY) * SECONDS_PER_CHAR, abs=0.03)
        await call.ws.send_bytes(b"\x00" * 160)  # a binary frame mid-call ends it
        await call.until(lambda: call.closed, 5)
    assert call.close_code == 1003
    await until(lambda: bool(served.closes[0]))
    assert served.closes[0] == ["binary frames are not part of this protocol"]


@pytest.mark.parametrize(("abuse", "code"), [("binary", 1003), ("flood", 1008), ("silent", 1000)])
async def test_abuse_closes_that_socket_and_the_next_call_works(
    serve: Serve, abuse: str, code: int
) -> None:
    served = await serve(max_messages_per_second=100, burst_seconds=0.5, start_timeout=0.3)
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(served.ws + "/twilio")
        if abuse == "binary":
            await ws.send_bytes(b"\x00" * 160)
        elif abuse == "flood":
            for _ in range(300):
                await ws.send_str('{"event": "connected"}')
        # "silent": no start within start_timeout
        async with asyncio.timeout(5):
            async for _ in ws:
                pass
        assert ws.close_code == code
    assert served.conns == []
    async with twilio_call(served) as call:
        await call.say(tone(0.4), 8000)
        await call.until(lambda: served.state() == "listening" and call.heard_seconds() > 0.4, 5)
        assert not call.closed
