"""Run a scenario: build the session with the test kit, play the events on virtual time.

The session gets a ``ScriptedLLM`` with the scenario's replies, the scripted tools, a
``ScriptedTTS`` and a ``MemoryAudioOutput`` when the scenario has ``tts:``, and for a
voice scenario a ``MemoryAudioInput`` fed with silence and, at each ``speak`` event, a
tone that ``ScriptedVAD`` hears as speech and ``ScriptedSTT`` turns into the event's
``text``. Everything runs on ``VirtualTimeLoop``, so the run's result (``Simulation``)
is the same every time and a minute of conversation costs milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..models import AgentHandoff, ChatMessage, FunctionCall, FunctionCallOutput
from ..session import AgentSession
from ..testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateChange,
    StateTimeline,
)
from .agents import AgentFactory, script_of
from .clock import new_virtual_loop
from .scenario import Event, Scenario, ScenarioError

__all__ = ["Row", "Simulation", "simulate"]

logger = logging.getLogger("rejoinder")

FRAME = 0.02  # seconds of microphone audio per frame
CLOSE_BOUND = 30.0


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the simulation's log: the states after it, and what happened."""

    t: float
    agent: str
    user: str
    what: str


@dataclass
class Simulation:
    """What ``simulate`` saw: every state change up to ``end`` (virtual seconds), the
    printed rows, the final history, the errors, and the timeline's entries."""

    scenario: Scenario
    end: float
    initial: dict[str, str]
    changes: list[StateChange]
    """Every state change up to ``end`` (closing the session comes after)."""
    rows: list[Row]
    history: list[Any]
    final_agent: str
    errors: list[str]
    entries: list[dict[str, Any]]
    """The session timeline's entries when the session has one, else state entries."""
    wall_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    """What the loop reported (a task's exception nobody retrieved), and failed events."""


def simulate(
    scenario: Scenario,
    base_dir: str | Path = ".",
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = new_virtual_loop,
) -> Simulation:
    """Run ``scenario`` to its end on a fresh virtual-time loop. ``base_dir`` is where
    ``module:`` paths are relative to (the scenario file's folder). Raises
    ``ScenarioError`` when an agent module or class cannot be used."""
    agents = AgentFactory(scenario, Path(base_dir))
    agents.check()
    started = time.perf_counter()
    kept = _KeptLog()
    logger.addHandler(kept)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            result = runner.run(_Run(scenario, agents, kept).run())
    finally:
        logger.removeHandler(kept)
    result.wall_seconds = time.perf_counter() - started
    return result


# ------------------------------------------------------------------ one run


class _Run:
    def __init__(self, scenario: Scenario, agents: AgentFactory, kept: _KeptLog) -> None:
        self.scenario = scenario
        self.agents = agents
        self.kept = kept
        self.rows: list[Row] = []
        self.errors: list[str] = []
        self.problems: list[str] = []
        self.session: AgentSession[Any] | None = None
        self.scenario_entries: list[dict[str, Any]] = []

    def log(self, what: str) -> None:
        # The states as the session reports them now (it is the only source of them).
        session = self.session
        agent = session.agent_state if session is not None else "initializing"
        user = session.user_state if session is not None else "listening"
        self.rows.append(Row(self.now(), agent, user, what))

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    async def run(self) -> Simulation:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: self._problem(context))
        self.kept.sink = self
        scenario = self.scenario
        session = self._session()
        timeline = StateTimeline(session)
        self.session = session
        self._subscribe(session)
        mic = session.input.audio if scenario.voice else None
        await session.start(self.agents.main())
        self.log(f"session started with agent {session.current_agent.id}")
        work = [asyncio.create_task(self._play(session))]
        if isinstance(mic, MemoryAudioInput):
            work.append(asyncio.create_task(_feed(mic, scenario.events, scenario.end)))
        end = scenario.end
        await asyncio.sleep(max(0.0, end - loop.time()))
        changes = list(timeline.changes)
        history = list(session.history.items)
        final_agent = session.current_agent.id
        self.log("end of the scenario")
        for task in work:
            task.cancel()
        await asyncio.gather(*work, return_exceptions=True)
        try:
            await asyncio.wait_for(session.aclose(), CLOSE_BOUND)
        except TimeoutError:
            self.problems.append(f"the session did not close within {CLOSE_BOUND:g} s")
        self.kept.sink = None
        return Simulation(
            scenario=scenario,
            end=end,
            initial=dict(timeline.initial),
            changes=changes,
            rows=self.rows,
            history=history,
            final_agent=final_agent,
            errors=self.errors,
            entries=self._entries(session, timeline.initial, changes),
            problems=self.problems,
        )

    def _session(self) -> AgentSession[Any]:
        scenario = self.scenario
        voice = scenario.voice
        tts = scenario.tts
        stt = scenario.stt
        session: AgentSession[Any] = AgentSession(
            llm=ScriptedLLM(script_of(scenario.llm)),
            tts=ScriptedTTS(seconds_per_char=tts.seconds_per_char, latency=tts.latency)
            if tts is not None
            else None,
            stt=ScriptedSTT(
                [e.text or "" for e in scenario.events if e.speak is not None],
                latency=stt.latency if stt is not None else 0.0,
            )
            if voice
            else None,
            vad=ScriptedVAD() if voice else None,
            tools=self.agents.session_tools,
            **scenario.session.options(),
        )
        session.output.transcription = MemoryTextOutput()
        if tts is not None:
            session.output.audio = MemoryAudioOutput()
        if voice:
            session.input.audio = MemoryAudioInput(16000)
        return session

    def _subscribe(self, session: AgentSession[Any]) -> None:
        def agent_changed(ev: Any) -> None:
            self.log(f"agent {ev.old_state} → {ev.new_state}")

        def user_changed(ev: Any) -> None:
            self.log(f"user {ev.old_state} → {ev.new_state}")

        session.on("agent_state_changed", agent_changed)
        session.on("user_state_changed", user_changed)
        session.on("conversation_item_added", lambda ev: self.log(_describe_item(ev.item)))
        session.on("error", self._error)
        session.on(
            "user_turn_discarded",
            lambda ev: self.log(f'user turn "{ev.text}" discarded ({ev.reason})'),
        )
        session.on(
            "speculation",
            lambda ev: self.log(
                f"speculative reply {ev.event}" + (f" ({ev.reason})" if ev.reason else "")
            ),
        )
        session.on(
            "background_tool_finished",
            lambda ev: self.log(
                f"background tool {ev.name} finished" + (" with an error" if ev.is_error else "")
            ),
        )
        if self.scenario.voice:
            session.on(
                "user_input_transcribed",
                lambda ev: self.log(f'recognized "{ev.transcript}"') if ev.is_final else None,
            )

    def _error(self, ev: Any) -> None:
        text = f"error ({ev.source}): {type(ev.error).__name__}: {ev.error}"
        self.errors.append(f"t={self.now():.3f} {text}")
        self.log(text)

    def _problem(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        text = context.get("message", "")
        if exc is not None:
            text += f": {type(exc).__name__}: {exc}"
        self.problems.append(f"t={self.now():.3f} {text}")

    async def _play(self, session: AgentSession[Any]) -> None:
        loop = asyncio.get_running_loop()
        for event in sorted(self.scenario.events, key=lambda e: e.at):
            await asyncio.sleep(max(0.0, event.at - loop.time()))
            self.scenario_entries.append({"t": self.now(), "kind": "scenario", **_fields(event)})
            try:
                self._perform(session, event)
            except ScenarioError:
                raise
            except Exception as exc:
                text = f"event {event.action} at {event.at:g} failed: {type(exc).__name__}: {exc}"
                self.problems.append(text)
                self.log(text)

    def _perform(self, session: AgentSession[Any], event: Event) -> None:
        if event.say is not None:
            self.log(f'> user types "{event.say}"')
            session.generate_reply(user_input=event.say)
        elif event.speak is not None:
            self.log(f'> user speaks for {event.speak:g} s: "{event.text}"')
        elif event.interrupt is not None:
            self.log("> interrupt()")
            self._watch(session.interrupt(), "interrupt")
        elif event.handoff is not None:
            self.log(f"> update_agent({event.handoff})")
            self._watch(session.update_agent(self.agents.named(event.handoff)), "update_agent")
        elif event.dtmf is not None:
            self.log(f"> user presses {event.dtmf}")
            session.push_dtmf(event.dtmf)
        elif event.agent_say is not None:
            self.log(f'> say("{event.agent_say}")')
            session.say(event.agent_say, allow_interruptions=event.interruptible)

    def _watch(self, future: asyncio.Future[None], what: str) -> None:
        def done(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is not None:
                self.problems.append(f"{what} failed: {f.exception()!r}")

        future.add_done_callback(done)

    def _entries(
        self, session: AgentSession[Any], initial: dict[str, str], changes: list[StateChange]
    ) -> list[dict[str, Any]]:
        own = getattr(session, "timeline", None)
        if own is not None and hasattr(own, "entries"):
            entries: list[dict[str, Any]] = list(own.entries())
        else:
            entries = [
                {"t": 0.0, "kind": "agent_state", "state": initial["agent"], "old": None},
                {"t": 0.0, "kind": "user_state", "state": initial["user"], "old": None},
            ]
            entries += [
                {"t": c.at, "kind": f"{c.who}_state", "state": c.new, "old": c.old} for c in changes
            ]
        merged = entries + self.scenario_entries
        return sorted(merged, key=lambda e: float(e["t"]))  # stable: same-time order kept


async def _feed(mic: MemoryAudioInput, events: list[Event], end: float) -> None:
    """Microphone audio from 0 to ``end``: a tone during each ``speak``, silence else."""
    import numpy as np

    from ..models.audio import AudioFrame
    from ..testing import speech_frame

    spans = [(e.at, e.at + e.speak) for e in events if e.speak is not None]
    speech = speech_frame(FRAME, mic.sample_rate)
    quiet = AudioFrame(np.zeros(round(FRAME * mic.sample_rate), np.int16), mic.sample_rate)
    for i in range(round(end / FRAME)):
        t = i * FRAME + 1e-9
        await mic.push(speech if any(a <= t < b for a, b in spans) else quiet)


def _describe_item(item: Any) -> str:
    if isinstance(item, ChatMessage):
        cut = " (interrupted)" if item.interrupted else ""
        return f'{item.role}: "{item.content}"{cut}'
    if isinstance(item, FunctionCall):
        return f"tool call {item.name}({item.arguments})"
    if isinstance(item, FunctionCallOutput):
        error = " (error)" if item.is_error else ""
        return f'tool {item.name} returned "{item.output}"{error}'
    if isinstance(item, AgentHandoff):
        return f"handoff {item.old_agent_id} → {item.new_agent_id}"
    return f"item {type(item).__name__}"


def _fields(event: Event) -> dict[str, Any]:
    return {"event": event.action, **event.model_dump(exclude_none=True, exclude={"at"})}


class _KeptLog(logging.Handler):
    """The runtime's warnings, as rows of the log (and not on stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.sink: _Run | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.sink is not None:
            self.sink.log(f"log {record.levelname.lower()}: {record.getMessage()}")
