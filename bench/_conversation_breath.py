"""Where to open a pause in a sentence said in one breath.

A two-part request ("I'd like to book, um, | a table for two") used to be synthesized as
two separate utterances with silence between them. Every TTS engine reads its input as a
whole sentence, so the first part came out with a sentence's ending: falling pitch, the
last word drawn out. A person who stops mid-thought does not sound like that, and an
audio turn model hears the difference (Smart Turn gave Piper's stand-alone "can you set
an alarm for" a 0.93 probability of being finished). So the request is now synthesized
whole, and the silence is opened at the boundary between the two parts' words: what comes
before the pause keeps the pitch of a sentence that goes on.

The boundary is found by aligning the first part said alone against the start of the
whole sentence (dynamic time warping of their log-Mel frames, open at the end): the frame
of the whole that matches the end of the part alone, whose last word is drawn out as a
sentence's last word is, which the warping absorbs. It is then moved to the quietest
10 ms block within ``SEARCH`` of it. (Whisper tiny.en's cross-attention word timings put
it 0.1-0.25 s late: into the next word.)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

RATE = 16000
BLOCK = RATE // 100
SEARCH = 0.06  # seconds either side of the aligned boundary
FADE = 0.005  # seconds of fade on each side of the cut, so that it does not click
_WORD = re.compile(r"[A-Za-z0-9']")


def boundary(whole: np.ndarray, first: np.ndarray) -> float:
    """Seconds into ``whole`` (16 kHz int16) where what ``first`` (the same voice saying
    the first part alone, trimmed to its speech) says ends."""
    a = _log_mel(first)
    b = _log_mel(whole)
    cost = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))
    n, m = cost.shape
    total = np.full((n, m), np.inf)
    total[0] = np.cumsum(cost[0])  # the part starts where the whole starts
    for i in range(1, n):
        row = total[i - 1]
        best = np.minimum(row, np.concatenate([[np.inf], row[:-1]]))  # from above, diagonal
        acc = cost[i] + best
        for j in range(1, m):  # from the left: a frame of the part spread over several
            acc[j] = min(acc[j], cost[i, j] + acc[j - 1])
        total[i] = acc
    # Open at the end: the whole goes on after the part.
    end = int(np.argmin(total[-1] / np.arange(n, n + m)))
    return _quietest(whole, (end + 1) * HOP / RATE)


HOP = 160  # 10 ms


def _log_mel(pcm: np.ndarray) -> np.ndarray:
    """Frames × 80 log-Mel bands, 10 ms apart (Whisper's feature extractor)."""
    from faster_whisper.feature_extractor import FeatureExtractor

    if not _extractor:
        _extractor.append(FeatureExtractor(feature_size=80))
    features = _extractor[0](pcm.astype(np.float32) / 32768)
    frames = pcm.size // HOP
    return np.asarray(features[:, :frames].T, np.float64)


_extractor: list[Any] = []


def _quietest(pcm: np.ndarray, at: float) -> float:
    """The start of the quietest 10 ms block within ``SEARCH`` of ``at``."""
    lo = max(0, round((at - SEARCH) * RATE))
    hi = min(pcm.size - BLOCK, round((at + SEARCH) * RATE))
    if hi <= lo:
        return at
    x = pcm.astype(np.float64)
    starts = np.arange(lo, hi, BLOCK // 2)
    energy = [float(np.sum(x[s : s + BLOCK] ** 2)) for s in starts]
    return float(starts[int(np.argmin(energy))] + BLOCK // 2) / RATE


def open_pause(pcm: np.ndarray, at: float, seconds: float) -> np.ndarray:
    """``pcm`` with ``seconds`` of silence inserted at ``at``, each side faded."""
    cut = round(at * RATE)
    fade = round(FADE * RATE)
    head = pcm[:cut].astype(np.float64)
    tail = pcm[cut:].astype(np.float64)
    ramp = np.linspace(1.0, 0.0, fade)
    head[-fade:] *= ramp
    tail[:fade] *= ramp[::-1]
    gap = np.zeros(round(seconds * RATE))
    return np.concatenate([head, gap, tail]).astype(np.int16)
