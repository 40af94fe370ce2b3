"""JSON for data that comes from a server: too deep a document is malformed input.

``json`` parses and serializes recursively, so a document nested a few thousand levels
deep (20 KB of ``[``) raises ``RecursionError``, which callers that handle malformed
input (``ValueError``) do not expect; it would escape a stream or kill a reader task.
These wrappers turn it into ``NestedTooDeeply``, a ``ValueError``.
"""

from __future__ import annotations

import json

__all__ = ["NestedTooDeeply", "dumps", "loads"]


class NestedTooDeeply(ValueError):
    """The document nests more deeply than Python's JSON module can follow."""


def loads(text: str | bytes) -> object:
    """``json.loads``; raises ``ValueError`` for anything malformed, depth included."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NestedTooDeeply("nested too deeply to decode") from None


def dumps(value: object) -> str:
    """``json.dumps`` of a value decoded from a server (it may be deep enough to parse
    and yet too deep to serialize again from a deeper call stack)."""
    try:
        return json.dumps(value)
    except RecursionError:
        raise NestedTooDeeply("nested too deeply to encode") from None
