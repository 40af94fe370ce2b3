"""The camera a WebRTC client shares: one still per user turn, for a model that can see.

A video track delivers frames all the time (the page asks for 5 a second); a chat model
needs one picture with what the user said. ``CameraSampler`` reads the track
continuously (aiortc decodes every frame whether or not anyone reads it, and queues what
is not read without bound) and keeps only the latest decoded frame. When the user stops
speaking it encodes that frame once, as a JPEG scaled to at most ``max_side`` pixels on
its longer side, and shows it to the session with ``session.add_image(..., key="camera")``:
the still replaces a camera still that no message has taken yet (a cough, then words,
send one picture, the latest), so every user turn carries the picture of the moment
its speech ended, and nothing else accumulates.

Encoding happens at the end of speech, not on every frame, so the cost is one JPEG per
turn (about 5 ms for 640×480 on one core) plus aiortc's decoding of the track.
"""

from __future__ import annotations

import contextlib
import fractions
import logging
from typing import TYPE_CHECKING, Any

from ...models.image import ImageContent, ImageError

if TYPE_CHECKING:
    import av
    from aiortc import MediaStreamTrack

    from ...session import AgentSession

logger = logging.getLogger("rejoinder")

CAMERA_KEY = "camera"
"""The ``add_image`` key of the camera's still: a newer one replaces it until taken."""


class CameraSampler:
    def __init__(self, track: MediaStreamTrack, *, max_side: int = 768) -> None:
        if max_side < 16:
            raise ValueError("max_side must be at least 16 pixels")
        self._track = track
        self._max_side = max_side
        self._latest: av.VideoFrame | None = None
        self._session: AgentSession[Any] | None = None
        self.frames = 0
        """Frames read from the track (decoded by aiortc)."""
        self.stills = 0
        """Stills shown to the session."""

    @property
    def latest(self) -> av.VideoFrame | None:
        return self._latest

    async def run(self) -> None:
        """Read the track until it ends (the peer's task; cancelled when it closes)."""
        import av
        from aiortc.mediastreams import MediaStreamError

        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await self._track.recv()
                if isinstance(frame, av.VideoFrame):
                    self._latest = frame
                    self.frames += 1

    def attach(self, session: AgentSession[Any]) -> None:
        """Show ``session`` a still each time the user stops speaking."""
        self.detach()
        self._session = session
        session.on("user_state_changed", self._user_state_changed)

    def detach(self) -> None:
        """Show the session nothing more (this peer no longer carries it)."""
        session, self._session = self._session, None
        if session is not None:
            session.off("user_state_changed", self._user_state_changed)

    def _user_state_changed(self, event: Any) -> None:
        if event.old_state == "speaking" and event.new_state != "speaking":
            self.show()

    def show(self) -> ImageContent | None:
        """Encode the latest frame and show it to the session (``None``: no frame yet,
        or the session is gone)."""
        session, frame = self._session, self._latest
        if session is None or frame is None or not session.started:
            return None
        try:
            image = ImageContent.from_bytes(encode_jpeg(frame, self._max_side))
            session.add_image(image, key=CAMERA_KEY)
        except (ImageError, ValueError, RuntimeError) as exc:
            # A frame that does not encode, or a session closing: this turn has no still.
            logger.info("camera still not shown: %s", exc)
            return None
        self.stills += 1
        return image


def still_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """The still's size: the frame's, scaled down to ``max_side`` on its longer side,
    even numbers (the JPEG encoder's 4:2:0 chroma halves each dimension)."""
    scale = min(1.0, max_side / max(width, height))
    return max(2, round(width * scale) // 2 * 2), max(2, round(height * scale) // 2 * 2)


def encode_jpeg(frame: av.VideoFrame, max_side: int) -> bytes:
    """``frame`` as a JPEG no larger than ``max_side`` on its longer side."""
    import av

    width, height = still_size(frame.width, frame.height, max_side)
    scaled = frame.reformat(width=width, height=height, format="yuvj420p")
    encoder = av.CodecContext.create("mjpeg", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuvj420p"
    encoder.time_base = fractions.Fraction(1, 1)
    packets = [*encoder.encode(scaled), *encoder.encode(None)]
    return b"".join(bytes(packet) for packet in packets)
