"""ICE configuration: the servers to use and, optionally, which local addresses to offer.

aiortc falls back to a public STUN server when it is given no ICE servers; we always pass
the configured list, empty by default, so nothing outside is contacted unless asked.

aioice lists every local address except 127.0.0.1 (and ``::1``) as a host candidate and has
no setting to choose them. ``host_addresses`` narrows the list for the connections created
under :func:`offering`: aioice's address lookup is wrapped once, and the wrapper answers
from a context variable when one is set (gathering runs inside
``RTCPeerConnection.setLocalDescription``, so inside that context), and asks aioice
otherwise. This is how a loopback-only host (a test, a sandbox) gets a usable
``127.0.0.1`` candidate.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from .options import IceServer

if TYPE_CHECKING:
    from aiortc import RTCIceServer

_ADDRESSES: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "rejoinder_webrtc_host_addresses", default=None
)


def _chosen(use_ipv4: bool, use_ipv6: bool) -> list[str] | None:
    chosen = _ADDRESSES.get()
    if chosen is None:
        return None
    return [a for a in chosen if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]


def _install() -> None:
    """Wrap aioice's lookup (again, if something replaced the wrapper since)."""
    import aioice.ice

    current: Callable[[bool, bool], list[str]] = aioice.ice.get_host_addresses
    if getattr(current, "_rejoinder_wrapper", False):
        return

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        chosen = _chosen(use_ipv4, use_ipv6)
        return current(use_ipv4, use_ipv6) if chosen is None else chosen

    get_host_addresses._rejoinder_wrapper = True  # type: ignore[attr-defined]
    aioice.ice.get_host_addresses = get_host_addresses


@contextlib.contextmanager
def offering(host_addresses: Sequence[str] | None) -> Iterator[None]:
    """Gather host candidates only on ``host_addresses`` (None: every address aioice finds)."""
    if host_addresses is None:
        yield
        return
    _install()
    token = _ADDRESSES.set(tuple(host_addresses))
    try:
        yield
    finally:
        _ADDRESSES.reset(token)


def rtc_ice_servers(servers: Sequence[IceServer]) -> list[RTCIceServer]:
    """aiortc's ``RTCIceServer`` list (always a list: ``None`` would mean Google's STUN)."""
    from aiortc import RTCIceServer

    return [
        RTCIceServer(
            urls=list(s.urls) if not isinstance(s.urls, str) else s.urls,
            username=s.username,
            credential=s.credential,
        )
        for s in servers
    ]
