"""One reason the agent owes the user a reply or is working for them."""

from __future__ import annotations

from dataclasses import field
from enum import StrEnum

from .._dataclass import dataclass
from .kinds import ObligationKind

SESSION_OWNER = "session"
"""The owner that is always live: work that belongs to the session, not to one agent."""


class Phase(StrEnum):
    NEW = "new"  # created, not yet opened
    OPEN = "open"
    CLOSED = "closed"


@dataclass(eq=False, slots=True)
class Obligation:
    """Created by ``Floor.obligation``; opened, handed over and closed through the floor.

    Only the floor mutates it. Identity is the object itself (``eq=False``), ``id`` is
    for logs and for callers that key tables by obligation.
    """

    id: int
    kind: ObligationKind
    owner: str
    committed: bool
    label: str = ""
    phase: Phase = Phase.NEW
    opened_at: float | None = None
    deadline: float | None = None
    closed_at: float | None = None
    outcome: str | None = None
    audible: bool = False
    """Its output is being delivered to the user right now (audio playing, text streaming)."""
    yielded: bool = False
    """Paused for a possible barge-in: not audible, but still owed (the agent reports
    ``thinking``) until it resumes or is closed."""
    watchdog: float = field(default=0.0, repr=False)

    @property
    def is_open(self) -> bool:
        return self.phase is Phase.OPEN

    def __repr__(self) -> str:
        flags = "C" if self.committed else "u"
        if self.audible:
            flags += "A"
        if self.yielded:
            flags += "Y"
        label = f" {self.label}" if self.label else ""
        return f"<{self.kind.value}#{self.id}{label} {self.owner} {self.phase.value} {flags}>"
