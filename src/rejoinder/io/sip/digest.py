"""Digest authentication of incoming requests (RFC 2617, RFC 7616, RFC 8760 for SIP).

``DigestAuthority(username=..., password=..., realm=...)`` answers an unauthenticated
INVITE with ``challenge(now)`` (one ``WWW-Authenticate`` value per algorithm, SHA-256
first, as RFC 8760 asks, then MD5 for the many trunks and phones that know nothing else)
and judges the retried request with ``verify(method, authorization, now)``.

Nonces carry their own issue time, signed with a per-process secret (HMAC-SHA-256), so
no state is kept for the challenges sent; a nonce older than ``nonce_ttl`` is answered
``stale`` (the caller retries at once with a fresh one, without asking its user). State
is kept only for nonces that were used: with ``qop=auth`` each use must bring a higher
nonce count (``nc``) than the last, without qop a nonce is good once. A replay is
refused, as are a wrong password, another realm or user, and an unknown algorithm.

References: RFC 7616 https://www.rfc-editor.org/rfc/rfc7616 (§3.4 the response, §3.3
stale), RFC 2617 https://www.rfc-editor.org/rfc/rfc2617, RFC 8760
https://www.rfc-editor.org/rfc/rfc8760 (SHA-256 in SIP), RFC 3261 §22.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

__all__ = ["DigestAuthority", "Verdict", "parse_digest"]

Verdict = Literal["ok", "stale", "invalid", "replay"]
_HASHES = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}
MAX_TRACKED_NONCES = 10_000


def parse_digest(value: str) -> dict[str, str]:
    """The parameters of a ``Digest k=v, k="v"`` header (names lower-cased); {} when it
    is not a Digest credential."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        return {}
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " ,\t":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        name = rest[i:eq].strip().lower()
        i = eq + 1
        if i < n and rest[i] == '"':
            end = i + 1
            chars: list[str] = []
            while end < n and rest[end] != '"':
                if rest[end] == "\\" and end + 1 < n:
                    end += 1
                chars.append(rest[end])
                end += 1
            params[name] = "".join(chars)
            i = end + 1
        else:
            end = rest.find(",", i)
            end = n if end < 0 else end
            params[name] = rest[i:end].strip()
            i = end
    return params


@dataclass
class DigestAuthority:
    """Checks digest credentials for one username and password (see the module)."""

    username: str
    password: str
    realm: str = "rejoinder"
    nonce_ttl: float = 300.0
    algorithms: tuple[str, ...] = ("SHA-256", "MD5")

    def __post_init__(self) -> None:
        if not self.username or not self.password:
            raise ValueError("digest auth needs a username and a password")
        if '"' in self.realm or not self.realm:
            raise ValueError("the digest realm must be non-empty, without quotes")
        unknown = [a for a in self.algorithms if a not in _HASHES]
        if unknown or not self.algorithms:
            raise ValueError(f"digest algorithms must be among {list(_HASHES)}")
        if self.nonce_ttl <= 0:
            raise ValueError("nonce_ttl must be positive")
        self._secret = secrets.token_bytes(32)
        self._used: OrderedDict[str, int] = OrderedDict()
        """nonce -> the highest nonce count accepted (0: used without qop)."""

    # ------------------------------------------------------------ challenge

    def new_nonce(self, now: float) -> str:
        stamp = struct.pack(">d", now) + secrets.token_bytes(8)
        mac = hmac.new(self._secret, stamp, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(stamp + mac).decode("ascii").rstrip("=")

    def challenge(self, now: float, *, stale: bool = False) -> list[str]:
        """``WWW-Authenticate`` values for a 401, one per algorithm, a fresh nonce."""
        nonce = self.new_nonce(now)
        suffix = ", stale=true" if stale else ""
        return [
            f'Digest realm="{self.realm}", nonce="{nonce}", algorithm={algorithm}, '
            f'qop="auth"{suffix}'
            for algorithm in self.algorithms
        ]

    def _nonce_time(self, nonce: str) -> float | None:
        try:
            raw = base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4))
        except (ValueError, TypeError):
            return None
        if len(raw) != 32:
            return None
        stamp, mac = raw[:16], raw[16:]
        expected = hmac.new(self._secret, stamp, hashlib.sha256).digest()[:16]
        if not hmac.compare_digest(mac, expected):
            return None
        issued: float = struct.unpack(">d", stamp[:8])[0]
        return issued

    # -------------------------------------------------------------- verify

    def verify(self, method: str, authorization: str | None, now: float) -> Verdict:
        """Judge the ``Authorization`` header of a ``method`` request."""
        params = parse_digest(authorization or "")
        if not params:
            return "invalid"
        algorithm = params.get("algorithm", "MD5").upper()
        algorithm = "SHA-256" if algorithm == "SHA256" else algorithm
        if algorithm not in self.algorithms:
            return "invalid"
        nonce = params.get("nonce", "")
        issued = self._nonce_time(nonce)
        if issued is None or issued > now + 1.0:
            return "invalid"
        if params.get("username") != self.username or params.get("realm") != self.realm:
            return "invalid"
        if not hmac.compare_digest(
            params.get("response", "").lower(), self._expected(method, algorithm, params)
        ):
            return "invalid"
        if now - issued > self.nonce_ttl:
            return "stale"  # the password was right: the caller may retry at once
        return self._count_use(nonce, params, now)

    def _expected(self, method: str, algorithm: str, params: dict[str, str]) -> str:
        def h(text: str) -> str:
            return _HASHES[algorithm](text.encode("utf-8")).hexdigest()

        ha1 = h(f"{self.username}:{self.realm}:{self.password}")
        ha2 = h(f"{method}:{params.get('uri', '')}")
        nonce, qop = params.get("nonce", ""), params.get("qop", "")
        if qop:
            nc, cnonce = params.get("nc", ""), params.get("cnonce", "")
            return h(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")
        return h(f"{ha1}:{nonce}:{ha2}")

    def _count_use(self, nonce: str, params: dict[str, str], now: float) -> Verdict:
        if params.get("qop"):
            if params.get("qop") != "auth":
                return "invalid"
            try:
                count = int(params.get("nc", ""), 16)
            except ValueError:
                return "invalid"
        else:
            count = 0
        last = self._used.get(nonce)
        if last is not None and count <= last:
            return "replay"
        self._used[nonce] = count
        self._used.move_to_end(nonce)
        while len(self._used) > MAX_TRACKED_NONCES:
            self._used.popitem(last=False)  # the oldest: expired long before a flood ends
        return "ok"
