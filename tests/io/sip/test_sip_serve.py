"""`rejoinder serve FILE --sip 127.0.0.1:0` as a separate process, called by SIPp: the
command line's SIP endpoint answers, runs the agent file on the call and leaves nothing
behind. Real time, bounded."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path

import aiohttp
import pytest

from ..._served import server
from ._sip_support import SIPP, run_sipp

pytestmark = [
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),
    pytest.mark.skipif(SIPP is None, reason="SIPp not installed (apt-get install sip-tester)"),
]

AGENT = """
import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD


class Greeter(rj.Agent):
    instructions = "test"

    async def on_enter(self) -> None:
        self.session.say("Hello caller, you reached the agent.")


async def entrypoint(conn):
    assert conn.transport == "sip" and conn.line is not None
    session = rj.AgentSession(
        llm=ScriptedLLM(lambda _: ["Sure."]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(lambda _: "Hi."),
        tts=ScriptedTTS(seconds_per_char=0.02),
    )
    await conn.serve(session, Greeter())
"""


async def test_serve_with_sip_answers_a_call_and_frees_its_place(tmp_path: Path) -> None:
    agent = tmp_path / "sip_agent.py"
    agent.write_text(textwrap.dedent(AGENT), encoding="utf-8")
    argv = ["serve", str(agent), "--sip", "127.0.0.1:0", "--max-load", "0"]
    async with server(argv, with_stderr=True) as srv, aiohttp.ClientSession() as http:
        line = await srv.wait_line(r"SIP: +udp 127\.0\.0\.1:\d+", 10)
        match = re.search(r":(\d+) \(", line)
        assert match is not None, line
        assert "loopback" in line or "127.0.0.0/8" in line  # the default allow-list
        result = await run_sipp("basic.xml", int(match.group(1)))
        assert result.returncode == 0, result.errors
        assert result.stats["SuccessfulCall(C)"] == "1"
        for _ in range(100):  # another process: poll its /healthz, 5 s at most
            async with http.get(f"{srv.base}/healthz") as response:
                if (await response.json())["sessions"] == 0:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the call's session was still live 5 s after its BYE")
        assert "Traceback" not in "\n".join(srv.lines)
