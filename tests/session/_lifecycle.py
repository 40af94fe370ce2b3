"""Checks shared by the randomized lifecycle tests (``test_lifecycle_random``,
``test_switch_random``): the floor-derived state after a step, the history's pairing of
tool calls and outputs, and an event-stream oracle that watches a whole session.

The oracle subscribes before ``start`` and judges every reported change as it happens:

* a ``listening`` edge is a promise that nothing is owed. So after one, the agent may
  only start ``thinking`` or ``speaking`` once something new has happened: a *cause*
  (a user input, an app call, a background tool's result landing, a watchdog closing
  what was stuck). Causes are logged in the same ordered log as the state changes, so
  "after" is exact, not just "at the same time or later";
* a ``speaking → listening → thinking/speaking`` pulse at one instant is reported on
  its own, unless a cause happened at exactly that instant;
* the user is never ``away`` while an obligation of a live owner is open, nor while
  work the test itself tracks (a tool of the current agent, its ``on_enter``, an
  ``update_agent`` switch in progress) runs: the second check does not trust the floor;
* a reply paused because the user may be interrupting it is still owed: no ``listening``
  until it is interrupted, and a ``listening`` edge is final for it, it never resumes
  (``_voice.PauseWatch``, which watches the speaker, not the floor). A user turn said
  into the microphone is a cause once it is recorded; a noise is none.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, seed, settings

import rejoinder as rj
from rejoinder.floor import KINDS, ObligationKind

from .._virtual_time import virtual_loop
from ._voice import PauseWatch

HANDOFF_WATCHDOG = KINDS[ObligationKind.HANDOFF].watchdog
TRACE = os.environ.get("REJOINDER_ORACLE_TRACE") == "1"
"""Log the floor's open obligations at every agent state change (for reading a failure)."""


# ------------------------------------------------------------ running sequences


RUN = 5000
"""The most sequences one hypothesis run makes. A run keeps what it learned of each of
its sequences until it ends (the choice tree, a cache of up to 10,000 results, every
sequence's statistics: about 15 KB a sequence here), so the 100,000 of ``make stress``
as one run held gigabytes."""
PART = 25_000
"""The most sequences one test item runs, as a chain of runs: more make several items
(``[part 2 of 4]``), which ``pytest -n 2`` spreads over the cores."""

_passed: set[bytes] | None = None
"""While a part runs: the inputs of the sequences it passed (see ``stress_settings``)."""


def stress_settings(*, default_examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings for a randomized sequence test.

    ``REJOINDER_STRESS_EXAMPLES`` overrides the example count (``make stress``). The
    sequences are derandomized (the same ones every run, so a failure reproduces);
    ``REJOINDER_STRESS_SEED`` explores other ones, reproducibly. No deadline (a
    sequence's wall time varies with the machine, its virtual time does not), no
    example database (nothing to replay between runs of a derandomized test).

    Up to ``RUN`` sequences (what CI runs) are one hypothesis run. More are parts of up to
    ``PART``, each a chain of runs of up to ``RUN`` with seeds of their own, in which a run
    skips (``assume``) the inputs an earlier one passed: one run never draws the same
    choices twice, but separate runs draw the likeliest sequences again and again (20
    runs of 5,000 held 12% fewer distinct ones than one run of 100,000; a part's are all
    distinct)."""
    examples = int(os.environ.get("REJOINDER_STRESS_EXAMPLES", default_examples))
    chosen = os.environ.get("REJOINDER_STRESS_SEED")
    runs = max(1, -(-examples // RUN))
    parts = -(-runs // (PART // RUN))

    def apply(test: Any) -> Any:
        configured = settings(
            max_examples=-(-examples // runs),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
            # the first draws of a chained run are the likeliest: mostly skipped
            + ([HealthCheck.filter_too_much] if runs > 1 else []),
            derandomize=chosen is None,
            database=None,
            print_blob=True,
        )(test)
        if runs == 1:
            return configured if chosen is None else seed(int(chosen))(configured)

        def run_part(stress_part: int) -> None:
            global _passed
            _passed = set()
            try:
                for k in range(stress_part, runs, parts):
                    run_seed = f"{chosen or 'derandomized'} run {k + 1} of {runs}"
                    try:
                        seed(run_seed)(configured)()
                    except BaseException as exc:
                        exc.add_note(f"in the hypothesis run seeded {run_seed!r}")
                        raise
            finally:
                _passed = None

        # pytest collects it under the test's name (not through __wrapped__: its
        # signature is the part's, not the drawn arguments')
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(run_part, name, getattr(test, name))
        ids = [f"part {p + 1} of {parts}" for p in range(parts)]
        return pytest.mark.parametrize("stress_part", range(parts), ids=ids)(run_part)

    return apply


def _inputs(scenario: Callable[[], Coroutine[Any, Any, None]]) -> bytes:
    """What a sequence was drawn as: the values the test's lambda closes over."""
    drawn = [cell.cell_contents for cell in scenario.__closure__ or ()]
    return hashlib.blake2b(repr(drawn).encode(), digest_size=16).digest()


class Progress:
    """With ``REJOINDER_STRESS_PROGRESS=N``: sequences run and sequences/s, every N."""

    every = int(os.environ.get("REJOINDER_STRESS_PROGRESS", "0"))
    count = 0
    started = time.monotonic()
    inside = 0.0
    """Seconds spent running the sequences themselves (the rest is hypothesis)."""

    @classmethod
    def tick(cls, spent: float) -> None:
        cls.count += 1
        cls.inside += spent
        if cls.every and cls.count % cls.every == 0:
            elapsed = time.monotonic() - cls.started
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            print(
                f"[stress{f' {worker}' if worker else ''}] {cls.count} sequences in "
                f"{elapsed:.0f} s: {cls.count / elapsed:.1f}/s ({cls.inside:.0f} s running "
                f"them), RSS {_rss_mb()}",
                file=sys.__stderr__,
                flush=True,
            )


def _rss_mb() -> str:
    """The process's resident memory now (Linux), to see that it stays flat."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return "unknown"
    return f"{pages * os.sysconf('SC_PAGE_SIZE') / 2**20:.0f} MB"


class KeptLog(logging.Handler):
    """The session's log lines of one sequence, kept for its failure report only: over
    100,000 sequences pytest's log capture would hold millions (and slow down)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def run_on_virtual_time(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run one sequence on a fresh looptime loop. Fails on anything the loop reports (a
    task's or a future's exception nobody retrieved); the session's log goes into the
    failure report instead of pytest's capture."""
    passed, inputs = _passed, b""
    if passed is not None:
        inputs = _inputs(scenario)
        assume(inputs not in passed)  # an earlier run of this part passed this sequence
    started = time.monotonic()
    logger = logging.getLogger("rejoinder")
    kept, propagate = KeptLog(), logger.propagate
    logger.addHandler(kept)
    logger.propagate = False
    try:
        _run_loop(scenario)
        if passed is not None:
            passed.add(inputs)
    except BaseException as exc:
        exc.add_note("the session's log:\n" + "\n".join(kept.lines[-40:]))
        raise
    finally:
        logger.removeHandler(kept)
        logger.propagate = propagate
        Progress.tick(time.monotonic() - started)


FULL_COLLECTION_EVERY = 1000
"""Sequences between two collections of everything (see ``_run_loop``)."""


def _run_loop(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    # Garbage made since the last sequence (hypothesis leaves 22 KB of cycles drawing
    # each one) is collected before the freeze: frozen, then unfrozen into the oldest
    # generation, it is skipped by the collection below and seldom reached by an automatic
    # one, so it piled up. A young collection takes most of it; a full one every
    # FULL_COLLECTION_EVERY sequences takes what was promoted first.
    gc.collect(2 if Progress.count % FULL_COLLECTION_EVERY == 0 else 1)
    gc.freeze()  # what exists now is not this sequence's: the collection below skips it
    loop = virtual_loop()
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: problems.append(context))
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 3600))
    finally:
        loop.close()
        del loop  # its cycles are garbage now: collected below, not frozen with the next
        # A future whose exception nobody retrieved is reported when it is collected:
        # collect now, so the report belongs to this sequence (and the result is stable).
        gc.collect()
        gc.unfreeze()
    assert not problems, problems


# ------------------------------------------------------------------ checks


def check_floor(session: rj.AgentSession[Any]) -> None:
    """The reported state is the one the floor's facts give: speaking while un-paused
    output is audible, thinking while a reply is paused or a live owner owes one."""
    floor = session._turn_state.floor
    open_obs = floor.open_obligations()
    live = [ob for ob in open_obs if floor.is_live(ob.owner)]
    paused = [ob for ob in open_obs if ob.yielded]
    if any(ob.audible and not ob.yielded for ob in open_obs):
        expected = "speaking"
    elif paused or any(ob.committed for ob in live):
        expected = "thinking"
    else:
        expected = "listening"
    assert session.agent_state == expected, (session.agent_state, open_obs)
    if live or paused:
        assert session.user_state != "away", open_obs


def check_history(history: rj.ChatContext) -> None:
    ids = Counter(item.id for item in history.items)
    assert all(n == 1 for n in ids.values()), "an item was recorded twice"
    calls = [i.call_id for i in history.items if isinstance(i, rj.FunctionCall)]
    outputs = [i.call_id for i in history.items if isinstance(i, rj.FunctionCallOutput)]
    assert len(calls) == len(set(calls)), "a call id repeats"
    assert Counter(outputs) == Counter(calls), (calls, outputs)
    seen: set[str] = set()
    for item in history.items:
        if isinstance(item, rj.FunctionCall):
            seen.add(item.call_id)
        elif isinstance(item, rj.FunctionCallOutput):
            assert item.call_id in seen, f"output before its call: {item.call_id}"


def current_agent(session: rj.AgentSession[Any]) -> rj.Agent | None:
    try:
        return session.current_agent
    except RuntimeError:  # not started, or closed
        return None


class Oracle:
    """Watches one session's event stream; ``check()`` raises on the first broken promise.

    Given to the session as its ``userdata``, so tools and hooks can log causes
    (``cause``) and the work they do (``working``)."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.violations: list[str] = []
        self.speeches: list[rj.SpeechHandle] = []
        self.errors: list[rj.ErrorEvent] = []
        self.items_added = 0
        self.switches: list[tuple[asyncio.Future[None], rj.Agent]] = []
        """``update_agent`` futures and their agents: a switch in progress is work for the
        user, until its agent's on_enter waits on a task (the task is current then)."""
        self.excused_pulses: list[str] = []
        """The cause of each 0 ms speaking -> listening -> thinking/speaking pulse that
        was allowed because something new happened at that same instant."""
        self.interrupts: list[asyncio.Future[None]] = []
        """``interrupt()`` futures, awaited or not: each resolves within the bound."""
        self._entered: dict[int, rj.Agent] = {}
        self._speech_agents: dict[str, rj.Agent | None] = {}
        self._callers: dict[int, rj.Agent | None] = {}
        self._session: rj.AgentSession[Any] | None = None
        self._work: dict[object, tuple[rj.Agent | None, str, float]] = {}
        self._listening_at: tuple[float, int] | None = None
        """The last ``listening`` edge (time, log index) not yet followed by a cause."""
        self._caused = True
        self._last_cause_at: float | None = None
        self._last_cause = ""
        self._previous: rj.AgentStateChangedEvent | None = None
        self.pauses = PauseWatch(self._note)
        """Judges every pause of a ``_voice.WatchedSpeaker`` given to the session."""

    # ------------------------------------------------------------ wiring

    def attach(self, session: rj.AgentSession[Any]) -> None:
        self._session = session
        session.on("agent_state_changed", self._agent_changed)
        session.on("user_state_changed", self._user_changed)
        session.on("speech_created", self._speech_created)
        session.on("conversation_item_added", self._item_added)
        session.on("error", self._error)
        self.pauses.attach(session)  # after the state log: its notes follow the change

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _note(self, text: str) -> int:
        self.log.append(f"{self._now():9.3f} {text}")
        return len(self.log) - 1

    def describe(self, last: int = 60) -> str:
        return "\n".join(self.log[-last:])

    def _violate(self, text: str) -> None:
        self.violations.append(text)
        self._note(f"!!! {text}")

    def check(self) -> None:
        assert not self.violations, self.violations[0] + "\n" + self.describe()
        self.pauses.check(self.describe)

    # ------------------------------------------------------------ causes

    def cause(self, what: str) -> None:
        """Something new happened that may legitimately make the agent owe a reply."""
        self._note(f"cause: {what}")
        self._caused = True
        self._last_cause_at = self._now()
        self._last_cause = what

    @contextmanager
    def working(self, agent: rj.Agent | None, what: str) -> Iterator[None]:
        """``agent`` works for the user while the block runs (a tool, an on_enter);
        None: an agent that has left."""
        token = object()
        self._work[token] = (agent, what, self._now())
        if what.endswith("on_enter"):
            self._entered[id(agent)] = agent
        try:
            yield
        finally:
            del self._work[token]

    @contextmanager
    def in_background(self, agent: rj.Agent | None, what: str) -> Iterator[None]:
        """Work released to the background: when it returns or raises (not when it is
        cancelled), its result lands, which may make a reply owed anew."""
        with self.working(agent, what):
            try:
                yield
            except asyncio.CancelledError:
                raise
            except BaseException:
                self.cause(f"{what} lands (raised)")
                raise
            self.cause(f"{what} lands")

    # ------------------------------------------------------------ events

    def _agent_changed(self, ev: rj.AgentStateChangedEvent) -> None:
        index = self._note(f"agent {ev.old_state} -> {ev.new_state}")
        if TRACE and self._session is not None:
            floor = self._session._turn_state.floor
            self._note(f"    current={floor.current_owner} open={floor.open_obligations()}")
        previous, self._previous = self._previous, ev
        if ev.new_state == "listening":
            self._listening_at = (ev.created_at, index)
            self._caused = False
            self._check_not_entering()
            return
        if ev.new_state not in ("thinking", "speaking"):
            return
        if self._listening_at is not None and not self._caused:
            at, _ = self._listening_at
            self._violate(
                f"listening at {at:.3f}, then {ev.new_state} at {ev.created_at:.3f} "
                "with no new cause in between (a false listening)"
            )
        if (
            previous is not None
            and previous.old_state == "speaking"
            and previous.new_state == "listening"
            and previous.created_at == ev.created_at
        ):
            if self._last_cause_at != ev.created_at:
                self._violate(f"0 ms pulse speaking -> listening -> {ev.new_state}")
            else:
                # Allowed (something new happened at that instant), but a client sees a
                # flicker: counted, for the statistics.
                self.excused_pulses.append(self._last_cause)
                self._note(f"excused 0 ms pulse ({self._last_cause} at the same instant)")
        self._listening_at = None

    def _current_agent(self) -> rj.Agent | None:
        return None if self._session is None else current_agent(self._session)

    # ------------------------------------------------------- the agent stack

    def owner_of(self, speech: rj.SpeechHandle) -> rj.Agent | None:
        """The agent a speech was created on (the current one: a user turn, a say)."""
        return self._speech_agents.get(speech.id)

    def awaiting(self, caller: rj.Agent | None, task: rj.AgentTask[Any]) -> None:
        """``caller``'s tool or hook is about to await ``task``."""
        self._callers[id(task)] = caller

    def in_stack(self, agent: rj.Agent | None) -> bool:
        """``agent`` is current, or paused under the current task (it has not left)."""
        at = self._current_agent()
        while at is not None:
            if at is agent:
                return True
            at = self._callers.get(id(at))
        return False

    def _check_not_entering(self) -> None:
        """While the current agent's on_enter runs it reports thinking, up to the
        ``handoff`` watchdog (an on_enter may wait for the user through a task)."""
        current = self._current_agent()
        now = self._now()
        entering = [
            what
            for agent, what, since in self._work.values()
            if agent is current and what.endswith("on_enter") and now - since < HANDOFF_WATCHDOG
        ]
        if entering:
            self._violate(f"listening while {entering[0]} runs")

    def _user_changed(self, ev: rj.UserStateChangedEvent) -> None:
        self._note(f"user {ev.old_state} -> {ev.new_state}")
        session = self._session
        if ev.new_state != "away" or session is None:
            return
        floor = session._turn_state.floor
        live = [ob for ob in floor.open_obligations() if floor.is_live(ob.owner)]
        if live:
            self._violate(f"away while {live} are open")
        if session.agent_state != "listening":
            self._violate(f"away while the agent is {session.agent_state}")
        current = self._current_agent()
        busy = [what for agent, what, _ in self._work.values() if agent is current]
        if busy:
            self._violate(f"away while {busy} of the current agent runs")
        switching = [
            agent.id
            for switch, agent in self.switches
            if not switch.done() and not (id(agent) in self._entered and agent is not current)
        ]
        if switching:
            self._violate(f"away while the switch to {switching} is in progress")

    def _speech_created(self, ev: rj.SpeechCreatedEvent) -> None:
        self._note(f"speech {ev.source} {ev.speech_handle.id}")
        self.speeches.append(ev.speech_handle)
        self._speech_agents[ev.speech_handle.id] = self._current_agent()

    def _item_added(self, ev: Any) -> None:
        self.items_added += 1
        item = ev.item
        text = (
            getattr(item, "content", None)
            or getattr(item, "name", None)
            or getattr(item, "new_agent_id", None)
            or ""
        )
        self._note(f"item {type(item).__name__} {text!r:.40}")
        if isinstance(item, rj.ChatMessage) and item.role == "user":
            # A user turn (typed, or said into the microphone) is recorded: something
            # new to answer. A noise or a discarded turn records nothing.
            self.cause("user turn recorded")

    def _error(self, ev: rj.ErrorEvent) -> None:
        self._note(f"error {ev.source} recoverable={ev.recoverable}: {ev.error!r:.80}")
        self.errors.append(ev)
        if ev.source == "watchdog":
            # What was stuck is closed and the work behind it stopped: what follows
            # (a caller resuming, a deferred reply) is owed anew.
            self.cause("watchdog")
