"""What a floor mutation asks the runtime to do. The floor never does I/O itself."""

from __future__ import annotations

from typing import Literal, TypeAlias

from .._dataclass import dataclass
from .obligation import Obligation

AgentState: TypeAlias = Literal["initializing", "listening", "thinking", "speaking"]
UserState: TypeAlias = Literal["listening", "speaking", "away"]


@dataclass(frozen=True, slots=True)
class AgentStateChanged:
    old_state: AgentState
    new_state: AgentState
    at: float


@dataclass(frozen=True, slots=True)
class UserStateChanged:
    old_state: UserState
    new_state: UserState
    at: float


@dataclass(frozen=True, slots=True)
class ArmAwayTimer:
    """Call ``Floor.away_timer_fired`` at ``deadline`` (replaces any armed timer)."""

    deadline: float


@dataclass(frozen=True, slots=True)
class CancelAwayTimer:
    pass


@dataclass(frozen=True, slots=True)
class ArmWatchdog:
    """Call ``Floor.expire_due`` at ``deadline`` (replaces any armed watchdog)."""

    deadline: float


@dataclass(frozen=True, slots=True)
class CancelWatchdog:
    pass


@dataclass(frozen=True, slots=True)
class ObligationExpired:
    """The watchdog closed ``obligation``; the runtime should stop the work behind it."""

    obligation: Obligation


Effect: TypeAlias = (
    AgentStateChanged
    | UserStateChanged
    | ArmAwayTimer
    | CancelAwayTimer
    | ArmWatchdog
    | CancelWatchdog
    | ObligationExpired
)
