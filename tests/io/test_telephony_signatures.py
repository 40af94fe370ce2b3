"""Telnyx and Plivo webhook signatures, and replays, without a server.

Every signature here is made the way the provider documents it, written out in the test
(Ed25519 over ``timestamp|body`` for Telnyx; for Plivo V3 the signed string spelled out by
hand from Plivo's recipe and HMAC-SHA256'd here), never by calling the code under test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from rejoinder.io.telephony.signatures import (
    PLIVO_NONCE_HEADER,
    PLIVO_SIGNATURE_HEADER,
    TELNYX_SIGNATURE_HEADER,
    TELNYX_TIMESTAMP_HEADER,
    ReplayGuard,
    Verdict,
    plivo_v3_signature,
    verify_plivo_signature,
    verify_telnyx_signature,
    verify_webhook,
)

NOW = 1_765_000_000.0
BODY = b'{"data":{"event_type":"call.initiated","payload":{"call_control_id":"v3:abc"}}}'


# --- Telnyx ----------------------------------------------------------------------------


def _telnyx_keys() -> tuple[Ed25519PrivateKey, str]:
    private = Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private, base64.b64encode(raw).decode()  # as the portal shows it


def _telnyx_sign(private: Ed25519PrivateKey, timestamp: str, body: bytes) -> str:
    # The documented recipe: Ed25519 over "{telnyx-timestamp}|{raw body}", base64.
    return base64.b64encode(private.sign(timestamp.encode() + b"|" + body)).decode()


TELNYX_PRIVATE, TELNYX_PUBLIC = _telnyx_keys()
TS = str(int(NOW))
TELNYX_SIGNATURE = _telnyx_sign(TELNYX_PRIVATE, TS, BODY)


def test_telnyx_accepts_a_documented_signature() -> None:
    verdict = verify_telnyx_signature(TELNYX_PUBLIC, BODY, TELNYX_SIGNATURE, TS, NOW)
    assert verdict == Verdict(True, "")
    assert verdict
    # the key as raw bytes, and the body as text, are the same request
    assert verify_telnyx_signature(base64.b64decode(TELNYX_PUBLIC), BODY, TELNYX_SIGNATURE, TS, NOW)
    assert verify_telnyx_signature(TELNYX_PUBLIC, BODY.decode(), TELNYX_SIGNATURE, TS, NOW)


def test_telnyx_refuses_tampering_and_the_wrong_key() -> None:
    other_public = _telnyx_keys()[1]
    cases = {
        "body": (TELNYX_PUBLIC, BODY.replace(b"abc", b"abd"), TELNYX_SIGNATURE, TS),
        "timestamp": (TELNYX_PUBLIC, BODY, TELNYX_SIGNATURE, str(int(NOW) - 1)),
        "key": (other_public, BODY, TELNYX_SIGNATURE, TS),
        "signature": (TELNYX_PUBLIC, BODY, _telnyx_sign(TELNYX_PRIVATE, TS, b"{}"), TS),
    }
    for what, (key, body, signature, timestamp) in cases.items():
        verdict = verify_telnyx_signature(key, body, signature, timestamp, NOW)
        assert not verdict, what
        assert verdict.reason == "bad signature", what


def test_telnyx_refuses_stale_and_future_timestamps_at_the_tolerance() -> None:
    def at(signed_at: int, tolerance: float = 300.0) -> Verdict:
        stamp = str(signed_at)
        signature = _telnyx_sign(TELNYX_PRIVATE, stamp, BODY)
        return verify_telnyx_signature(
            TELNYX_PUBLIC, BODY, signature, stamp, NOW, tolerance=tolerance
        )

    now = int(NOW)
    assert at(now - 300) and at(now + 300)  # the edges are inside
    assert at(now - 301).reason == "stale timestamp"
    assert at(now + 301).reason == "timestamp in the future"
    assert at(now - 86_400).reason == "stale timestamp"
    assert at(now - 10, tolerance=5).reason == "stale timestamp"
    assert at(now, tolerance=0)


def test_telnyx_missing_or_malformed_headers_are_refused_not_raised() -> None:
    def reason(signature: str | None, timestamp: str | None) -> str:
        verdict = verify_telnyx_signature(TELNYX_PUBLIC, BODY, signature, timestamp, NOW)
        assert not verdict
        return verdict.reason

    assert reason(None, TS) == "missing signature"
    assert reason("", TS) == "missing signature"
    assert reason(TELNYX_SIGNATURE, None) == "missing timestamp"
    for stamp in ("12.5", "-1", " 17", "1e9", "١٢٣", "9" * 40):
        assert reason(TELNYX_SIGNATURE, stamp) == "malformed timestamp", stamp
    short = base64.b64encode(base64.b64decode(TELNYX_SIGNATURE)[:63]).decode()
    for signature in ("not base64!", short, "é" * 88, TELNYX_SIGNATURE + "AAAA"):
        assert reason(signature, TS) == "malformed signature", signature


def test_telnyx_misconfiguration_raises() -> None:
    with pytest.raises(ValueError, match="not base64"):
        verify_telnyx_signature("not a key!", BODY, TELNYX_SIGNATURE, TS, NOW)
    with pytest.raises(ValueError, match="32 bytes"):
        verify_telnyx_signature(base64.b64encode(b"x" * 31).decode(), BODY, None, TS, NOW)
    with pytest.raises(ValueError, match="tolerance"):
        verify_telnyx_signature(TELNYX_PUBLIC, BODY, TELNYX_SIGNATURE, TS, NOW, tolerance=-1)
    for bad_now in (float("nan"), float("inf")):  # NaN compares false: it would let all through
        with pytest.raises(ValueError, match="finite"):
            verify_telnyx_signature(TELNYX_PUBLIC, BODY, TELNYX_SIGNATURE, TS, bad_now)
        with pytest.raises(ValueError, match="finite"):
            ReplayGuard().admit("k", bad_now)


def test_telnyx_without_cryptography_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import raise ImportError, as if it were not installed.
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.asymmetric.ed25519", None)
    with pytest.raises(RuntimeError, match=r"pip install 'rejoinder\[telephony\]'"):
        verify_telnyx_signature(TELNYX_PUBLIC, BODY, TELNYX_SIGNATURE, TS, NOW)


@given(st.data())
def test_telnyx_any_one_byte_changed_fails(data: st.DataObject) -> None:
    """Whichever byte of the body, the timestamp or the signature changes, and however."""
    body = data.draw(st.binary(min_size=1, max_size=64), label="body")
    signature = _telnyx_sign(TELNYX_PRIVATE, TS, body)
    assert verify_telnyx_signature(TELNYX_PUBLIC, body, signature, TS, NOW)
    part = data.draw(st.sampled_from(["body", "timestamp", "signature"]), label="part")
    original = {"body": body, "timestamp": TS.encode(), "signature": base64.b64decode(signature)}
    target = bytearray(original[part])
    at = data.draw(st.integers(0, len(target) - 1), label="at")
    target[at] ^= data.draw(st.integers(1, 255), label="xor")
    fields = {"body": body, "timestamp": TS, "signature": signature}
    if part == "body":
        fields["body"] = bytes(target)
    elif part == "timestamp":
        fields["timestamp"] = target.decode("latin-1")
    else:
        fields["signature"] = base64.b64encode(bytes(target)).decode()
    verdict = verify_telnyx_signature(
        TELNYX_PUBLIC, fields["body"], fields["signature"], fields["timestamp"], NOW, tolerance=1e12
    )
    assert not verdict
    assert verdict.reason in ("bad signature", "malformed timestamp")


# --- Plivo V3 --------------------------------------------------------------------------

TOKEN = "MAZDQ1ZJNWZDRKZKNTAXMTA2MTA5"
NONCE = "05429567804466091622"


def _plivo_hmac(signed: str, token: str = TOKEN) -> str:
    return base64.b64encode(
        hmac.new(token.encode(), signed.encode(), hashlib.sha256).digest()
    ).decode()


# Signed strings spelled out by hand from the recipe: the URL without its query; "?" and the
# query decoded, sorted, name=value joined by "&"; for a POST with parameters "?" always,
# "." after a query, then name+value sorted by name (and value); then "." and the nonce.
PLIVO_CASES = [
    (
        "POST",
        "https://example.com/answer?foo=bar",
        {"To": "+14155550100", "CallUUID": "abc-123", "From": "+14155550199"},
        "https://example.com/answer?foo=bar.CallUUIDabc-123From+14155550199To+14155550100",
    ),
    (
        "POST",
        "https://example.com/answer",
        {"Digits": ["2", "1"], "CallUUID": "abc"},
        "https://example.com/answer?CallUUIDabcDigits1Digits2",
    ),
    ("POST", "https://example.com/answer", {}, "https://example.com/answer"),
    ("POST", "https://example.com/answer?b=2&a=1", {}, "https://example.com/answer?a=1&b=2"),
    (
        "GET",
        "https://example.com:8443/hangup?b=2&a=1&a=0&x=a%20b&e=",
        None,
        "https://example.com:8443/hangup?a=0&a=1&b=2&e=&x=a b",
    ),
    ("GET", "http://example.com/answer", None, "http://example.com/answer"),
    # Unix-style, case-sensitive sorting: upper case before lower case
    (
        "POST",
        "https://example.com/a",
        {"b": "1", "B": "2", "a": "3"},
        "https://example.com/a?B2a3b1",
    ),
]


@pytest.mark.parametrize(("method", "url", "params", "signed"), PLIVO_CASES)
def test_plivo_v3_follows_the_documented_recipe(
    method: str, url: str, params: dict[str, str | list[str]] | None, signed: str
) -> None:
    expected = _plivo_hmac(f"{signed}.{NONCE}")
    assert plivo_v3_signature(TOKEN, method, url, params, NONCE) == expected
    assert verify_plivo_signature(TOKEN, method.lower(), url, params, expected, NONCE)


def test_plivo_accepts_any_of_several_signatures_and_refuses_when_none_match() -> None:
    method, url, params, signed = PLIVO_CASES[0]
    right = _plivo_hmac(f"{signed}.{NONCE}")
    old_token = _plivo_hmac(f"{signed}.{NONCE}", token="an-older-token")
    assert verify_plivo_signature(TOKEN, method, url, params, f"{old_token},{right}", NONCE)
    assert verify_plivo_signature(TOKEN, method, url, params, f"{right}, {old_token}", NONCE)
    verdict = verify_plivo_signature(TOKEN, method, url, params, f"{old_token},{old_token}", NONCE)
    assert verdict.reason == "bad signature"


def test_plivo_refuses_tampered_url_params_and_nonce() -> None:
    method, url, params, signed = PLIVO_CASES[0]
    signature = _plivo_hmac(f"{signed}.{NONCE}")
    tampered = {
        "url": (url.replace("foo=bar", "foo=baz"), params, NONCE),
        "host": (url.replace("example.com", "example.org"), params, NONCE),
        "scheme": (url.replace("https", "http"), params, NONCE),
        "param": (url, {**params, "To": "+14155550101"}, NONCE),
        "extra param": (url, {**params, "Digits": "1"}, NONCE),
        "nonce": (url, params, NONCE[:-1] + "3"),
    }
    for what, (t_url, t_params, t_nonce) in tampered.items():
        verdict = verify_plivo_signature(TOKEN, method, t_url, t_params, signature, t_nonce)
        assert verdict.reason == "bad signature", what
    # the same request as a GET is another request
    assert not verify_plivo_signature(TOKEN, "GET", url, params, signature, NONCE)
    assert verify_plivo_signature(TOKEN, method, url, params, None, NONCE).reason == (
        "missing signature"
    )
    assert verify_plivo_signature(TOKEN, method, url, params, signature, "").reason == (
        "missing nonce"
    )


def test_plivo_misconfiguration_raises() -> None:
    with pytest.raises(ValueError, match="GET and POST"):
        plivo_v3_signature(TOKEN, "PUT", "https://example.com/", {}, NONCE)
    with pytest.raises(ValueError, match="http"):
        verify_plivo_signature(TOKEN, "POST", "/answer", {}, "x", NONCE)


@given(
    value=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1),
    at=st.integers(0, 1000),
    replacement=st.characters(codec="utf-8", exclude_categories=["Cs"]),
    where=st.sampled_from(["path", "value", "nonce"]),
)
def test_plivo_any_one_character_changed_fails(
    value: str, at: int, replacement: str, where: str
) -> None:
    """A POST signed per the recipe, then one character of the path, a parameter's value
    or the nonce changed to any other character: refused."""
    fields = {"path": "/answer", "value": value, "nonce": NONCE}
    signature = _plivo_hmac(f"https://example.com/answer?CallUUIDabcDigits{value}.{NONCE}")

    def verdict(fields: dict[str, str]) -> Verdict:
        url = "https://example.com" + fields["path"]
        params = {"Digits": fields["value"], "CallUUID": "abc"}
        return verify_plivo_signature(TOKEN, "POST", url, params, signature, fields["nonce"])

    assert verdict(fields)
    original = fields[where]
    i = at % len(original)
    if original[i] == replacement:
        replacement = "Z" if replacement != "Z" else "Y"
    fields[where] = original[:i] + replacement + original[i + 1 :]
    assert not verdict(fields)


# --- Replays ---------------------------------------------------------------------------


def test_replay_guard_admits_once_per_window() -> None:
    guard = ReplayGuard(window=300)
    assert guard.admit("nonce-1", NOW)
    assert not guard.admit("nonce-1", NOW + 1)
    assert not guard.admit(b"nonce-1", NOW + 299.9)  # bytes and text are the same key
    assert guard.admit("nonce-2", NOW + 2)
    assert guard.admit("nonce-1", NOW + 300)  # its window is over
    assert not guard.admit("nonce-1", NOW + 301)  # and the new admission has one of its own


def test_replay_guard_memory_is_bounded_and_expired_keys_leave() -> None:
    guard = ReplayGuard(window=10, max_entries=3)
    for i in range(10):
        assert guard.admit(f"k{i}", NOW)
        assert len(guard) <= 3
    assert guard.admit("k0", NOW)  # pushed out by newer keys: the price of a bound
    assert not guard.admit("k9", NOW)
    assert guard.admit("late", NOW + 10)
    assert len(guard) == 1  # everything admitted at NOW expired
    with pytest.raises(ValueError, match="window"):
        ReplayGuard(window=0)
    with pytest.raises(ValueError, match="max_entries"):
        ReplayGuard(max_entries=0)


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.floats(0, 4, allow_nan=False)),
        max_size=40,
    )
)
def test_replay_guard_matches_a_plain_model(steps: list[tuple[str, float]]) -> None:
    """With room to spare, the guard says exactly what a dict of admission times says."""
    guard = ReplayGuard(window=5)
    admitted_at: dict[str, float] = {}
    now = NOW
    for key, step in steps:
        now += step
        fresh = key not in admitted_at or now >= admitted_at[key] + 5
        if fresh:
            admitted_at[key] = now
        assert guard.admit(key, now) == fresh


# --- One entry -------------------------------------------------------------------------


def test_verify_webhook_telnyx_with_a_guard_refuses_the_replay() -> None:
    guard = ReplayGuard()

    def check(signature: str, now: float) -> Verdict:
        headers = {"Telnyx-Signature-Ed25519": signature, "Telnyx-Timestamp": TS}
        return verify_webhook(
            "telnyx", secret=TELNYX_PUBLIC, headers=headers, raw_body=BODY, now=now, guard=guard
        )

    assert check(TELNYX_SIGNATURE, NOW)
    assert check(TELNYX_SIGNATURE, NOW + 5).reason == "replayed"
    # Another base64 spelling of the same 64 bytes (the last character's unused low bits
    # set) still verifies, and is still the same signature: a replay.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = TELNYX_SIGNATURE[-3]
    respelled = TELNYX_SIGNATURE[:-3] + alphabet[alphabet.index(last) ^ 1] + "=="
    assert respelled != TELNYX_SIGNATURE
    assert base64.b64decode(respelled) == base64.b64decode(TELNYX_SIGNATURE)
    assert check(respelled, NOW + 6).reason == "replayed"
    assert check(TELNYX_SIGNATURE, NOW + 400).reason == "stale timestamp"
    assert TELNYX_SIGNATURE_HEADER == "telnyx-signature-ed25519"
    assert TELNYX_TIMESTAMP_HEADER == "telnyx-timestamp"


def test_verify_webhook_plivo_keys_replays_on_the_nonce_and_forgeries_use_no_room() -> None:
    method, url, params, signed = PLIVO_CASES[0]
    guard = ReplayGuard(window=3600)
    real = {PLIVO_SIGNATURE_HEADER: _plivo_hmac(f"{signed}.{NONCE}"), PLIVO_NONCE_HEADER: NONCE}
    forged = {**real, PLIVO_SIGNATURE_HEADER: _plivo_hmac("forged")}

    def check(headers: dict[str, str], now: float) -> Verdict:
        return verify_webhook(
            "plivo",
            secret=TOKEN,
            headers=headers,
            url=url,
            method=method,
            params=params,
            now=now,
            guard=guard,
        )

    assert check(forged, NOW).reason == "bad signature"
    assert len(guard) == 0  # a forgery carrying the real nonce cannot lock the real one out
    assert check(real, NOW + 1)
    assert check(real, NOW + 2).reason == "replayed"
    lowered = {name.lower(): value for name, value in real.items()}
    assert check(lowered, NOW + 3).reason == "replayed"  # headers in any case


def test_verify_webhook_twilio_uses_the_existing_check() -> None:
    # Twilio's worked example (https://www.twilio.com/docs/usage/security), as in
    # tests/io/test_twilio_webhook.py.
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+12349013030",
        "Digits": "1234",
        "From": "+12349013030",
        "To": "+18005551212",
    }
    guard = ReplayGuard()
    headers = {"X-Twilio-Signature": "0/KCTR6DLpKmkAf8muzZqo1nDgQ="}
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"

    def check(headers: dict[str, str]) -> Verdict:
        return verify_webhook(
            "twilio", secret="12345", headers=headers, url=url, params=params, now=NOW, guard=guard
        )

    assert check(headers)
    assert check(headers).reason == "replayed"
    assert check({"X-Twilio-Signature": "0/KCTR6DLpKmkAf8muzZqo1nDgQ"}).reason == "bad signature"
    assert check({}).reason == "missing signature"
    with pytest.raises(ValueError, match="unknown provider"):
        verify_webhook("vonage", secret="x", headers={}, now=NOW)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auth token"):
        verify_webhook("plivo", secret=b"bytes", headers={}, url=url, now=NOW)
