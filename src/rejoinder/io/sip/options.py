"""SipOptions: how the SIP endpoint listens, whom it answers and how it checks them."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .digest import DigestAuthority
from .ratelimit import RateLimiter
from .transactions import Timers

if TYPE_CHECKING:
    from .media import SipMediaOptions

__all__ = ["LOOPBACK_ONLY", "SipOptions"]

LOOPBACK_ONLY = ("127.0.0.0/8", "::1/128")
"""``SipOptions.allow_from``'s default: only this machine may send SIP requests."""


@dataclass(frozen=True, slots=True)
class SipOptions:
    """Settings of ``SipEndpoint`` (validated when made)."""

    host: str = "127.0.0.1"
    """The address to bind (``0.0.0.0`` or ``::`` for every interface)."""
    port: int = 5060
    """The UDP port (0: any free one; ``start`` returns it)."""
    public_host: str | None = None
    """The IP address the trunk must reach us at, for Contact and SDP ``c=`` (an address,
    not a name: phones do not resolve SDP's). Needed behind NAT (the RTP port range must
    be forwarded too). Without it: the bind address, or when bound to every interface,
    the local address the system routes toward the caller (the interface its INVITE came
    in on, in a routed network)."""
    allow_from: tuple[str, ...] = LOOPBACK_ONLY
    """Networks whose requests are answered (CIDR strings); others get 403 and one log
    line. Loopback only by default: a SIP port open to the internet is scanned within
    minutes, so a trunk's networks must be named (Twilio, Telnyx publish theirs), or
    ``("0.0.0.0/0", "::/0")`` given deliberately, with digest auth."""
    username: str | None = None
    """With ``password``: INVITEs need digest credentials (401 otherwise)."""
    password: str | None = None
    realm: str = "rejoinder"
    nonce_ttl: float = 300.0
    digest_algorithms: tuple[str, ...] = ("SHA-256", "MD5")
    """Offered in this order, one challenge each (RFC 8760: the caller takes the first it
    knows). A caller that answers only the first challenge and knows only MD5 (SIPp
    does so) needs ``("MD5",)``."""
    timers: Timers = field(default_factory=Timers)
    max_datagrams_per_second: float = 200.0
    """Per source address, sustained (a busy trunk sends a few dozen)."""
    burst: float = 400.0
    media_timeout: float = 5.0
    """Seconds to open a call's RTP before the INVITE is answered 500."""
    transfer_timeout: float = 30.0
    """Seconds a transfer may take, REFER to the final NOTIFY."""
    hangup_delay: float = 0.3
    """Seconds between the agent hanging up and our BYE, so the caller's phone plays
    what its jitter buffer still holds of the last words."""
    retry_after: int = 30
    """The ``Retry-After`` of the 503 sent while draining, or when a call's RTP cannot
    be opened (no free port in the range, too slow)."""
    media: SipMediaOptions | None = None
    """The calls' RTP settings (port range, jitter buffer, silence timeout), passed to
    ``RtpCall.open``."""
    user_agent: str = "rejoinder"

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"SIP port {self.port} is not a port number")
        if (self.username is None) != (self.password is None):
            raise ValueError("digest auth needs both username and password")
        if not self.allow_from:
            raise ValueError("allow_from is empty: no caller could reach the endpoint")
        self.networks()  # a bad network fails here
        if self.hangup_delay < 0:
            raise ValueError("hangup_delay must not be negative")
        if self.media_timeout <= 0 or self.transfer_timeout <= 0:
            raise ValueError("media_timeout and transfer_timeout must be positive")
        if self.public_host is not None:
            try:
                ipaddress.ip_address(self.public_host)
            except ValueError:
                raise ValueError(
                    f"public_host must be an IP address (it goes in SDP), got {self.public_host!r}"
                ) from None
        self.authority()
        self.rate_limiter()

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        try:
            return [ipaddress.ip_network(text, strict=False) for text in self.allow_from]
        except ValueError as exc:
            raise ValueError(f"allow_from: {exc}") from exc

    def authority(self) -> DigestAuthority | None:
        if self.username is None or self.password is None:
            return None
        return DigestAuthority(
            username=self.username,
            password=self.password,
            realm=self.realm,
            nonce_ttl=self.nonce_ttl,
            algorithms=self.digest_algorithms,
        )

    def rate_limiter(self) -> RateLimiter:
        return RateLimiter(rate=self.max_datagrams_per_second, burst=self.burst)

    @property
    def wildcard(self) -> bool:
        return self.host in ("0.0.0.0", "::", "")
