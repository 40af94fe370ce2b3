"""``rejoinder dev`` as a separate process, driven by clients written from docs/protocol.md
alone: the states a client sees, the close codes, and that nothing is left running.
Real time, each test bounded to seconds.

The agent file is scripted (an energy VAD, scripted recognizer, model and voice), so what
is measured is the server's behaviour towards its client. One ``rejoinder dev`` serves
the module's WebSocket tests (starting one costs a second or two of imports): each test
asks for its agent through the socket's query (``conn.query``: the greeting, the
recognizer's latency, the away timeout) and leaves no session behind. The full phone line
(``--max-sessions 2``) has a server of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
import pytest_asyncio

from .._served import Server, server
from ._protocol_client import ProtocolClient

ONE_LOOP = pytest.mark.asyncio(loop_scope="module")
"""The shared server's process and output pump belong to the module's loop."""
pytestmark = [
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),
    ONE_LOOP,
]

AGENT = """
import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD

LONG = {long!r}


class Greeter(rj.Agent):
    instructions = "test"

    def __init__(self, greeting):
        super().__init__()
        self.greeting = greeting

    async def on_enter(self) -> None:
        if self.greeting:
            self.session.say(self.greeting)


async def entrypoint(conn):
    # what the test asked for in the socket's query (see agent_query)
    asked = conn.query
    away = asked.get("away")
    session = rj.AgentSession(
        llm=ScriptedLLM(lambda _: ["Hello again, nice to hear you."]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(
            lambda _: "Hi there.", latency=float(asked.get("recognizer_seconds", 0.0))
        ),
        tts=ScriptedTTS(seconds_per_char=0.02),
        user_away_timeout=float(away) if away else None,
        min_interruption_duration=0.3,
    )
    await conn.serve(session, Greeter(asked.get("greeting", LONG)))
"""

LONG = "This greeting goes on for a while, long enough to be talked over by the user."


def agent_file(folder: Path) -> Path:
    path = folder / "outside_agent.py"
    path.write_text(textwrap.dedent(AGENT.format(long=LONG)), encoding="utf-8")
    return path


def agent_query(
    *, greeting: str = LONG, recognizer_seconds: float = 0.0, away: float | None = None
) -> str:
    """The agent a connection gets: its greeting (none when empty), how long its scripted
    recognizer takes, and its ``user_away_timeout`` (none by default)."""
    asked: dict[str, str] = {"greeting": greeting, "recognizer_seconds": str(recognizer_seconds)}
    if away is not None:
        asked["away"] = str(away)
    return urlencode(asked)


async def connect(
    srv: Server, http: aiohttp.ClientSession, *, query: str = "", **options: Any
) -> ProtocolClient:
    ws = await http.ws_connect(f"{srv.base}/ws?{query or agent_query()}")
    client = ProtocolClient(ws, **options)
    await client.start()
    return client


async def sessions(srv: Server, http: aiohttp.ClientSession) -> int:
    async with http.get(f"{srv.base}/healthz") as response:
        return int((await response.json())["sessions"])


async def no_sessions_left(srv: Server, http: aiohttp.ClientSession, within: float = 5.0) -> None:
    """Polls the server's /healthz (another process: there is nothing to wait on here)."""
    for _ in range(round(within / 0.05)):
        if not (live := await sessions(srv, http)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{live} session(s) still live after {within} s")


def dev(agent: Path) -> list[str]:
    return ["dev", str(agent), "--no-reload"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    """The module's ``rejoinder dev`` (its log lines too, in ``lines``)."""
    agent = agent_file(tmp_path_factory.mktemp("outside"))
    async with server(dev(agent), with_stderr=True) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def http(srv: Server) -> AsyncIterator[aiohttp.ClientSession]:
    """A client session for one test, which starts on a server with no live session (the
    tests check that they leave none behind; one that failed may have left a session
    closing) and leaves none behind."""
    async with aiohttp.ClientSession() as session:
        await no_sessions_left(srv, session, within=10)
        yield session


# ------------------------------------------------------------ playback reports


async def test_a_client_that_never_confirms_a_clear_still_hears_the_next_reply(
    srv: Server, http: aiohttp.ClientSession
) -> None:
    # A greeting of about 3 s: under a loaded CI machine the speech below can start most
    # of a second late, and LONG's 1.5 s had sometimes played out by then (no clear).
    greeting = f"{LONG} {LONG}"
    client = await connect(srv, http, query=agent_query(greeting=greeting), confirms_clears=False)
    try:
        speaking = await client.wait_state("speaking")
        await asyncio.sleep(0.5)
        await client.speak(0.8)  # talks over the greeting
        clear = await client.wait_for(lambda s: s.kind == "clear", within=3)
        received_at_clear = client.received
        await client.silence(0.6)
        # The reply to "Hi there." is heard, then finishes: within seconds, not the
        # reply watchdog's minutes.
        second = await client.wait_state("speaking", after=clear.t, within=6)
        done = await client.wait_state("listening", after=second.t, within=6)
        assert client.received > received_at_clear
        assert done.t - speaking.t < 10
        assert client.first("error", code="playback_reports") is None
    finally:
        await client.close()
    await no_sessions_left(srv, http)


async def test_a_client_that_stops_reporting_played_is_not_left_speaking(
    srv: Server, http: aiohttp.ClientSession
) -> None:
    greeting = "A short greeting of about two seconds of audio in all."
    client = await connect(srv, http, query=agent_query(greeting=greeting))
    try:
        speaking = await client.wait_state("speaking")
        client.stop_reporting()
        # ~1.1 s of audio: 1.5 s after it would have played out, it counts as played.
        warning = await client.wait_for(
            lambda s: s.kind == "error" and s.data["code"] == "playback_reports", within=6
        )
        assert warning.data["source"] == "playback"
        listening = await client.wait_state("listening", after=speaking.t, within=1)
        assert listening.t - speaking.t < 4.5
        assert client.states()[-1] == "listening"
    finally:
        await client.close()
    await no_sessions_left(srv, http)


# ------------------------------------------------------------- the user's turn


async def test_a_user_whose_words_are_still_being_recognized_is_not_away(
    srv: Server, http: aiohttp.ClientSession
) -> None:
    query = agent_query(greeting="", recognizer_seconds=2.5, away=1.0)
    client = await connect(srv, http, query=query)
    try:
        await client.wait_state("listening")
        await client.speak(0.5)
        spoke_until = time.monotonic()
        room = asyncio.create_task(client.silence(6.0))  # the microphone goes on
        words = await client.wait_for(
            lambda s: s.kind == "transcript" and s.data["role"] == "user" and s.data["final"],
            within=6,
        )
        away = client.first("user_state", state="away")
        assert away is None or away.t > words.t, "away while the words were recognized"
        assert words.t - spoke_until > 2.0  # the recognizer really was slow
        await client.wait_state("thinking", after=words.t - 0.05, within=3)
        room.cancel()
    finally:
        await client.close()
    await no_sessions_left(srv, http)


# ------------------------------------------------------------------- the start


@pytest.mark.parametrize("greets", [True, False])
async def test_the_first_state_after_initializing_is_the_truth(
    srv: Server, http: aiohttp.ClientSession, greets: bool
) -> None:
    client = await connect(srv, http, query=agent_query(greeting="Hello!" if greets else ""))
    try:
        if greets:
            await client.wait_state("listening", within=5)
            assert client.states()[:4] == ["initializing", "thinking", "speaking", "listening"]
        else:
            await client.wait_state("listening", within=5)
            await asyncio.sleep(0.3)
            assert client.states() == ["initializing", "listening"]
    finally:
        await client.close()
    await no_sessions_left(srv, http)


# ------------------------------------------------------------------- leaving


async def test_a_client_that_leaves_at_once_leaves_no_error_behind(
    srv: Server, http: aiohttp.ClientSession
) -> None:
    # what the server logs from here on (the module's earlier tests left no session)
    since = len(srv.lines)
    query = agent_query(greeting="Hello, and welcome!")
    for _ in range(5):
        ws = await http.ws_connect(f"{srv.base}/ws?{query}")
        await ws.send_str('{"type": "start", "sample_rate": 16000}')
        await ws.close()
        # one after another (five at once would be a burst the server may refuse)
        await no_sessions_left(srv, http)
    await asyncio.sleep(0.3)
    logged = "\n".join(srv.lines[since:])
    assert "Traceback" not in logged
    assert "ERROR" not in logged


@pytest.mark.parametrize(
    ("send", "code"),
    [
        ("not json", 1007),
        (b"audio before start", 1003),
        ('{"type": "start", "sample_rate": 3}', 1008),
    ],
)
async def test_the_server_closes_with_the_documented_code_every_time(
    srv: Server, http: aiohttp.ClientSession, send: str | bytes, code: int
) -> None:
    seen: list[int | None] = []
    for _ in range(10):
        ws = await http.ws_connect(f"{srv.base}/ws?{agent_query()}")
        if isinstance(send, bytes):
            await ws.send_bytes(send)
        else:
            await ws.send_str(send)
        async with asyncio.timeout(5):
            async for _msg in ws:
                pass
        seen.append(ws.close_code)
    assert seen == [code] * 10
    await no_sessions_left(srv, http)


async def test_the_page_has_a_favicon(srv: Server, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{srv.base}/favicon.ico") as response:
        assert response.status == 200
        assert response.content_type.startswith("image/")
        assert len(await response.read()) > 0


# ------------------------------------------------------------------- a full phone line


async def test_calls_over_capacity_are_rejected_busy_and_the_rest_are_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N + 2 fake phone calls on a process sized for N: N are answered and greeted, the
    other two get <Reject reason="busy"/> (and a media stream opened anyway gets 503),
    and once the callers hang up the line takes calls again. (A server of its own: its
    --max-sessions is what is tested; a call's agent greets with the long greeting.)"""
    from rejoinder.testing import FakePhoneCall

    monkeypatch.delenv("TWILIO_AUTH_TOKEN", raising=False)
    argv = [*dev(agent_file(tmp_path)), "--telephony", "twilio", "--max-sessions", "2"]
    async with server(argv) as srv, aiohttp.ClientSession() as http:

        async def webhook(sid: str) -> str:
            form = {"CallSid": sid, "From": "+15550001", "To": "+15550002"}
            async with http.post(f"{srv.base}/twilio/twiml", data=form) as answer:
                assert answer.status == 200
                return await answer.text()

        async with contextlib.AsyncExitStack() as lines:
            calls = []
            for sid in ("CA1", "CA2"):
                twiml = await webhook(sid)
                stream = re.search(r'<Stream url="([^"]+)"', twiml)
                assert stream is not None, twiml
                calls.append(
                    await lines.enter_async_context(
                        FakePhoneCall.connect(stream.group(1), call_sid=sid)
                    )
                )
            for call in calls:
                await call.until(lambda c=call: c.heard_seconds() >= 0.12, 10)
            for sid in ("CA3", "CA4"):
                twiml = await webhook(sid)
                assert '<Reject reason="busy"' in twiml, twiml
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{srv.base}/twilio")
            assert refused.value.status == 503
            async with http.get(f"{srv.base}/healthz") as response:
                assert response.status == 503
                assert (await response.json())["status"] == "full"
            for call in calls:
                await call.hang_up()
        await no_sessions_left(srv, http)
        assert "<Stream" in await webhook("CA5")
