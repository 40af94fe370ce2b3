"""The scenario file of ``rejoinder simulate``: a pydantic model of the YAML.

A scenario names the agent (scripted inline, or a class in the user's own module), what
the scripted model answers, the tools of a scripted agent, the voice (if any), a timeline
of user actions, and what must hold. Every key is checked: an unknown key, a wrong type or
a missing value is a ``ScenarioError`` whose message names the key and the line of the
problem, so a bad file never gets as far as a session. See ``examples/scenarios/``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AgentSpec",
    "Check",
    "Event",
    "Scenario",
    "ScenarioError",
    "ScriptedAgent",
    "SessionSpec",
    "StateAt",
    "Step",
    "TTSSpec",
    "ToolSpec",
]

AGENT_STATES = ("initializing", "listening", "thinking", "speaking")
USER_STATES = ("listening", "speaking", "away")

AgentStateName = Literal["initializing", "listening", "thinking", "speaking"]
UserStateName = Literal["listening", "speaking", "away"]


class ScenarioError(Exception):
    """The scenario cannot be run; the message says what to fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ------------------------------------------------------------------ agents and tools


class ScriptedAgent(_Strict):
    instructions: str = "You are a helpful assistant."
    id: str | None = None
    tools: list[str] | None = None
    """Names from ``tools:`` this agent has (default: all of them)."""


class AgentSpec(_Strict):
    """``scripted: {...}``, or ``module: agent.py`` with ``class: Name`` (and ``args``)."""

    scripted: ScriptedAgent | None = None
    module: str | None = None
    class_: str | None = Field(default=None, alias="class")
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> AgentSpec:
        if (self.scripted is None) == (self.module is None):
            raise ValueError("give either `scripted: {...}` or `module: FILE.py` with `class:`")
        if self.module is not None and not self.class_:
            raise ValueError("`module:` needs `class:`, the name of the agent class in it")
        if self.scripted is not None and (self.class_ is not None or self.args):
            raise ValueError("`class:` and `args:` go with `module:`, not `scripted:`")
        return self


class ToolSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$")
    description: str = "A scripted tool."
    parameters: dict[str, str] = Field(default_factory=dict)
    """Parameter name → description (every parameter is a string to the model; any
    arguments the model passes are accepted)."""
    result: str = "done"
    """What the tool returns; ``{name}`` is replaced with the argument ``name``."""
    duration: float = Field(default=0.0, ge=0)
    """Seconds the tool works before it returns."""
    background: bool = False
    """Release the tool to the background at once (``await ctx.update(update)``): the
    model gets ``update`` now, ``result`` becomes a deferred reply after ``duration``."""
    update: str = "started; the result will follow"
    reply_required: bool = True
    error: str | None = None
    """Fail with this ``ToolError`` message instead of returning ``result``."""
    handoff: str | None = None
    """Return the agent of this name (from ``agents:``): a handoff."""


# ------------------------------------------------------------------ the model's script


class Step(_Strict):
    """One step of a scripted reply (a plain string in YAML is a text step)."""

    text: str | None = None
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    delay: float | None = Field(default=None, ge=0)
    fail: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"text": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_step(self) -> Step:
        given = [k for k in ("text", "tool", "delay", "fail") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "a step is text, `{tool: NAME, args: {...}}`, `{delay: SECONDS}` or "
                f"`{{fail: MESSAGE}}`; got {given or 'nothing'}"
            )
        if self.args and self.tool is None:
            raise ValueError("`args:` goes with `tool:`")
        return self


class TTSSpec(_Strict):
    seconds_per_char: float = Field(default=0.05, gt=0)
    latency: float = Field(default=0.0, ge=0)


class STTSpec(_Strict):
    latency: float = Field(default=0.0, ge=0)


class SessionSpec(_Strict):
    """``AgentSession`` options; what is not given keeps the session's default."""

    user_away_timeout: float | None = Field(default=15.0, gt=0)
    preemptive_generation: bool | None = None
    allow_interruptions: bool | None = None
    min_interruption_duration: float | None = Field(default=None, ge=0)
    min_endpointing_delay: float | None = Field(default=None, ge=0)
    max_endpointing_delay: float | None = Field(default=None, ge=0)
    false_interruption_timeout: float | None = Field(default=None, ge=0)
    resume_false_interruption: bool | None = None
    min_interruption_words: int | None = Field(default=None, ge=0)
    max_tool_steps: int | None = Field(default=None, ge=0)
    close_timeout: float | None = Field(default=None, gt=0)
    answer_timeout: float | None = Field(default=None, gt=0)
    obligation_timeouts: dict[str, float] | None = None

    def options(self) -> dict[str, Any]:
        given = self.model_dump(exclude_none=True)
        given["user_away_timeout"] = self.user_away_timeout  # None disables it
        return given


# ------------------------------------------------------------------ the user's actions

_ACTIONS = ("say", "speak", "interrupt", "handoff", "dtmf", "agent_say")


class Event(_Strict):
    """``at`` seconds after the start, one action."""

    at: float = Field(ge=0)
    say: str | None = None
    """Typed user input (``session.generate_reply(user_input=...)``)."""
    speak: float | None = Field(default=None, gt=0)
    """The user speaks for this many seconds into the microphone; ``text`` is what the
    recognizer hears."""
    text: str | None = None
    interrupt: Literal[True] | None = None
    handoff: str | None = None
    """``session.update_agent()`` to the agent of this name."""
    dtmf: str | None = Field(default=None, pattern=r"^[0-9*#A-Da-d]+$")
    agent_say: str | None = None
    """The application makes the agent say this (``session.say``)."""
    interruptible: bool | None = None

    @model_validator(mode="after")
    def _one_action(self) -> Event:
        given = [k for k in _ACTIONS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"an event has `at:` and exactly one of {', '.join(_ACTIONS)}; "
                f"got {given or 'none'}"
            )
        if self.text is not None and self.speak is None:
            raise ValueError("`text:` goes with `speak:` (what the recognizer hears)")
        if self.speak is not None and self.text is None:
            raise ValueError("`speak:` needs `text:`, what the recognizer hears")
        if self.interruptible is not None and self.agent_say is None:
            raise ValueError("`interruptible:` goes with `agent_say:`")
        return self

    @property
    def action(self) -> str:
        return next(k for k in _ACTIONS if getattr(self, k) is not None)


# ------------------------------------------------------------------ what must hold


class StateAt(_Strict):
    t: float = Field(ge=0)
    agent: AgentStateName | None = None
    user: UserStateName | None = None

    @model_validator(mode="after")
    def _something(self) -> StateAt:
        if self.agent is None and self.user is None:
            raise ValueError("`state_at:` needs `agent:` or `user:` (or both)")
        return self


class FinalState(_Strict):
    agent: AgentStateName | None = None
    user: UserStateName | None = None


_CHECKS = ("never", "state_at", "final", "history_contains", "final_agent", "no_errors")


class Check(_Strict):
    """One assertion: exactly one of the keys in ``_CHECKS`` (``between``/``who`` and
    ``role`` qualify ``never`` and ``history_contains``)."""

    never: str | None = None
    between: tuple[float, float] | None = None
    who: Literal["agent", "user"] | None = None
    state_at: StateAt | None = None
    final: FinalState | None = None
    history_contains: str | None = None
    role: Literal["user", "assistant", "tool"] | None = None
    final_agent: str | None = None
    no_errors: Literal[True] | None = None

    @field_validator("final", mode="before")
    @classmethod
    def _final_text(cls, value: Any) -> Any:
        return {"agent": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_check(self) -> Check:
        given = [k for k in _CHECKS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"a check is exactly one of {', '.join(_CHECKS)}; got {given or 'none'}"
            )
        if (self.between is not None or self.who is not None) and self.never is None:
            raise ValueError("`between:` and `who:` go with `never:`")
        if self.role is not None and self.history_contains is None:
            raise ValueError("`role:` goes with `history_contains:`")
        if self.never is not None:
            states = USER_STATES if self.watched == "user" else AGENT_STATES
            if self.never not in states:
                raise ValueError(
                    f"`never: {self.never}`: the {self.watched}'s states are {', '.join(states)}"
                )
        if self.between is not None and self.between[0] > self.between[1]:
            raise ValueError(f"`between: {list(self.between)}` ends before it starts")
        return self

    @property
    def watched(self) -> Literal["agent", "user"]:
        """Whose state ``never`` is about: ``who``, else the user for ``away``."""
        if self.who is not None:
            return self.who
        return "user" if self.never == "away" else "agent"


# ------------------------------------------------------------------ the scenario


class Scenario(_Strict):
    """A scenario file, checked: the agent (scripted, or a class of your own), the
    model's replies, the tools, the speech models, the session's options, the timed
    events, how long to run (``until``) and what to check (``expect``).
    ``examples/scenarios/README.md`` lists every key."""

    name: str | None = None
    description: str | None = None
    agent: AgentSpec = Field(default_factory=lambda: AgentSpec(scripted=ScriptedAgent()))
    agents: dict[str, AgentSpec] = Field(default_factory=dict)
    """Other agents, by name, for ``handoff:`` events and tools."""
    llm: list[list[Step]] = Field(default_factory=list)
    """The model's replies, one per model call, in order."""
    tools: list[ToolSpec] = Field(default_factory=list)
    tts: TTSSpec | None = None
    """With a TTS the agent speaks audio (``speaking`` while it is audible); without,
    replies are text only."""
    stt: STTSpec | None = None
    session: SessionSpec = Field(default_factory=SessionSpec)
    events: list[Event] = Field(default_factory=list)
    until: float | None = Field(default=None, gt=0)
    """The end of the simulation (default: 30 s after the last event)."""
    expect: list[Check] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [t.name for t in self.tools]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"tools: {doubled} defined twice")
        spec_tools = [self.agent.scripted] + [a.scripted for a in self.agents.values()]
        for scripted in spec_tools:
            for name in (scripted.tools or []) if scripted is not None else []:
                if name not in names:
                    raise ValueError(f"agent tool {name!r} is not in `tools:`")
        for tool in self.tools:
            if tool.handoff is not None and tool.handoff not in self.agents:
                raise ValueError(
                    f"tool {tool.name!r}: handoff to {tool.handoff!r}, not in `agents:`"
                )
        module_agent = self.agent.module is not None
        for event in self.events:
            if event.handoff is not None and event.handoff not in self.agents and not module_agent:
                raise ValueError(
                    f"event at {event.at:g}: handoff to {event.handoff!r}, "
                    "which is not in `agents:`"
                )
        if self.until is not None and self.events and self.until < self.last_event:
            raise ValueError(
                f"`until: {self.until:g}` is before the last event ({self.last_event:g})"
            )
        return self

    @property
    def last_event(self) -> float:
        return max((e.at + (e.speak or 0.0) for e in self.events), default=0.0)

    @property
    def end(self) -> float:
        return self.until if self.until is not None else self.last_event + 30.0

    @property
    def voice(self) -> bool:
        """The user speaks into a microphone (VAD, STT) rather than typing."""
        return self.stt is not None or any(e.speak is not None for e in self.events)
