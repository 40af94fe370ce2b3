"""Sans-I/O core: obligations in, derived agent/user state and timer decisions out.

Imports nothing from asyncio, and from the rest of the package only ``_dataclass`` (the
dataclass decorator): it can be tested, and reasoned about, on its own.
"""

from .effects import (
    AgentState,
    AgentStateChanged,
    ArmAwayTimer,
    ArmWatchdog,
    CancelAwayTimer,
    CancelWatchdog,
    Effect,
    ObligationExpired,
    UserState,
    UserStateChanged,
)
from .floor import Floor, FloorError
from .kinds import KINDS, KindSpec, ObligationKind
from .obligation import SESSION_OWNER, Obligation, Phase

__all__ = [
    "KINDS",
    "SESSION_OWNER",
    "AgentState",
    "AgentStateChanged",
    "ArmAwayTimer",
    "ArmWatchdog",
    "CancelAwayTimer",
    "CancelWatchdog",
    "Effect",
    "Floor",
    "FloorError",
    "KindSpec",
    "Obligation",
    "ObligationExpired",
    "ObligationKind",
    "Phase",
    "UserState",
    "UserStateChanged",
]
