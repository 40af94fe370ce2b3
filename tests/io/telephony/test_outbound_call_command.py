"""``run_call`` (what ``rejoinder call`` runs) against the fake carriers: it serves the
agent file, places the call, prints the statuses and exits 0 for a call answered and
completed, 3 busy, 4 no answer, 1 when the provider refuses the call, 2 naming a missing
credential."""

from __future__ import annotations

import argparse
import io
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rejoinder.io.telephony.call_command import (
    EXIT_BUSY,
    EXIT_NO_ANSWER,
    CallOptions,
    options_from_args,
    run_call,
)
from rejoinder.testing.carriers import CallOutcome, FakePlivo, FakeTelnyx, FakeTwilio

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

AGENT = """
import rejoinder as rj
from rejoinder.testing import ScriptedTTS


class Caller(rj.Agent):
    def __init__(self):
        super().__init__(instructions="You call people.")

    async def on_enter(self):
        self.session.say("Hello from the pharmacy.")


async def entrypoint(conn):
    session = rj.AgentSession(tts=ScriptedTTS(seconds_per_char=0.01), user_away_timeout=None)
    await conn.serve(session, Caller())
"""


def env_for(carrier: Any) -> dict[str, str]:
    if isinstance(carrier, FakeTwilio):
        return {"TWILIO_ACCOUNT_SID": carrier.account_sid, "TWILIO_AUTH_TOKEN": carrier.auth_token}
    if isinstance(carrier, FakeTelnyx):
        return {
            "TELNYX_API_KEY": carrier.api_key,
            "TELNYX_CONNECTION_ID": carrier.connection_id,
            "TELNYX_PUBLIC_KEY": carrier.public_key,
        }
    return {"PLIVO_AUTH_ID": carrier.auth_id, "PLIVO_AUTH_TOKEN": carrier.auth_token}


async def place(tmp_path: Path, carrier: Any, provider: str) -> tuple[int, str]:
    agent = tmp_path / "agent.py"
    agent.write_text(textwrap.dedent(AGENT), encoding="utf-8")
    out = io.StringIO()
    options = CallOptions(
        to="+15551230000",
        agent=str(agent),
        telephony=provider,
        from_="+15557650000",
        ring_timeout=5,
        port=0,
        api_url=carrier.base_url,
        env=env_for(carrier),
    )
    return await run_call(options, out), out.getvalue()


@pytest.mark.parametrize(
    ("provider", "kind"), [("twilio", FakeTwilio), ("telnyx", FakeTelnyx), ("plivo", FakePlivo)]
)
async def test_an_answered_call_exits_0_after_printing_its_course(
    tmp_path: Path, provider: str, kind: Any
) -> None:
    async with kind(outcomes=[CallOutcome("human", talk_seconds=0.6)]) as carrier:
        code, printed = await place(tmp_path, carrier, provider)
        fake = carrier.calls[0]
    assert code == 0, printed
    assert fake.stream is not None and fake.stream.audible()  # the agent was heard
    lines = printed.splitlines()
    assert lines[0] == f"calling +15551230000 from +15557650000 via {provider}"
    statuses = [line.split()[0] for line in lines[1:]]
    assert "answered" in statuses and statuses[-1] == "completed"
    assert any(line.startswith("answered by: human") for line in lines)


@pytest.mark.parametrize(("answer", "code"), [("busy", EXIT_BUSY), ("no-answer", EXIT_NO_ANSWER)])
async def test_busy_and_no_answer_exit_non_zero(tmp_path: Path, answer: Any, code: int) -> None:
    async with FakeTwilio(outcomes=[CallOutcome(answer)]) as carrier:
        got, printed = await place(tmp_path, carrier, "twilio")
    assert got == code and printed.splitlines()[-1].startswith(answer)


async def test_a_refused_call_exits_1(tmp_path: Path) -> None:
    async with FakeTelnyx() as carrier:
        carrier.fail_next(500)
        code, printed = await place(tmp_path, carrier, "telnyx")
    assert code == 1 and "failed: telnyx: cannot call +15551230000: HTTP 500" in printed
    assert not carrier.calls


async def test_a_missing_credential_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = CallOptions(
        to="+1555",
        agent=str(tmp_path / "a.py"),
        telephony="telnyx",
        from_="+1666",
        env={"TELNYX_API_KEY": "k"},
    )
    assert await run_call(options, io.StringIO()) == 2
    error = capsys.readouterr().err
    assert "TELNYX_CONNECTION_ID and TELNYX_PUBLIC_KEY" in error


def test_the_documented_argparse_lines_give_run_call_its_options() -> None:
    # the lines the report gives the lead for cli.py, verbatim
    parser = argparse.ArgumentParser(prog="rejoinder")
    commands = parser.add_subparsers(dest="command")
    call = commands.add_parser("call", help="place a phone call with an agent file")
    call.add_argument("to", metavar="NUMBER", help="the number to call, E.164 (+15551234567)")
    call.add_argument("--agent", required=True, metavar="FILE", help="the agent file")
    call.add_argument("--telephony", required=True, choices=("twilio", "telnyx", "plivo"))
    call.add_argument("--from", dest="from_", metavar="NUMBER", help="the caller ID")
    call.add_argument("--public-url", metavar="URL", help="the server's public base URL")
    call.add_argument("--no-machine-detection", dest="machine_detection", action="store_false")
    call.add_argument("--ring-timeout", type=float, default=30.0, metavar="SECONDS")
    call.add_argument("--host", default="127.0.0.1")
    call.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(
        [
            "call",
            "+15551234567",
            "--agent",
            "a.py",
            "--telephony",
            "telnyx",
            "--from",
            "+15550000000",
            "--public-url",
            "https://abc.example",
            "--no-machine-detection",
            "--ring-timeout",
            "12",
        ]
    )
    assert options_from_args(args) == CallOptions(
        to="+15551234567",
        agent="a.py",
        telephony="telnyx",
        from_="+15550000000",
        public_url="https://abc.example",
        machine_detection=False,
        ring_timeout=12.0,
    )
