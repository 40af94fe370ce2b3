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

_in_use: dict[int, int] = {}
"""How many running sessions use each model (by id)."""


class ModelClaims:
    """One session's claim on its models (each model once, however many slots hold it)."""

    def __init__(self) -> None:
        self._models: list[object] = []

    @staticmethod
    def in_use(model: object) -> bool:
        """Whether a running session uses ``model``."""
        return _in_use.get(id(model), 0) > 0

    def claim(self, models: Iterable[object | None]) -> None:
        unique: dict[int, object] = {}
        for model in models:
            if model is not None:
                unique.setdefault(id(model), model)
        self._models = list(unique.values())
        for model in self._models:
            _in_use[id(model)] = _in_use.get(id(model), 0) + 1

    async def release(self, close_timeout: float) -> None:
        """Give the models back; close those no other running session uses."""
        models, self._models = self._models, []
        for model in models:
            users = _in_use.get(id(model), 1) - 1
            if users > 0:
                _in_use[id(model)] = users
                continue
            _in_use.pop(id(model), None)
            close = getattr(model, "aclose", None)
            if not callable(close):
                continue
            try:
                await asyncio.wait_for(close(), close_timeout)
            except Exception as exc:
                logger.warning("closing %r failed: %r", model, exc)
