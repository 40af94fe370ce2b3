"""What the outbound tests share: a server with one provider's routes (its webhook secret
set), the fake carrier, the provider's call control pointed at it, and the sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.app import GATE
from rejoinder.io.telephony import TelephonyOptions
from rejoinder.io.telephony.carriers import PlivoCalls, TelnyxCalls, TwilioCalls
from rejoinder.io.telephony.carriers.base import Dialing
from rejoinder.io.telephony.carriers.http import HttpPolicy
from rejoinder.io.telephony.routes import add_telephony_routes
from rejoinder.io.telephony.service import TelephonyService, WebhookSecrets
from rejoinder.testing import ScriptedTTS
from rejoinder.testing.carriers import CallOutcome, FakePlivo, FakeTelnyx, FakeTwilio

from .._client import scripted_session

GREETING = "Hello, this is the clinic calling."
SECONDS_PER_CHAR = 0.02
FAST = HttpPolicy(timeout=3.0, attempts=3, backoff=0.02, max_backoff=0.05)


class Greeter(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You call patients.")

    async def on_enter(self) -> None:
        self.session.say(GREETING)


@dataclass
class Rig:
    provider: str
    carrier: Any
    control: Dialing
    service: TelephonyService
    public_url: str
    conns: list[Connection] = field(default_factory=list)
    sessions: list[rj.AgentSession[Any]] = field(default_factory=list)
    answered_by: list[Any] = field(default_factory=list)


def make_carrier(provider: str, outcomes: list[CallOutcome]) -> Any:
    kind = {"twilio": FakeTwilio, "telnyx": FakeTelnyx, "plivo": FakePlivo}[provider]
    return kind(outcomes=outcomes, max_call_seconds=10.0)


def secrets_for(carrier: Any) -> WebhookSecrets:
    if isinstance(carrier, FakeTwilio):
        return WebhookSecrets(twilio_auth_token=carrier.auth_token)
    if isinstance(carrier, FakeTelnyx):
        return WebhookSecrets(telnyx_public_key=carrier.public_key)
    return WebhookSecrets(plivo_auth_token=carrier.auth_token)


def control_for(carrier: Any, public_url: str) -> Dialing:
    if isinstance(carrier, FakeTwilio):
        return TwilioCalls(
            carrier.account_sid, carrier.auth_token, base_url=carrier.base_url, policy=FAST
        )
    if isinstance(carrier, FakeTelnyx):
        return TelnyxCalls(
            carrier.api_key, carrier.connection_id, base_url=carrier.base_url, policy=FAST
        )
    return PlivoCalls(
        carrier.auth_id,
        carrier.auth_token,
        transfer_url=public_url + "/plivo/transfer",
        base_url=carrier.base_url,
        policy=FAST,
    )


@asynccontextmanager
async def rig(
    provider: str,
    *outcomes: CallOutcome,
    seconds_per_char: float = SECONDS_PER_CHAR,
    serve_after: asyncio.Event | None = None,
) -> AsyncIterator[Rig]:
    """``seconds_per_char``: the scripted voice's pace (the greeting lasts
    ``len(GREETING) * seconds_per_char`` seconds of real time on the line).
    ``serve_after``: the entry point serves its session only once it is set."""
    make = scripted_session([], [], lambda: ScriptedTTS(seconds_per_char=seconds_per_char))
    rigged: Rig

    async def entrypoint(conn: Connection) -> None:
        session = make()
        session.on("answered_by", rigged.answered_by.append)
        rigged.conns.append(conn)
        rigged.sessions.append(session)
        if serve_after is not None:
            await serve_after.wait()
        await conn.serve(session, Greeter())

    async with make_carrier(provider, list(outcomes)) as carrier:
        app = create_app(entrypoint, webrtc=False, page=False)
        service = add_telephony_routes(
            app,
            entrypoint,
            gate=app[GATE],
            providers=[provider],
            options=TelephonyOptions(mark_interval=0.1),
            secrets=secrets_for(carrier),
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        public_url = str(server.make_url("")).rstrip("/")
        control = control_for(carrier, public_url)
        rigged = Rig(provider, carrier, control, service, public_url)
        try:
            yield rigged
        finally:
            await control.aclose()
            await server.close()
