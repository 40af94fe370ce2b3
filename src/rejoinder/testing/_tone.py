"""The audio the loopback text-to-speech servers send: a 440 Hz tone, ``seconds_per_char``
of it a character, cut at whole samples so that timestamps match the audio exactly."""

from __future__ import annotations


def tone_for(chars: str, seconds_per_char: float, rate: int) -> tuple[bytes, float]:
    """16-bit little-endian PCM voicing ``chars`` at ``rate``, and the exact seconds one
    character lasts."""
    import numpy as np

    samples = round(seconds_per_char * rate)
    per_char = samples / rate
    index = np.arange(samples * len(chars))
    pcm = (6000 * np.sin(2 * np.pi * 440.0 * index / rate)).astype("<i2").tobytes()
    return pcm, per_char


def json_number(value: float) -> float | int:
    """``value`` rounded to the microsecond, an integer when it is whole (as the services
    write times)."""
    rounded = round(value, 6)
    return int(rounded) if rounded == int(rounded) else rounded
