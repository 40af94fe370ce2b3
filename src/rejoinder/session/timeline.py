"""The session timeline: what the session did and why, on loop time, bounded in memory.

Every entry is ``{"t": <loop seconds>, "kind": <kind>, ...fields}`` — the same dict in
memory (``session.timeline.entries()``) and, one JSON object a line, in a file
(``session.timeline.write_to(path)``), which ``rejoinder timeline FILE.jsonl -o turn.png``
draws and ``rejoinder simulate`` checks. ``t`` is ``loop.time()``, the clock every
decision is made on (exact on virtual time). The kinds and their fields:

==========================  ====================================================
``session``                 ``event`` ("started" | "closed"), ``reason`` (closed)
``agent_state``             ``state``, ``old``: the derived agent state changed
``user_state``              ``state``, ``old``: the derived user state changed
``ob_opened``               ``id``, ``ob`` (kind), ``owner``, ``label``, ``committed``
``ob_handed_over``          ``ids`` (closed), ``to`` (the id opened in the same step)
``ob_closed``               ``id``, ``ob``, ``owner``, ``label``, ``reason``
``ob_flag``                 ``id``, ``flag`` ("audible" | "yielded" | "committed"),
                            ``value`` (bool): audible start/stop is this
``ob_expired``              ``id``, ``ob``, ``owner``, ``label``: a watchdog fired
``user_speaking``           ``speaking`` (bool): the VAD's verdict, as the floor got it
``away_timer``              ``armed`` (bool), ``deadline`` (when armed)
``transcript``              ``role`` ("user" | "agent"), ``text``, ``final``,
                            ``interrupted`` (agent)
``tool``                    ``name``, ``call_id``, ``status`` ("started" |
                            "finished"), ``error`` (bool, finished)
``handoff``                 ``old``, ``new``: agent ids
``turn_discarded``          ``text``, ``reason``
``speculation``             ``event`` ("started" | "used" | "dropped"), ``reason``
``background_tool``         ``name``, ``call_id``, ``error``: a tool finished after
                            its reply moved on
``error``                   ``source``, ``error`` (type: message), ``recoverable``
``metrics``                 ``metrics``: one ``metrics_collected`` payload, as JSON
``turn_verdict``            ``probability`` (or null: the detector failed),
                            ``complete``, ``seconds``, ``early`` (a "complete"
                            made at the utterance's last pause): a turn
                            detector's judgement
``input``                   ``muted`` (bool): ``session.mute_input()``
``scenario``                ``rejoinder simulate``'s own events (what the script did)
==========================  ====================================================

Obligation ids are the floor's: an ``ob_opened`` and the ``ob_closed`` with the same
``id`` bound one bar in the picture. Unknown kinds may appear in later versions: a
reader skips what it does not know.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

__all__ = ["DEFAULT_MAX_ENTRIES", "Timeline", "json_safe", "read_timeline"]

logger = logging.getLogger("rejoinder")

DEFAULT_MAX_ENTRIES = 20_000
"""Entries kept in memory (the oldest go first); a file gets every one."""


class Timeline:
    """A bounded, append-only record of timeline entries (see the module docstring)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._entries: deque[dict[str, Any]] = deque(maxlen=max_entries)
        self._sink: IO[str] | None = None
        self._own_sink = False
        self.dropped = 0
        """Entries that fell out of memory (a file, if one is open, still has them)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._entries))

    def entries(self, *kinds: str) -> list[dict[str, Any]]:
        """The entries kept, oldest first; only those of ``kinds`` if any are given."""
        if not kinds:
            return list(self._entries)
        wanted = set(kinds)
        return [e for e in self._entries if e["kind"] in wanted]

    def add(self, t: float, kind: str, **fields: Any) -> None:
        entry = {"t": t, "kind": kind, **fields}
        if len(self._entries) == self._entries.maxlen:
            self.dropped += 1
        self._entries.append(entry)
        if self._sink is not None:
            self._write(entry)

    def write_to(self, target: str | os.PathLike[str] | IO[str]) -> None:
        """From now on write every entry to ``target`` (a path, opened for writing, or an
        open text file), one JSON object a line; the entries kept so far go first. The
        file is closed with ``close()`` (the session does it when it closes)."""
        self.close()
        # os.PathLike, not pathlib.Path: pathlib (with urllib.parse) is 5 ms of import
        # that a session writing no file would pay.
        if isinstance(target, str | os.PathLike):
            self._sink = open(target, "w", encoding="utf-8")  # noqa: SIM115 - kept open
            self._own_sink = True
        else:
            self._sink, self._own_sink = target, False
        for entry in self._entries:
            self._write(entry)

    def close(self) -> None:
        sink, self._sink = self._sink, None
        if sink is None:
            return
        try:
            sink.flush()
            if self._own_sink:
                sink.close()
        except OSError as exc:
            logger.warning("closing the timeline file failed: %r", exc)

    def _write(self, entry: Mapping[str, Any]) -> None:
        assert self._sink is not None
        import json  # here, not at import: most sessions never write their timeline

        try:
            self._sink.write(json.dumps(json_safe(entry), separators=(",", ":")) + "\n")
        except (OSError, ValueError) as exc:  # a full disk must not break the session
            logger.warning("writing the timeline failed, not writing it any more: %r", exc)
            self._sink = None


def read_timeline(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Entries from JSON lines (a file's lines); blank lines and non-entries are skipped."""
    import json  # here, not at import: only the timeline tools read files

    entries: list[dict[str, Any]] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("t"), int | float) and "kind" in entry:
            entries.append(entry)
    return entries


def json_safe(value: Any) -> Any:
    """An entry (or any value in one) as plain JSON values: dataclasses and objects with
    ``to_dict`` become dicts, non-finite floats null, anything else its ``repr``."""
    if isinstance(value, str | bool | int) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return json_safe(to_dict())
    slots = getattr(type(value), "__dataclass_fields__", None)
    if slots is not None:
        return {name: json_safe(getattr(value, name)) for name in slots}
    return repr(value)
