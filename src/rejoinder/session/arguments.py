"""Checks on what an application passes the session: a wrong argument is the caller's
bug, reported at the call site with what was expected."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..models.claims import ModelClaims
from ..models.interruption import InterruptionDetector
from ..models.stt import StreamingSTT
from ..models.turn_detector import TurnDetector

if TYPE_CHECKING:
    from ..models.stt import STT

MODES = ("vad", "manual")
"""The turn detection modes that are not a ``TurnDetector``."""


def check_options(
    *,
    max_tool_steps: int,
    close_timeout: float,
    answer_timeout: float,
    turn_detection: object,
    interruption_detection: object,
) -> None:
    if max_tool_steps < 0:
        raise ValueError("max_tool_steps must be >= 0")
    if close_timeout <= 0:
        raise ValueError("close_timeout must be positive")
    if not answer_timeout > 0:
        raise ValueError("answer_timeout must be positive")
    if not isinstance(turn_detection, TurnDetector) and turn_detection not in MODES:
        raise ValueError(
            f'turn_detection must be "vad", "manual" or a TurnDetector, got {turn_detection!r}'
        )
    require(interruption_detection, (InterruptionDetector, type(None)), "interruption_detection")


def check_free_recognizer(stt: STT | None) -> None:
    """A streaming recognizer holds one utterance stream (and a streaming provider one
    connection): two sessions' microphones on it would be transcribed as one."""
    if isinstance(stt, StreamingSTT) and ModelClaims.in_use(stt):
        raise RuntimeError(
            f"{type(stt).__name__} is a streaming recognizer already used by a "
            "running session; give each session its own"
        )


def require(value: object, kind: type | tuple[type, ...], what: str) -> None:
    """A wrong-typed argument: say so at the call site."""
    # bool is an int; an int is never accepted where a bool is asked for, and vice versa.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        names = " or ".join(k.__name__ for k in _kinds(kind) if k is not type(None))
        if type(None) in _kinds(kind):
            names += " or None"
        raise TypeError(f"{what} must be {names}, got {type(value).__name__}: {value!r:.60}")


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
