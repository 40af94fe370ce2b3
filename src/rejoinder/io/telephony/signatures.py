"""Webhook authentication for Telnyx and Plivo (as ``twilio_webhook`` does Twilio's), and replays.

Pure functions and one clock-free class: the time is always passed in as ``now`` (Unix
seconds), nothing here reads a clock or does I/O. A bad or missing signature is not an
exception but a ``Verdict`` that is false and says why, in a few words for the log; only a
misconfiguration (a public key that is not one, an unknown provider) raises.

* ``verify_telnyx_signature``: Telnyx signs each webhook with Ed25519 over
  ``"{telnyx-timestamp}|{raw body}"``; the base64 signature comes in the
  ``telnyx-signature-ed25519`` header and is checked with the account's public key, base64
  as the Mission Control portal shows it
  (https://developers.telnyx.com/docs/development/sdk/python/webhooks; Telnyx's Python
  library, team-telnyx/telnyx-python ``src/telnyx/lib/webhook_verification.py``, refuses a
  timestamp more than 300 s from its clock either way, and so does this by default). The
  body must be the bytes Telnyx sent, not re-serialised JSON. Needs the ``cryptography``
  package, imported on first use.
* ``plivo_v3_signature`` / ``verify_plivo_signature``: ``X-Plivo-Signature-V3`` and
  ``X-Plivo-Signature-V3-Nonce`` (https://docs.plivo.com/docs/voice/concepts/signature-validation/,
  https://docs.plivo.com/docs/voice/xml/request/validation). The prose there leaves the
  separators out; Plivo's own SDKs fix them (plivo/plivo-python
  ``plivo/utils/signature_v3.py``, plivo/plivo-node ``lib/utils/v3Security.js``, which agree):
  the URL without its query, then ``?`` and the query parameters decoded and sorted as
  ``name=value`` joined by ``&``; for a POST with parameters a ``?`` always follows the
  path, then ``.`` if there was a query, then each POST parameter's name and value, sorted
  by name (values of a repeated name sorted too), with no separator; then ``.`` and the
  nonce. HMAC-SHA256 keyed with the auth token, base64. The header may carry several
  signatures separated by commas (one per active auth token); any one may match.
* ``ReplayGuard``: remembers what it has admitted (a Telnyx signature, a Plivo nonce, a
  Twilio signature) for a window of seconds, in bounded memory, and refuses it a second time.
* ``verify_webhook``: one entry for the three providers: pick the headers, check the
  signature, then (if a guard is given) refuse a replay.

Replays: Telnyx's signature covers a timestamp, so a copy older than the tolerance fails on
its own and a ``ReplayGuard`` with the same window closes the rest. Plivo V3 and Twilio sign
no time at all: a guard refuses a copy only while it still remembers the original, so give
it a long window (hours) and enough room. A delivery retried byte for byte (same URL,
parameters and nonce, hence the same signature) is refused as a replay too: answer the
first one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, urlparse

from ... import _extras
from .twilio_webhook import validate_twilio_signature

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "PLIVO_NONCE_HEADER",
    "PLIVO_SIGNATURE_HEADER",
    "TELNYX_SIGNATURE_HEADER",
    "TELNYX_TIMESTAMP_HEADER",
    "TWILIO_SIGNATURE_HEADER",
    "ReplayGuard",
    "Verdict",
    "plivo_v3_signature",
    "verify_plivo_signature",
    "verify_telnyx_signature",
    "verify_webhook",
]

TELNYX_SIGNATURE_HEADER = "telnyx-signature-ed25519"
TELNYX_TIMESTAMP_HEADER = "telnyx-timestamp"
PLIVO_SIGNATURE_HEADER = "X-Plivo-Signature-V3"
PLIVO_NONCE_HEADER = "X-Plivo-Signature-V3-Nonce"
TWILIO_SIGNATURE_HEADER = "X-Twilio-Signature"

TELNYX_TOLERANCE = 300.0
"""Seconds a Telnyx timestamp may be from ``now``, either way (Telnyx's libraries use 300)."""

_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")  # ASCII digits only: int() would take "١٢" or " 12"

Params = Mapping[str, str | Sequence[str]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a webhook is authentic; true or false as a bool, with a reason when false.

    ``reason`` is a few words for the log (``"stale timestamp"``, ``"bad signature"``,
    ``"replayed"``): it never repeats the signature or any other header value.
    """

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


_ACCEPTED = Verdict(True)


def _refused(reason: str) -> Verdict:
    return Verdict(False, reason)


# --- Telnyx ----------------------------------------------------------------------------


def verify_telnyx_signature(
    public_key: str | bytes,
    raw_body: bytes | str,
    signature: str | None,
    timestamp: str | None,
    now: float,
    *,
    tolerance: float = TELNYX_TOLERANCE,
) -> Verdict:
    """Whether ``signature`` is Telnyx's Ed25519 signature of ``timestamp|raw_body``.

    ``public_key`` is the account's key, base64 as the portal shows it (or its 32 raw
    bytes); one that is not a 32-byte Ed25519 key raises ``ValueError``, as does a
    negative ``tolerance``. ``signature`` and ``timestamp`` are the
    ``telnyx-signature-ed25519`` and ``telnyx-timestamp`` headers (None when absent);
    ``raw_body`` the body exactly as received (a ``str`` is taken as its UTF-8 bytes). A
    timestamp more than ``tolerance`` seconds before or after ``now`` is refused.
    """
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be zero or more seconds, not {tolerance!r}")
    _check_now(now)
    key = _telnyx_public_key(public_key)
    from cryptography.exceptions import InvalidSignature  # importable: checked just above

    if not signature:
        return _refused("missing signature")
    if not timestamp:
        return _refused("missing timestamp")
    if not _UNIX_SECONDS.fullmatch(timestamp):
        return _refused("malformed timestamp")
    signed_at = int(timestamp)
    if now - signed_at > tolerance:
        return _refused("stale timestamp")
    if signed_at - now > tolerance:
        return _refused("timestamp in the future")
    raw = _telnyx_signature_bytes(signature)
    if raw is None:
        return _refused("malformed signature")
    body = raw_body.encode() if isinstance(raw_body, str) else bytes(raw_body)
    try:
        key.verify(raw, timestamp.encode("ascii") + b"|" + body)
    except InvalidSignature:
        return _refused("bad signature")
    return _ACCEPTED


def _telnyx_signature_bytes(signature: str) -> bytes | None:
    """The 64 bytes of a base64 Ed25519 signature, or None if it is not one."""
    try:
        raw = base64.b64decode(signature.strip(), validate=True)
    except (binascii.Error, ValueError):  # ValueError: not ASCII
        return None
    return raw if len(raw) == 64 else None


def _telnyx_public_key(public_key: str | bytes) -> Ed25519PublicKey:
    with _extras.needed("telephony", "Telnyx webhook signatures", error=RuntimeError):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    if isinstance(public_key, str):
        try:
            raw = base64.b64decode(public_key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the Telnyx public key is not base64") from None
    else:
        raw = bytes(public_key)
    if len(raw) != 32:
        raise ValueError(f"a Telnyx public key is 32 bytes (base64 of them), not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


# --- Plivo -----------------------------------------------------------------------------


def plivo_v3_signature(
    auth_token: str, method: str, url: str, params: Params | None, nonce: str
) -> str:
    """The ``X-Plivo-Signature-V3`` Plivo sends for this request, signed with ``auth_token``.

    ``url`` is the full URL Plivo requested, query string included; ``method`` is ``GET``
    or ``POST`` (any case, else ``ValueError``). ``params`` are the POST's form parameters
    (a name given several values as a sequence); for a GET they are already in the URL's
    query, and any given here are merged under the query's (as Plivo's Python SDK does).
    """
    verb = method.upper()
    if verb not in ("GET", "POST"):
        raise ValueError(f"Plivo signs GET and POST requests, not {method!r}")
    parts = urlparse(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(f"the URL must be http(s):// with a host, not {url!r}")
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    query = parse_qs(parts.query, keep_blank_values=True)
    given = {name: _values(value) for name, value in (params or {}).items()}
    if verb == "GET":
        query_text = _sorted_query({**given, **query})
        signed = f"{base}?{query_text}" if query_text else base
    else:
        query_text = _sorted_query(query)
        if query_text or given:
            base += "?" + query_text
        if query_text and given:
            base += "."
        signed = base + "".join(
            name + value for name in sorted(given) for value in sorted(given[name])
        )
    mac = hmac.new(auth_token.encode(), f"{signed}.{nonce}".encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode("ascii")


def verify_plivo_signature(
    auth_token: str,
    method: str,
    url: str,
    params: Params | None,
    signature: str | None,
    nonce: str | None,
) -> Verdict:
    """Whether ``signature`` (the ``X-Plivo-Signature-V3`` header, possibly several
    comma-separated signatures) holds Plivo's V3 signature for this request and ``nonce``
    (the ``X-Plivo-Signature-V3-Nonce`` header). Constant-time comparisons, every candidate
    compared. Arguments as ``plivo_v3_signature``'s; a bad ``method``, or a URL without a
    scheme and host, raises (a mistake in the caller); a URL that does not parse is
    refused (it comes from the request: its ``Host`` header is whatever the sender wrote).
    """
    try:
        urlparse(url)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL": a bracket in the Host header
        return _refused(f"malformed URL: {exc}")
    expected = plivo_v3_signature(auth_token, method, url, params, nonce or "").encode()
    if not signature:
        return _refused("missing signature")
    if not nonce:
        return _refused("missing nonce")
    matched = False
    for candidate in signature.split(","):
        matched |= hmac.compare_digest(expected, candidate.strip().encode())
    return _ACCEPTED if matched else _refused("bad signature")


def _values(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _sorted_query(params: Mapping[str, list[str]]) -> str:
    return "&".join(f"{name}={value}" for name in sorted(params) for value in sorted(params[name]))


# --- Replays ---------------------------------------------------------------------------


class ReplayGuard:
    """Admits each key (a signature, a nonce) once per ``window`` seconds, in bounded memory.

    ``admit(key, now)`` is true the first time and false while ``key`` is remembered: for
    ``window`` seconds after its admission, unless ``max_entries`` newer keys have pushed it
    out first (the oldest goes first). Check the signature before calling ``admit``, so only
    authentic requests take room. Keys are kept as SHA-256 digests, 32 bytes whatever their
    length. ``now`` is passed in (Unix seconds, never decreasing); nothing here reads a clock.
    """

    def __init__(self, window: float = TELNYX_TOLERANCE, max_entries: int = 100_000) -> None:
        if not window > 0:
            raise ValueError(f"window must be positive, not {window!r}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries!r}")
        self.window = window
        self.max_entries = max_entries
        self._expiries: OrderedDict[bytes, float] = OrderedDict()  # digest: expiry, by age

    def __len__(self) -> int:
        return len(self._expiries)

    def admit(self, key: str | bytes, now: float) -> bool:
        """True if ``key`` is new (it is remembered from now on), false for a replay."""
        _check_now(now)
        self._drop_expired(now)
        digest = hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()
        expires = self._expiries.get(digest)
        if expires is not None and now < expires:
            return False
        self._expiries.pop(digest, None)
        self._expiries[digest] = now + self.window
        while len(self._expiries) > self.max_entries:
            self._expiries.popitem(last=False)
        return True

    def _drop_expired(self, now: float) -> None:
        # Entries sit in admission order and share one window, so the expired ones lead.
        while self._expiries:
            digest, expires = next(iter(self._expiries.items()))
            if now < expires:
                return
            del self._expiries[digest]


# --- One entry for the three providers -------------------------------------------------


def verify_webhook(
    provider: Literal["twilio", "telnyx", "plivo"],
    *,
    secret: str | bytes,
    headers: Mapping[str, str],
    url: str = "",
    method: str = "POST",
    params: Params | None = None,
    raw_body: bytes | str = b"",
    now: float,
    guard: ReplayGuard | None = None,
    tolerance: float = TELNYX_TOLERANCE,
) -> Verdict:
    """Whether this webhook came from ``provider`` and (given a ``guard``) is no replay.

    ``secret`` is Twilio's or Plivo's auth token, or Telnyx's public key. ``headers`` are
    the request's (any case). Twilio and Plivo sign ``url`` (as they requested it: see
    ``twilio_webhook.webhook_url_for`` behind a proxy) and the form ``params``; Telnyx signs
    ``raw_body`` and its timestamp, checked against ``now`` with ``tolerance``. The replay
    key is the Telnyx signature, the Plivo nonce or the Twilio signature; the guard is
    consulted only once the signature holds. An unknown ``provider`` raises ``ValueError``.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    if provider == "telnyx":
        signature = lowered.get(TELNYX_SIGNATURE_HEADER)
        verdict = verify_telnyx_signature(
            secret,
            raw_body,
            signature,
            lowered.get(TELNYX_TIMESTAMP_HEADER),
            now,
            tolerance=tolerance,
        )
        # Keyed on the signature's bytes, so another base64 spelling of it is the same key.
        replay_key = b"telnyx:" + (_telnyx_signature_bytes(signature or "") or b"")
    elif provider == "plivo":
        token = _text_secret(secret, provider)
        nonce = lowered.get(PLIVO_NONCE_HEADER.lower())
        verdict = verify_plivo_signature(
            token, method, url, params, lowered.get(PLIVO_SIGNATURE_HEADER.lower()), nonce
        )
        replay_key = b"plivo:" + (nonce or "").encode()
    elif provider == "twilio":
        token = _text_secret(secret, provider)
        signature = lowered.get(TWILIO_SIGNATURE_HEADER.lower()) or ""
        matched = validate_twilio_signature(token, url, params or {}, signature)
        verdict = (
            _ACCEPTED
            if matched
            else _refused("bad signature" if signature else "missing signature")
        )
        replay_key = b"twilio:" + signature.encode()
    else:
        raise ValueError(f"unknown provider {provider!r}: twilio, telnyx or plivo")
    if verdict and guard is not None and not guard.admit(replay_key, now):
        return _refused("replayed")
    return verdict


def _check_now(now: float) -> None:
    # A NaN would compare false both ways and let every timestamp and replay through.
    if not math.isfinite(now):
        raise ValueError(f"now must be a finite time in seconds, not {now!r}")


def _text_secret(secret: str | bytes, provider: str) -> str:
    if not isinstance(secret, str):
        raise ValueError(f"the {provider} secret is the auth token, a str")
    return secret
