"""``GET /sessions`` on a live server: what a session owes right now and its timeline, over
real HTTP on 127.0.0.1 while a phone call's tool runs (real time, short)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.session.timeline import read_timeline
from rejoinder.testing import FakePhoneCall, ScriptedTTS, ToolCall, speech_frame

from ._client import scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]


@rj.function_tool
async def slow_lookup() -> str:
    """Look something up slowly."""
    await asyncio.sleep(1.5)
    return "found"


async def test_sessions_show_what_is_owed_and_the_timeline() -> None:
    make = scripted_session(
        [[ToolCall("slow_lookup")], ["Found it."]], ["Look it up."], lambda: ScriptedTTS()
    )

    async def entrypoint(conn: Connection) -> None:
        await conn.serve(make(), rj.Agent(instructions="t", tools=[slow_lookup], id="front"))

    app = create_app(entrypoint, telephony=["twilio"], inspect=True, webrtc=False, page=False)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            base = str(server.make_url(""))
            async with FakePhoneCall.connect(base.replace("http", "ws") + "/twilio") as call:
                await call.say(speech_frame(0.4, 8000).data, 8000)
                rows: list[dict[str, Any]] = []
                async with asyncio.timeout(5):
                    while not any(o["kind"] == "tool" for r in rows for o in r["owed"]):
                        await asyncio.sleep(0.05)
                        async with http.get(base + "/sessions") as resp:
                            rows = (await resp.json())["sessions"]
                (row,) = rows
                assert (row["transport"], row["agent"], row["agent_state"]) == (
                    "twilio",
                    "front",
                    "thinking",
                )
                tool = next(o for o in row["owed"] if o["kind"] == "tool")
                assert tool["label"] == "slow_lookup" and tool["committed"] and tool["age"] >= 0
                async with http.get(f"{base}/sessions/{row['session']}/timeline") as resp:
                    assert resp.status == 200
                    entries = read_timeline((await resp.text()).splitlines())
                opened = [e for e in entries if e["kind"] == "ob_opened" and e["ob"] == "tool"]
                assert [e["label"] for e in opened] == ["slow_lookup"]
                async with http.get(f"{base}/sessions/nope/timeline") as resp:
                    assert resp.status == 404
                await call.hang_up()
    finally:
        await server.close()


async def test_sessions_are_not_served_unless_asked() -> None:
    async def entrypoint(conn: Connection) -> None:
        raise AssertionError("no session expected")

    server = TestServer(create_app(entrypoint, webrtc=False, page=False), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.get(server.make_url("/sessions")) as r:
            assert r.status == 404
    finally:
        await server.close()
