"""Shared fixtures: sessions on virtual time (looptime) with scripted models."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings

import rejoinder as rj
from rejoinder.testing import MemoryTextOutput, ScriptedLLM, StateTimeline

from ._virtual_time import NOOP_CYCLES

# `make test` (so CI) runs under this profile: every randomized test draws the same
# examples on every run, so a red run is a failure anyone can reproduce, never a new draw
# turning up on the day. Plain `pytest` draws new examples each run, and `make stress`
# (REJOINDER_STRESS_SEED) explores further: that is where new failures are meant to show.
# No deadline either: on a loaded 2-core runner one example can take 300 ms for no fault
# of its own, and a deadline then fails the run ("Unreliable test timings").
settings.register_profile("ci", derandomize=True, database=None, deadline=None)


@dataclass
class Harness:
    session: rj.AgentSession[Any]
    timeline: StateTimeline
    output: MemoryTextOutput
    llm: ScriptedLLM | None
    errors: list[rj.ErrorEvent] = field(default_factory=list)


MakeSession = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_session() -> AsyncIterator[MakeSession]:
    """Start a session (timeline attached before start) and close it after the test."""
    harnesses: list[Harness] = []

    async def factory(
        llm: ScriptedLLM | None = None, agent: rj.Agent | None = None, **options: Any
    ) -> Harness:
        options.setdefault("user_away_timeout", None)
        session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, **options)
        output = MemoryTextOutput()
        session.output.transcription = output
        harness = Harness(session, StateTimeline(session), output, llm)
        session.on("error", harness.errors.append)
        await session.start(agent or rj.Agent(instructions="You are a test agent."))
        harnesses.append(harness)
        return harness

    yield factory
    for harness in harnesses:
        await harness.session.aclose()


# -- sharing the tests out over pytest-xdist's workers (make test: pytest -n N) -------------
#
# `-n N` alone (xdist's "load") hands tests out a few at a time, in file order. Here a run
# does much the same with two differences (``SuiteScheduling``):
#
# - some tests go out together, as one unit: every browser test (tests/**/*_browser.py,
#   one Chromium at a time, playing its fake microphone and its agent's audio in real
#   time: several at once, with three workers on two cores, starved the pages' playback
#   reports), and each
#   module of ``SHARED_PER_MODULE``, whose tests share a costly module-scoped fixture that
#   each worker would make again;
# - the longest units go first, by the durations the last run recorded in pytest's cache
#   (``DURATIONS_KEY``), so that no long test starts last while the other workers idle.
#   (The first run, or one without the cache, sends the largest units first.)
#
# xdist's own ``--dist loadgroup`` would group by marks, but it does not group on pytest 9.2
# (pytest-xdist issue #1386: the group suffix it writes into the node id is ignored).

SHARED_PER_MODULE = frozenset(
    {
        "tests/outside/test_protocol_clients.py",  # a `rejoinder dev` process
        "tests/mcp/test_mcp_servers.py",  # an MCP server process
        "tests/providers/test_local_whisper.py",  # Whisper models
        "tests/providers/test_local_multilingual.py",
        "tests/providers/test_local_pocketsphinx.py",
        "tests/providers/test_local_smart_turn.py",  # the Smart Turn model
        "tests/providers/test_onset_classifier.py",
    }
)
BROWSER_UNIT = "browser"
DURATIONS_KEY = "rejoinder/durations"
UNKNOWN_SECONDS = 0.2
"""What a test not in the last run's durations is taken to last."""


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: the browser tests', its module's, or its own."""
    path = nodeid.split("::", 1)[0]
    if path.endswith("_browser.py"):
        return BROWSER_UNIT
    if path in SHARED_PER_MODULE:
        return path
    return nodeid


class DurationsRecorder:
    """On the process that reports (the controller under xdist): each test's seconds
    (setup, call and teardown), merged into pytest's cache when the run ends."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(session.config, "cache", None)
        if cache is None or not self.seconds:
            return
        recorded = dict(cache.get(DURATIONS_KEY, {}))
        recorded.update({nodeid: round(s, 3) for nodeid, s in self.seconds.items()})
        cache.set(DURATIONS_KEY, recorded)


class Scheduling:
    """The plugin that gives xdist its scheduler (registered only when xdist runs: with
    ``-p no:xdist`` its hook would be unknown)."""

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """``-n N`` (xdist's default ``--dist load``): ``SuiteScheduling``; any other
        ``--dist`` is xdist's."""
        if config.getvalue("dist") != "load":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class SuiteScheduling(LoadScopeScheduling):
            """xdist's scope scheduling with ``work_unit`` as the scope (most tests are a
            unit of their own), the units sent longest first."""

            def __init__(self, config: pytest.Config, log: Any = None) -> None:
                super().__init__(config, log)
                cache = getattr(config, "cache", None)
                self.recorded: dict[str, float] = (
                    dict(cache.get(DURATIONS_KEY, {})) if cache else {}
                )
                self.ordered = False

            def _split_scope(self, nodeid: str) -> str:
                return work_unit(nodeid)

            def _assign_work_unit(self, node: Any) -> None:
                if not self.ordered:  # the queue is complete when the first unit goes out
                    self.ordered = True
                    units = sorted(self.workqueue.items(), key=lambda u: -self.seconds(u[1]))
                    self.workqueue.clear()
                    self.workqueue.update(units)
                super()._assign_work_unit(node)

            def seconds(self, nodeids: dict[str, bool]) -> float:
                return sum(self.recorded.get(nodeid, UNKNOWN_SECONDS) for nodeid in nodeids)

        return SuiteScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the process that reports, not an xdist worker
        config.pluginmanager.register(DurationsRecorder(), "rejoinder-durations")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(Scheduling(), "rejoinder-scheduling")


def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    # No idle cycles before virtual time jumps (tests/_virtual_time.py says why). The mark
    # is the session's, so a module's or a test's own looptime mark overrides it.
    session.add_marker(pytest.mark.looptime(noop_cycles=NOOP_CYCLES))
