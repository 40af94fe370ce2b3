"""LoadGauge and the gate: sessions are admitted by the process's measured CPU load, a
full server says so (``/healthz`` 503 ``full``) and refuses cleanly; a fed clock and CPU
counter stand in for the process."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from rejoinder.io.admission import SessionGate
from rejoinder.io.app import create_app
from rejoinder.io.hosting import health_answer
from rejoinder.io.load import WINDOW_SECONDS, LoadGauge


class Process:
    """A process whose CPU use we decide: ``busy`` cores' worth per second."""

    def __init__(self) -> None:
        self.t = 0.0
        self.cpu = 0.0

    def run(self, seconds: float, busy: float) -> None:
        self.t += seconds
        self.cpu += seconds * busy


def gauge_on(process: Process, **options: float) -> LoadGauge:
    return LoadGauge(cores=2, cpu=lambda: process.cpu, clock=lambda: process.t, **options)


def settle(gauge: LoadGauge, process: Process, *, live: int, busy: float) -> None:
    """Long enough at a steady load for the averages to reach it."""
    gauge.sample(live)
    for _ in range(round(WINDOW_SECONDS * 6)):
        process.run(1.0, busy)
        gauge.sample(live)


def test_before_any_measurement_the_prior_sizes_a_burst() -> None:
    gauge = gauge_on(Process(), target=0.8, prior=0.2)
    assert gauge.capacity == 4
    assert gauge.refusal(0) is None  # one session is always admitted
    assert gauge.refusal(3) is None  # 4 x 0.2 = 0.8
    reason = gauge.refusal(4)
    assert reason is not None and "busy" in reason and "capacity 4" in reason


def test_sessions_already_measured_count_as_measured() -> None:
    # Four sessions that started long ago and cost nothing now (their users are quiet):
    # the measurement says so, and a fifth is admitted.
    process = Process()
    gauge = gauge_on(process, target=0.8, prior=0.2)
    settle(gauge, process, live=4, busy=0.1)
    assert gauge.per_session == pytest.approx(0.0125, abs=0.002)  # 0.1 core over four
    assert gauge.refusal(4, young=0) is None
    assert gauge.capacity > 4
    # The same four arriving at once on a fresh process: the prior counts for them.
    assert gauge_on(Process(), target=0.8, prior=0.2).refusal(4, young=4) is not None


def test_the_measured_cost_per_session_replaces_the_prior() -> None:
    process = Process()
    gauge = gauge_on(process, target=0.75, prior=0.2)
    settle(gauge, process, live=0, busy=0.02)  # the idle server: 1 % of the machine
    assert gauge.idle == pytest.approx(0.01, abs=1e-3)
    settle(gauge, process, live=2, busy=0.02 + 2 * 0.3)  # each session: 0.3 of a core
    assert gauge.per_session == pytest.approx(0.15, abs=0.01)  # a share of 2 cores
    assert gauge.capacity == 4  # (0.75 - 0.01) / 0.15
    # two measured sessions (0.31 of the machine) and two young ones at 0.15 each
    assert gauge.refusal(4, young=2) is not None  # 0.31 + 3 x 0.15 > 0.75
    assert gauge.refusal(3, young=1) is None  # 0.31 + 2 x 0.15 = 0.61


def test_a_process_already_busier_than_its_sessions_explain_refuses() -> None:
    # Someone else's work in the process (a background job): the measured load counts.
    process = Process()
    gauge = gauge_on(process, target=0.75, prior=0.1)
    settle(gauge, process, live=1, busy=1.4)
    assert gauge.utilization == pytest.approx(0.7, abs=0.01)
    assert gauge.refusal(1) is not None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="target"):
        LoadGauge(target=0.0)
    with pytest.raises(ValueError, match="prior"):
        LoadGauge(prior=2.0)


async def test_a_full_server_says_so_on_healthz_and_refuses_sessions() -> None:
    process = Process()
    gauge = gauge_on(process, target=0.5, prior=0.3)
    gate: SessionGate[object] = SessionGate(load=gauge)
    assert gate.status == "ok"
    assert health_answer(gate).status == 200  # type: ignore[arg-type]
    with gate.admit() as first:
        assert first is not None
        with gate.admit() as second:  # 0.3 + 0.3 > 0.5
            assert second is None
        assert gate.status == "full"
        answer = health_answer(gate)  # type: ignore[arg-type]
        assert answer.status == 503
        assert b'"status": "full"' in answer.body_bytes
        assert b'"capacity": 1' in answer.body_bytes
    assert gate.refused_total == 1
    assert gate.status == "ok"  # the place was given back


async def test_the_app_refuses_a_websocket_over_capacity_with_503() -> None:
    process = Process()
    gauge = gauge_on(process, target=0.5, prior=0.3)
    gate: SessionGate[object] = SessionGate(load=gauge)

    async def entrypoint(conn: object) -> None:
        return None

    app = create_app(entrypoint, gate=gate, webrtc=False, page=False)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        with gate.admit() as held:  # another request is starting a session
            assert held is not None
            response = await client.get("/ws")
            assert response.status == 503
            assert "busy" in (await response.json())["error"]
            health = await client.get("/healthz")
            assert health.status == 503
            assert (await health.json())["status"] == "full"
        metrics = await (await client.get("/metrics")).text()
        assert "rejoinder_sessions_refused_total 1.0" in metrics
