"""Digest authentication (``rejoinder.io.sip.digest``) against the RFC 7616 formulas
computed here independently: SHA-256 and MD5, with and without qop, stale nonces,
replays, forged nonces and wrong credentials."""

from __future__ import annotations

import hashlib

import pytest

from rejoinder.io.sip.digest import DigestAuthority, parse_digest


def credentials(
    challenge: str,
    *,
    password: str = "s3cret",
    username: str = "trunk",
    nc: str = "00000001",
    qop: bool = True,
    method: str = "INVITE",
    uri: str = "sip:+15559998888@127.0.0.1",
) -> str:
    params = parse_digest(challenge)
    algorithm = params["algorithm"]
    h = (
        (lambda s: hashlib.sha256(s.encode()).hexdigest())
        if algorithm == "SHA-256"
        else (lambda s: hashlib.md5(s.encode()).hexdigest())
    )
    ha1 = h(f"{username}:{params['realm']}:{password}")
    ha2 = h(f"{method}:{uri}")
    nonce = params["nonce"]
    if qop:
        response = h(f"{ha1}:{nonce}:{nc}:abc:auth:{ha2}")
        extra = f', qop=auth, nc={nc}, cnonce="abc"'
    else:
        response = h(f"{ha1}:{nonce}:{ha2}")
        extra = ""
    return (
        f'Digest username="{username}", realm="{params["realm"]}", nonce="{nonce}", '
        f'uri="{uri}", response="{response}", algorithm={algorithm}{extra}'
    )


def test_the_challenge_offers_sha256_first_then_md5() -> None:
    authority = DigestAuthority(username="trunk", password="s3cret", realm="calls")
    first, second = authority.challenge(0.0)
    assert parse_digest(first)["algorithm"] == "SHA-256"
    assert parse_digest(second)["algorithm"] == "MD5"
    assert parse_digest(first)["qop"] == "auth" and parse_digest(first)["realm"] == "calls"
    assert "stale" not in first and "stale=true" in authority.challenge(0.0, stale=True)[0]


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("qop", [True, False])
def test_right_credentials_pass_once_and_a_replay_is_refused(which: int, qop: bool) -> None:
    authority = DigestAuthority(username="trunk", password="s3cret")
    challenge = authority.challenge(10.0)[which]
    header = credentials(challenge, qop=qop)
    assert authority.verify("INVITE", header, 11.0) == "ok"
    assert authority.verify("INVITE", header, 12.0) == "replay"
    if qop:  # the next nonce count is a new use
        assert authority.verify("INVITE", credentials(challenge, nc="00000002"), 12.0) == "ok"


def test_wrong_password_user_method_and_forged_nonces_are_invalid() -> None:
    authority = DigestAuthority(username="trunk", password="s3cret")
    challenge = authority.challenge(0.0)[0]
    assert authority.verify("INVITE", credentials(challenge, password="guess"), 1.0) == "invalid"
    assert authority.verify("INVITE", credentials(challenge, username="eve"), 1.0) == "invalid"
    assert authority.verify("BYE", credentials(challenge), 1.0) == "invalid"
    other = DigestAuthority(username="trunk", password="s3cret").challenge(0.0)[0]
    assert authority.verify("INVITE", credentials(other), 1.0) == "invalid"  # not our nonce
    assert authority.verify("INVITE", None, 1.0) == "invalid"
    assert authority.verify("INVITE", "Basic dHJ1bms6czNjcmV0", 1.0) == "invalid"
    assert authority.verify("INVITE", 'Digest nonce="x", response="y"', 1.0) == "invalid"


def test_an_expired_nonce_with_the_right_password_is_stale() -> None:
    authority = DigestAuthority(username="trunk", password="s3cret", nonce_ttl=30.0)
    challenge = authority.challenge(0.0)[1]
    assert authority.verify("INVITE", credentials(challenge), 31.0) == "stale"
    fresh = authority.challenge(31.0)[1]
    assert authority.verify("INVITE", credentials(fresh), 32.0) == "ok"


def test_an_algorithm_not_offered_is_refused() -> None:
    authority = DigestAuthority(username="trunk", password="s3cret", algorithms=("SHA-256",))
    challenge = authority.challenge(0.0)[0].replace("SHA-256", "MD5")
    assert authority.verify("INVITE", credentials(challenge), 1.0) == "invalid"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="username and a password"):
        DigestAuthority(username="", password="x")
    with pytest.raises(ValueError, match="algorithms"):
        DigestAuthority(username="u", password="p", algorithms=("SHA-1",))
    with pytest.raises(ValueError, match="realm"):
        DigestAuthority(username="u", password="p", realm='a"b')
