"""ICE servers for WebRTC beyond localhost: STUN and TURN URLs, TURN credentials, and the
command-line arguments and environment variables that set them.

A browser behind a NAT or a firewall reaches the server's WebRTC peer only with the help
of ICE servers: STUN tells each side its public address, TURN relays the media when no
direct path works (a symmetric NAT, a network that allows only TCP or TLS on 443). The
browser must know them *before* it creates its ``RTCPeerConnection``: the SDK fetches
them from ``GET /api/ice`` before each offer (``signalling``), and the data channel's
``ready`` carries them too (``ready_with_ice``). See docs/webrtc.md.

TURN needs credentials, and whatever the page gets, anyone who opens the page can read.
Two ways to give them:

- static (``--turn-user``/``--turn-password``): the same username and password for
  everyone, for as long as the TURN server keeps them;
- a TURN REST shared secret (``--turn-secret``; coturn's ``use-auth-secret`` with
  ``static-auth-secret``): each client gets its own credentials that stop working after
  ``ttl`` seconds. The username is ``<expiry unix time>:<user id>`` and the password is
  base64(HMAC-SHA1(secret, username)); the TURN server, which knows the secret, checks
  the HMAC and refuses a username whose time has passed. A credential read off the page
  is worth an hour of relaying at most, and the secret never leaves the server.

Why one hour by default: a credential is checked when the client allocates its relay,
i.e. within seconds of being minted (coturn then keeps the allocation's key for the
session, so a call outlives its credential); every new connection (a reconnect, a
resume) fetches fresh ones. So the lifetime only has to cover the fetch, the offer and a
clock difference between this server and the TURN server, while every minute more is a
minute a leaked credential keeps working. One hour is far above the first (and above the
clock skew an NTP-less VM drifts to) and 24 times shorter than the draft's suggested
day; ``--turn-ttl`` sets another (60 s to 1 day).

References:

- coturn, README.turnserver: ``--use-auth-secret``, ``--static-auth-secret`` and the
  "TURN REST API" section (the username and password formulas);
  ``--allow-loopback-peers``. https://github.com/coturn/coturn/blob/master/README.turnserver
- J. Uberti, "A REST API For Access To TURN Services", draft-uberti-behave-turn-rest-00:
  https://datatracker.ietf.org/doc/html/draft-uberti-behave-turn-rest-00
- RFC 7064 (the ``stun:``/``stuns:`` URI) and RFC 7065 (``turn:``/``turns:``, with
  ``?transport=udp|tcp``): https://www.rfc-editor.org/rfc/rfc7064,
  https://www.rfc-editor.org/rfc/rfc7065
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import hmac
import ipaddress
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .options import IceServer

if TYPE_CHECKING:
    from ..protocol import Ready
    from .options import WebRTCOptions

__all__ = [
    "DEFAULT_TURN_TTL",
    "ENV_ICE_SERVERS",
    "ENV_TURN_PASSWORD",
    "ENV_TURN_SECRET",
    "ENV_TURN_USER",
    "MAX_TURN_TTL",
    "MIN_TURN_TTL",
    "ClientIce",
    "IceConfig",
    "IcePolicy",
    "add_ice_arguments",
    "ice_config_from_args",
    "parse_ice_url",
    "ready_with_ice",
    "turn_rest_credentials",
    "webrtc_options_from_args",
]

IcePolicy = Literal["all", "relay"]
"""``RTCPeerConnection``'s ``iceTransportPolicy``: ``relay`` uses TURN relays only."""

DEFAULT_TURN_TTL = 3600.0
"""Seconds minted TURN credentials stay valid (see the module's doc for why one hour)."""
MIN_TURN_TTL = 60.0
MAX_TURN_TTL = 86400.0

ENV_ICE_SERVERS = "REJOINDER_ICE_SERVERS"
"""ICE server URLs, separated by spaces or commas (when no ``--ice-server`` is given)."""
ENV_TURN_USER = "REJOINDER_TURN_USER"
ENV_TURN_PASSWORD = "REJOINDER_TURN_PASSWORD"
ENV_TURN_SECRET = "REJOINDER_TURN_SECRET"

_SCHEMES = ("stun", "stuns", "turn", "turns")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?$")
_USER_ID_JUNK = re.compile(r"[^A-Za-z0-9._-]+")


# ------------------------------------------------------------------ URLs


def parse_ice_url(text: str) -> str:
    """``text`` checked as a STUN or TURN URL (RFC 7064, 7065), returned trimmed;
    ``ValueError`` saying what is wrong otherwise.

    ``stun:host[:port]``, ``stuns:host[:port]``, ``turn:host[:port][?transport=udp|tcp]``,
    ``turns:host[:port][?transport=tcp]``; host is a name, an IPv4 address or an IPv6
    address in brackets."""
    url = text.strip()
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() not in _SCHEMES:
        raise ValueError(
            f"an ICE server URL starts with stun:, stuns:, turn: or turns:, not {text!r} "
            "(e.g. stun:stun.example.org:3478, turn:turn.example.org:3478?transport=udp)"
        )
    scheme = scheme.lower()
    if rest.startswith("//"):
        raise ValueError(f"an ICE server URL has no '//': {scheme}:{rest[2:]}, not {text!r}")
    address, question, query = rest.partition("?")
    _check_address(address, text)
    if question:
        if scheme in ("stun", "stuns"):
            raise ValueError(f"a STUN URL takes no query (?...): {text!r}")
        key, equals, transport = query.partition("=")
        allowed = ("tcp",) if scheme == "turns" else ("udp", "tcp")
        if key != "transport" or not equals or transport.lower() not in allowed:
            raise ValueError(
                f"a {scheme}: URL's only query is ?transport={'|'.join(allowed)}: {text!r}"
            )
    return url


def _check_address(address: str, text: str) -> None:
    if address.startswith("["):
        host, bracket, tail = address[1:].partition("]")
        if not bracket:
            raise ValueError(f"an IPv6 address in an ICE server URL ends with ']': {text!r}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"not an IPv6 address: [{host}] in {text!r}") from None
        if tail and not tail.startswith(":"):
            raise ValueError(f"expected ':port' after the address in {text!r}")
        have_port, port = bool(tail), tail[1:]
    else:
        host, colon, port = address.partition(":")
        have_port = bool(colon)
        if not _HOSTNAME.match(host):
            raise ValueError(f"no valid host name or address in the ICE server URL {text!r}")
    if have_port and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"a port is 1 to 65535, not {port!r}, in {text!r}")


def _is_turn(url: str) -> bool:
    return url.lower().startswith(("turn:", "turns:"))


# ------------------------------------------------------------- credentials


def turn_rest_credentials(secret: str, user_id: str, expires_at: int) -> tuple[str, str]:
    """TURN REST API credentials: the username ``<expires_at>:<user_id>`` and the password
    base64(HMAC-SHA1(secret, username)), as coturn's ``use-auth-secret`` checks them."""
    username = f"{expires_at}:{user_id}"
    digest = hmac.new(secret.encode("utf-8"), username.encode("utf-8"), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode("ascii")


def _user_id(text: str) -> str:
    """``text`` as the user part of a TURN REST username: no separator (``:``) nor
    anything a TURN server could take for one, at most 64 characters."""
    cleaned = _USER_ID_JUNK.sub("_", text).strip("_")[:64]
    return cleaned or "rejoinder"


@dataclass(frozen=True, slots=True)
class ClientIce:
    """What one client gets: its ICE servers (TURN credentials minted for it) and policy."""

    servers: tuple[IceServer, ...]
    transport_policy: IcePolicy = "all"
    ttl: float | None = None
    """Seconds the TURN credentials stay valid (None: static ones, or no TURN)."""

    def as_json(self) -> dict[str, Any]:
        """The body of ``GET /api/ice`` (and the ``ready`` fields' values)."""
        body: dict[str, Any] = {
            "ice_servers": [_server_json(server) for server in self.servers],
            "ice_transport_policy": self.transport_policy,
        }
        if self.ttl is not None:
            body["ttl"] = self.ttl
        return body


def _server_json(server: IceServer) -> dict[str, Any]:
    urls = [server.urls] if isinstance(server.urls, str) else list(server.urls)
    entry: dict[str, Any] = {"urls": urls}
    if server.username is not None:
        entry["username"] = server.username
    if server.credential is not None:
        entry["credential"] = server.credential
    return entry


@dataclass(frozen=True, slots=True)
class IceConfig:
    """The STUN/TURN servers clients use, and how their TURN credentials are made.

    ``urls``: STUN and TURN URLs (``parse_ice_url``). TURN URLs need credentials: a
    ``username`` and ``password`` (static, the same for every client), or a ``secret``
    shared with the TURN server, from which each client's own credentials are minted,
    valid ``ttl`` seconds. ``transport_policy="relay"`` asks clients to use TURN relays
    only (e.g. to keep the clients' addresses from the server, or to test TURN)."""

    urls: tuple[str, ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    ttl: float = DEFAULT_TURN_TTL
    transport_policy: IcePolicy = "all"

    def __post_init__(self) -> None:
        object.__setattr__(self, "urls", tuple(parse_ice_url(url) for url in self.urls))
        turn = self.turn_urls
        static = self.username is not None or self.password is not None
        if static and self.secret is not None:
            raise ValueError(
                "give TURN credentials one way: a user and password, or a shared secret"
            )
        if static and (not self.username or not self.password):
            raise ValueError("static TURN credentials need both a user and a password")
        if turn and not static and self.secret is None:
            raise ValueError(
                f"the TURN server {turn[0]} needs credentials: --turn-user and "
                f"--turn-password (or ${ENV_TURN_PASSWORD}), or --turn-secret (or "
                f"${ENV_TURN_SECRET}) for time-limited ones"
            )
        if (static or self.secret is not None) and not turn:
            raise ValueError("TURN credentials were given but no turn: or turns: URL")
        if self.secret is not None and not self.secret:
            raise ValueError("the TURN secret is empty")
        if not MIN_TURN_TTL <= self.ttl <= MAX_TURN_TTL:  # NaN fails this too
            raise ValueError(
                f"the TURN credentials' lifetime is {MIN_TURN_TTL:g} to {MAX_TURN_TTL:g} "
                f"seconds, not {self.ttl}"
            )
        if self.transport_policy not in ("all", "relay"):
            raise ValueError(
                f'the ICE transport policy is "all" or "relay", not {self.transport_policy!r}'
            )
        if self.transport_policy == "relay" and not turn:
            raise ValueError("a relay-only ICE policy needs a turn: or turns: URL")

    @property
    def stun_urls(self) -> tuple[str, ...]:
        return tuple(url for url in self.urls if not _is_turn(url))

    @property
    def turn_urls(self) -> tuple[str, ...]:
        return tuple(url for url in self.urls if _is_turn(url))

    def for_client(self, user_id: str, *, now: float | None = None) -> ClientIce:
        """The servers for one client (``user_id``: e.g. its session's id, which the TURN
        server then logs), with TURN credentials minted for it when a secret is set."""
        servers: list[IceServer] = []
        if self.stun_urls:
            servers.append(IceServer(urls=self.stun_urls))
        ttl: float | None = None
        if self.turn_urls:
            if self.secret is not None:
                expires = int((time.time() if now is None else now) + self.ttl)
                username, password = turn_rest_credentials(self.secret, _user_id(user_id), expires)
                ttl = self.ttl
            else:
                username, password = self.username or "", self.password or ""
            servers.append(IceServer(urls=self.turn_urls, username=username, credential=password))
        return ClientIce(tuple(servers), self.transport_policy, ttl)

    def server_ice_servers(self) -> tuple[IceServer, ...]:
        """What the server's own peer connections use: the STUN servers only (its
        server-reflexive address helps a server behind a 1:1 NAT, such as a cloud VM with
        a private interface). The relays are for clients: set
        ``WebRTCOptions.ice_servers`` yourself for a server behind a NAT that needs one."""
        return (IceServer(urls=self.stun_urls),) if self.stun_urls else ()

    def summary(self) -> str:
        """One line for a server's banner (no secret in it)."""
        parts = [", ".join(self.urls)]
        if self.secret is not None:
            parts.append(f"TURN credentials minted per client, valid {self.ttl:g} s")
        elif self.username is not None:
            parts.append(f"static TURN user {self.username}")
        if self.transport_policy == "relay":
            parts.append("clients relay only")
        return "; ".join(parts)


def ready_with_ice(ready: Ready, ice: IceConfig | None, user_id: str | None = None) -> Ready:
    """``ready`` with the ICE servers and policy for the client's next peer connection,
    TURN credentials minted for ``user_id`` (its session's id, say; else the ``ready``'s
    ``session_id``); ``ready`` as it is when no ICE servers are configured."""
    if ice is None:
        return ready
    from ..protocol import IceServerInfo

    mine = ice.for_client(user_id or ready.session_id or "session")
    servers = [IceServerInfo(**_server_json(server)) for server in mine.servers]
    return ready.model_copy(
        update={"ice_servers": servers, "ice_transport_policy": mine.transport_policy}
    )


# ------------------------------------------------------------ command line


def add_ice_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ICE options (a group of their own) to ``parser`` (``rejoinder dev`` and
    ``serve``); read them back with ``ice_config_from_args``."""
    group = parser.add_argument_group(
        "WebRTC beyond localhost (STUN/TURN)",
        "ICE servers the browser's peer connection uses (sent to it with fresh TURN "
        "credentials before each offer); see docs/webrtc.md. Secrets are best given in "
        f"the environment (${ENV_TURN_SECRET}, ${ENV_TURN_PASSWORD}): a command line is "
        "visible to every user of the machine",
    )
    group.add_argument(
        "--ice-server",
        metavar="URL",
        action="append",
        dest="ice_servers",
        default=None,
        help="a STUN or TURN server: stun:HOST:PORT, turn:HOST:PORT?transport=udp|tcp, "
        f"turns:HOST:PORT; repeat for several (default: ${ENV_ICE_SERVERS}, spaces or "
        "commas between URLs; none: only direct connections)",
    )
    group.add_argument(
        "--turn-user",
        metavar="NAME",
        help=f"the TURN servers' static user (or ${ENV_TURN_USER})",
    )
    group.add_argument(
        "--turn-password",
        metavar="PASSWORD",
        help=f"that user's password (or ${ENV_TURN_PASSWORD}); every client sees it",
    )
    group.add_argument(
        "--turn-secret",
        metavar="SECRET",
        help=f"the TURN REST shared secret (coturn's static-auth-secret; or "
        f"${ENV_TURN_SECRET}): each client gets its own time-limited credentials",
    )
    group.add_argument(
        "--turn-ttl",
        metavar="SECONDS",
        type=_ttl,
        default=DEFAULT_TURN_TTL,
        help=f"how long minted TURN credentials stay valid (default {DEFAULT_TURN_TTL:g}; "
        f"{MIN_TURN_TTL:g} to {MAX_TURN_TTL:g})",
    )
    group.add_argument(
        "--ice-transport-policy",
        choices=("all", "relay"),
        default="all",
        help="relay: clients connect through a TURN relay only (default all)",
    )


def _ttl(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_TURN_TTL <= value <= MAX_TURN_TTL:
        raise argparse.ArgumentTypeError(
            f"must be {MIN_TURN_TTL:g} to {MAX_TURN_TTL:g} seconds, got {text}"
        )
    return value


def ice_config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> IceConfig | None:
    """The ``IceConfig`` the arguments of ``add_ice_arguments`` (and the environment, for
    what they leave out) describe; None when nothing is configured. ``ValueError`` with
    the reason when it does not add up (a TURN URL without credentials...)."""
    env = os.environ if environ is None else environ

    def given(name: str, variable: str) -> str | None:
        value = getattr(args, name, None)
        if value is None:
            value = env.get(variable) or None
        return value

    urls: list[str] = list(getattr(args, "ice_servers", None) or [])
    if not urls:
        urls = [u for u in re.split(r"[\s,]+", env.get(ENV_ICE_SERVERS, "")) if u]
    user = given("turn_user", ENV_TURN_USER)
    password = given("turn_password", ENV_TURN_PASSWORD)
    secret = given("turn_secret", ENV_TURN_SECRET)
    policy: IcePolicy = "relay" if getattr(args, "ice_transport_policy", None) == "relay" else "all"
    if not urls and user is None and password is None and secret is None:
        if policy == "relay":
            raise ValueError("--ice-transport-policy relay needs a TURN server (--ice-server)")
        return None
    return IceConfig(
        urls=tuple(urls),
        username=user,
        password=password,
        secret=secret,
        ttl=float(getattr(args, "turn_ttl", None) or DEFAULT_TURN_TTL),
        transport_policy=policy,
    )


def webrtc_options_from_args(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    *,
    base: WebRTCOptions | None = None,
) -> WebRTCOptions | None:
    """``WebRTCOptions`` carrying the configured ICE servers (``base``'s other settings),
    for ``create_app(webrtc=...)``; None when no ICE server is configured (the app's
    default). ``ValueError`` when the configuration is wrong, or when it names ICE
    servers and the ``webrtc`` extra is missing (a server that would ignore them)."""
    config = ice_config_from_args(args, environ)
    if config is None:
        return None
    from ._deps import INSTALL_HINT, available
    from .options import WebRTCOptions

    if not available():
        raise ValueError(
            f"ICE servers are for WebRTC, which needs the 'webrtc' extra: {INSTALL_HINT}"
        )
    return dataclasses.replace(
        base or WebRTCOptions(), ice=config, ice_servers=config.server_ice_servers()
    )
