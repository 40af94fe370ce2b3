"""The providers' credentials from the environment: what `rejoinder serve --telephony`
and `rejoinder call` build from them (call control only with every credential set; the
webhook secrets each on its own)."""

from __future__ import annotations

import pytest
from aiohttp import web

from rejoinder.devserver import ServerOptions, _call_controls
from rejoinder.io.app import create_app
from rejoinder.io.telephony import TELEPHONY, PlivoCalls, TelnyxCalls, TwilioCalls
from rejoinder.io.telephony.environment import (
    controls_from_env,
    missing_credentials,
    secrets_from_env,
)

FULL = {
    "TWILIO_ACCOUNT_SID": "AC123",
    "TWILIO_AUTH_TOKEN": "secret",
    "TELNYX_API_KEY": "KEY",
    "TELNYX_CONNECTION_ID": "conn",
    "TELNYX_PUBLIC_KEY": "cHVibGlj",
    "PLIVO_AUTH_ID": "MA123",
    "PLIVO_AUTH_TOKEN": "token",
}


async def test_each_provider_with_every_credential_gets_its_call_control() -> None:
    controls = controls_from_env(
        ["twilio", "telnyx", "plivo"], FULL, public_url="https://example.test/"
    )
    try:
        assert isinstance(controls["twilio"], TwilioCalls)
        assert isinstance(controls["telnyx"], TelnyxCalls)
        assert isinstance(controls["plivo"], PlivoCalls)
    finally:
        for control in controls.values():
            await control.aclose()


async def test_a_provider_missing_a_credential_gets_none_and_it_is_named() -> None:
    env = {k: v for k, v in FULL.items() if k != "TELNYX_CONNECTION_ID"}
    controls = controls_from_env(["twilio", "telnyx"], env, public_url="http://127.0.0.1:1")
    try:
        assert sorted(controls) == ["twilio"]
        assert missing_credentials("telnyx", env) == ["TELNYX_CONNECTION_ID"]
        assert missing_credentials("plivo", {}) == ["PLIVO_AUTH_ID", "PLIVO_AUTH_TOKEN"]
    finally:
        for control in controls.values():
            await control.aclose()


def test_webhook_secrets_are_read_each_on_its_own() -> None:
    secrets = secrets_from_env({"PLIVO_AUTH_TOKEN": "p", "TWILIO_AUTH_TOKEN": ""})
    assert secrets.secret("plivo") == "p"
    assert secrets.secret("twilio") is None  # empty is unset
    assert secrets.secret("telnyx") is None
    assert "p" not in repr(secrets)


@pytest.mark.parametrize("credentials", [FULL, {}])
async def test_serve_hands_the_call_controls_to_the_phone_service(
    credentials: dict[str, str],
) -> None:
    async def entrypoint(conn: object) -> None:
        return None

    options = ServerOptions(path="agent.py", telephony=("twilio",), call_credentials=credentials)
    app: web.Application = create_app(entrypoint, telephony=["twilio"], page=False, webrtc=False)
    controls = _call_controls(app, options, port=8123)
    try:
        service = app[TELEPHONY]
        if credentials:
            assert [c.provider for c in controls] == ["twilio"]
            assert service.controls["twilio"] is controls[0]
        else:
            assert controls == [] and service.controls == {}
        assert "secret" not in repr(options)
    finally:
        for control in controls:
            await control.aclose()
