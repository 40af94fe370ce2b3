"""Which running sessions use which model: a model closes with the last one.

A model object (an LLM client, a loaded Whisper) may serve several sessions at once; its
connection or weights must stay until the last session using it closes. A session
claims its models when it starts and releases them when it closes; a model used again
later opens a new connection on first use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

__all__ = ["ModelClaims"]

logger = logging.getLogger("rejoinder")

_in_use: dict[int, tuple[object, int]] = {}
"""Each model in use (by id, the model itself kept so its id cannot be reused by another
object while claimed: a session that was never closed must not make a new model look
taken) and how many running sessions use it."""


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
            close = getattr(model, "aclose", None)
            if not callable(close):
                continue
            try:
                await asyncio.wait_for(close(), close_timeout)
            except Exception as exc:
                logger.warning("closing %r failed: %r", model, exc)


def _users(model: object) -> int:
    entry = _in_use.get(id(model))
    return entry[1] if entry is not None and entry[0] is model else 0
