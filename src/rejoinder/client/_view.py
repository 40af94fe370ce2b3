"""What the server's messages amount to: the agent's and the user's state, the
conversation's turns as a client shows them, the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..io.protocol import (
    AgentStateMessage,
    ErrorMessage,
    ServerMessage,
    TranscriptMessage,
    UserStateMessage,
)

__all__ = ["AgentState", "Turn", "UserState", "View"]

AgentState = Literal["initializing", "listening", "thinking", "speaking"]
"""The agent's states, as the server's ``agent_state`` messages name them."""
UserState = Literal["listening", "speaking", "away"]
"""The user's states, as the server's ``user_state`` messages name them."""
AGENT_STATES: frozenset[str] = frozenset(("initializing", "listening", "thinking", "speaking"))


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of the conversation as a client shows it: its whole text so far (interim
    until ``final``). A final agent turn is what the listener heard; ``interrupted`` when
    it was cut short."""

    role: Literal["user", "agent"]
    text: str
    final: bool
    interrupted: bool = False


@dataclass(slots=True)
class View:
    """Folds server messages into state, in the order they arrive."""

    agent_state: AgentState | None = None
    user_state: UserState | None = None
    agent_states: list[tuple[float, AgentState]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    errors: list[ErrorMessage] = field(default_factory=list)
    _open: dict[str, int] = field(default_factory=dict)

    def apply(self, message: ServerMessage, at: float) -> None:
        # A client's copy of what the server reported (the server derives its states from
        # its floor); nothing here decides a state, it only remembers the last one said.
        if isinstance(message, AgentStateMessage):
            self.agent_state = message.state
            self.agent_states.append((at, message.state))
        elif isinstance(message, UserStateMessage):
            self.user_state = message.state
        elif isinstance(message, TranscriptMessage):
            self._transcript(message)
        elif isinstance(message, ErrorMessage):
            self.errors.append(message)

    def _transcript(self, message: TranscriptMessage) -> None:
        # Each message carries the turn's whole text: it replaces the open turn of its
        # role (user and agent turns can be open at once, in a barge-in).
        turn = Turn(message.role, message.text, message.final, bool(message.interrupted))
        index = self._open.get(message.role)
        if index is None:
            index = len(self.turns)
            self.turns.append(turn)
        else:
            self.turns[index] = turn
        if message.final:
            self._open.pop(message.role, None)
        else:
            self._open[message.role] = index
