"""The phone providers' credentials, read from the environment: one place for
``rejoinder serve --telephony`` and ``rejoinder call``.

- Twilio: ``TWILIO_ACCOUNT_SID`` and ``TWILIO_AUTH_TOKEN`` (the token also signs its
  webhooks);
- Telnyx: ``TELNYX_API_KEY`` and ``TELNYX_CONNECTION_ID`` for call control,
  ``TELNYX_PUBLIC_KEY`` for its webhooks' Ed25519 signatures;
- Plivo: ``PLIVO_AUTH_ID`` and ``PLIVO_AUTH_TOKEN`` (the token also signs its webhooks).

A provider's call control (transfers of calls streamed in, placing calls) exists only
when all of its credentials are set; its webhooks are checked whenever its signing
secret is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .carriers.base import Dialing
from .service import WebhookSecrets

__all__ = [
    "CALL_CONTROL_CREDENTIALS",
    "call_control_from_env",
    "controls_from_env",
    "missing_credentials",
    "secrets_from_env",
]

CALL_CONTROL_CREDENTIALS: Mapping[str, tuple[str, ...]] = {
    "twilio": ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN"),
    "telnyx": ("TELNYX_API_KEY", "TELNYX_CONNECTION_ID", "TELNYX_PUBLIC_KEY"),
    "plivo": ("PLIVO_AUTH_ID", "PLIVO_AUTH_TOKEN"),
}
"""What each provider's call control needs (Telnyx's public key: its status webhooks
are refused unless signed)."""


def missing_credentials(provider: str, env: Mapping[str, str]) -> list[str]:
    """The environment variables ``provider``'s call control needs that are not set."""
    return [name for name in CALL_CONTROL_CREDENTIALS[provider] if not env.get(name)]


def secrets_from_env(env: Mapping[str, str]) -> WebhookSecrets:
    return WebhookSecrets(
        twilio_auth_token=env.get("TWILIO_AUTH_TOKEN") or None,
        telnyx_public_key=env.get("TELNYX_PUBLIC_KEY") or None,
        plivo_auth_token=env.get("PLIVO_AUTH_TOKEN") or None,
    )


def call_control_from_env(
    provider: str, env: Mapping[str, str], *, public_url: str, api_url: str | None = None
) -> Dialing:
    """``provider``'s call control from its credentials (``KeyError`` when one is
    missing: check ``missing_credentials`` first). ``public_url``: where the provider
    reaches this server (Plivo fetches a transfer's instructions from it);
    ``api_url``: the provider's API (default: the real one; tests give a fake's)."""
    from .carriers.plivo import PLIVO_API, PlivoCalls
    from .carriers.telnyx import TELNYX_API, TelnyxCalls
    from .carriers.twilio import TWILIO_API, TwilioCalls

    if provider == "twilio":
        return TwilioCalls(
            env["TWILIO_ACCOUNT_SID"], env["TWILIO_AUTH_TOKEN"], base_url=api_url or TWILIO_API
        )
    if provider == "telnyx":
        return TelnyxCalls(
            env["TELNYX_API_KEY"], env["TELNYX_CONNECTION_ID"], base_url=api_url or TELNYX_API
        )
    if provider == "plivo":
        return PlivoCalls(
            env["PLIVO_AUTH_ID"],
            env["PLIVO_AUTH_TOKEN"],
            transfer_url=public_url.rstrip("/") + "/plivo/transfer",
            base_url=api_url or PLIVO_API,
        )
    raise ValueError(f"unknown telephony provider {provider!r}")


def controls_from_env(
    providers: Iterable[str], env: Mapping[str, str], *, public_url: str
) -> dict[str, Dialing]:
    """The call control of each of ``providers`` whose credentials are all set."""
    return {
        name: call_control_from_env(name, env, public_url=public_url)
        for name in providers
        if not missing_credentials(name, env)
    }
