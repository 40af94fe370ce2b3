"""Which running sessions use which model: a model closes with the last one, unless the
process shares it.

A model object (an LLM client, a loaded Whisper) may serve several sessions at once; its
connection or weights must stay until the last session using it closes. A session
claims its models when it starts and releases them when it closes; a model used again
later opens a new connection on first use.

A model marked ``shared(model)`` belongs to the process instead: sessions borrow it and
none closes it, so the next session finds it loaded (seconds for a speech model);
``close_shared()`` closes them when the process stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TypeVar

__all__ = ["ModelClaims", "close_shared", "shared"]

M = TypeVar("M")

logger = logging.getLogger("rejoinder")

_in_use: dict[int, tuple[object, int]] = {}
"""Each model in use (by id, the model itself kept so its id cannot be reused by another
object while claimed: a session that was never closed must not make a new model look
taken) and how many running sessions use it."""


_shared: dict[int, object] = {}
"""Models the process owns (by id, kept alive), in the order they were shared."""


def shared(model: M) -> M:
    """Mark ``model`` as the process's: every session may use it, none closes it (it stays
    loaded between sessions). Returns the model, for ``STT = rj.shared(WhisperSTT())``.
    ``rejoinder dev`` and ``serve`` close shared models when they stop."""
    if model is None:
        raise TypeError("shared() needs a model, got None")
    _shared[id(model)] = model
    return model


async def close_shared(close_timeout: float = 5.0) -> None:
    """Close every shared model (the process is stopping), each bounded by the timeout."""
    models = list(_shared.values())
    _shared.clear()
    for model in reversed(models):
        await _close(model, close_timeout)


async def _close(model: object, close_timeout: float) -> None:
    close = getattr(model, "aclose", None)
    if not callable(close):
        return
    try:
        await asyncio.wait_for(close(), close_timeout)
    except Exception as exc:
        logger.warning("closing %r failed: %r", model, exc)


class ModelClaims:
    """One session's claim on its models (each model once, however many slots hold it)."""

    def __init__(self) -> None:
        self._models: list[object] = []

    @staticmethod
    def in_use(model: object) -> bool:
        """Whether a running session uses ``model``."""
        return _users(model) > 0

    def claim(self, models: Iterable[object | None]) -> None:
        unique: dict[int, object] = {}
        for model in models:
            if model is not None:
                unique.setdefault(id(model), model)
        self._models = list(unique.values())
        for model in self._models:
            _in_use[id(model)] = (model, _users(model) + 1)

    async def release(self, close_timeout: float) -> None:
        """Give the models back; close those no other running session uses."""
        models, self._models = self._models, []
        for model in models:
            users = _users(model) - 1
            if users > 0:
                _in_use[id(model)] = (model, users)
                continue
            _in_use.pop(id(model), None)
            if _shared.get(id(model)) is model:
                continue  # the process's: it stays loaded for the next session
            await _close(model, close_timeout)


def _users(model: object) -> int:
    entry = _in_use.get(id(model))
    return entry[1] if entry is not None and entry[0] is model else 0
