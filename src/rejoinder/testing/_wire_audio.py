"""The audio bytes of OpenAI's wire formats (``audio/pcm``, ``audio/pcmu``, ``audio/pcma``)
for the loopback servers: they check the clients' G.711 with their own code path, not the
client's."""

from __future__ import annotations


def encode(mime: str, pcm: bytes) -> bytes:
    """16-bit little-endian PCM → the format's bytes (PCM as it is; G.711 at 8 bits)."""
    if mime == "audio/pcm":
        return pcm
    import numpy as np

    from ..models import g711

    samples = np.frombuffer(pcm, "<i2").astype(np.int16)
    return g711.ulaw_encode(samples) if mime == "audio/pcmu" else g711.alaw_encode(samples)


def decode(mime: str, data: bytes) -> bytes:
    """The format's bytes → 16-bit little-endian PCM."""
    if mime == "audio/pcm":
        return data
    from ..models import g711

    pcm = g711.ulaw_decode(data) if mime == "audio/pcmu" else g711.alaw_decode(data)
    return pcm.astype("<i2").tobytes()
