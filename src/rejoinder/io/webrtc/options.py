"""Settings of the WebRTC transport (plain data: importing this needs no extra)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..mic_clock import MIC_BATCH_INTERVAL

if TYPE_CHECKING:
    from .ice_config import IceConfig


@dataclass(frozen=True, slots=True)
class IceServer:
    """A STUN or TURN server: ``urls`` like ``"stun:stun.example.org:3478"`` or
    ``"turn:turn.example.org:3478?transport=udp"`` (one URL or several)."""

    urls: str | Sequence[str]
    username: str | None = None
    credential: str | None = None


@dataclass(frozen=True, slots=True)
class WebRTCOptions:
    """How each peer connection is set up, and how long each step may take."""

    ice_servers: Sequence[IceServer] = ()
    """STUN/TURN servers this server's own peer connections use. None by default: no
    public server is ever contacted unless configured here (aiortc's own default would
    be a public STUN server)."""
    ice: IceConfig | None = None
    """The STUN/TURN servers *clients* use (``ice_config.IceConfig``): served by
    ``GET /api/ice`` with TURN credentials minted per request, and put in the data
    channel's ``ready``. None: clients get an empty list (direct connections only)."""
    host_addresses: Sequence[str] | None = None
    """Local addresses to offer as host candidates (None: every address aioice finds,
    which never includes 127.0.0.1). ``["127.0.0.1"]`` serves a client on a
    loopback-only host."""
    input_sample_rate: int = 16000
    """Rate of the microphone frames the session gets (mono, resampled with soxr)."""
    mic_batch_interval: float = MIC_BATCH_INTERVAL
    """Seconds between two hand-overs of microphone audio to the sessions, shared by all
    of them (see ``mic_clock``): a frame waits up to this long. 0: each at once."""
    gather_timeout: float = 5.0
    """Seconds to gather local ICE candidates before answering an offer."""
    connect_timeout: float = 15.0
    """Seconds from the answer until ICE and DTLS are connected."""
    data_channel_timeout: float = 5.0
    """Seconds from connecting until the client's data channel is open."""
    media_idle_timeout: float | None = 3.0
    """A microphone track that delivers nothing for this long means the peer is gone
    (a connected browser sends a packet every 20 ms, silence and a disabled track
    included). Short, since until then a reply the client stopped reporting is estimated
    to play on (``ReportedPlayback``): a drop seen late finds more of it counted as
    heard. A client that resumes makes a new peer connection anyway."""
    leave_timeout: float = 30.0
    """Seconds the entry point gets to return once the peer is gone (``Connection.serve``
    closes its session well within this), after which it is cancelled."""
    max_queued_audio: float = 1.0
    """Seconds of agent audio queued ahead of the track; more makes the session wait."""
    max_buffered_bytes: int = 1 << 20
    """Data-channel bytes the client may leave unread before it is dropped as too slow."""
    max_offer_bytes: int = 64 * 1024
    """Largest ``POST /api/offer`` body accepted."""
    accept_video: bool = True
    """Receive the first video track a client offers (the page's "camera"): each user
    turn then carries a still of it (``session.add_image``). False: video is answered
    inactive, and nothing of it is received or decoded."""
    video_max_side: int = 768
    """A camera still's longer side at most (pixels): the frame is scaled down to it."""

    def __post_init__(self) -> None:
        if self.input_sample_rate <= 0:
            raise ValueError("input_sample_rate must be positive")
        if self.video_max_side < 16:
            raise ValueError("video_max_side must be at least 16 pixels")
        if self.mic_batch_interval < 0:
            raise ValueError("mic_batch_interval must not be negative")
        for name in ("gather_timeout", "connect_timeout", "data_channel_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
