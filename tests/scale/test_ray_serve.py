"""The demo agent on Ray Serve across two nodes on this machine (``make test-scale``).

A head and a worker node (``ray.cluster_utils.Cluster``: a raylet each, 127.0.0.1), one
CPU each, and one CPU per replica, so each node holds one replica: the first on the head
(deployed before the worker joins), the second on the worker. Real protocol clients speak
Piper clips to the offline demo agent (``tests/scale/agent.py``) and check its answers.

- ``test_autoscale_then_lose_a_node``: K sessions fill the first replica; K more wait in
  the Serve proxy, the autoscaler starts a second replica, they land on it, and the first
  K stay put and keep answering; killing the worker node closes exactly its K sessions
  (a close frame, not a hang), the other K go on answering, and a new session succeeds.
- ``test_drain_is_graceful_and_bounded``: an application being deleted drains: its live
  session keeps answering during the drain and is closed with 1000 at ``drain_timeout``.

Every Ray process started here is stopped by its id at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from rejoinder.deploy.ray import SESSION_LOST, RayOptions, build_app, use_in_proxy  # noqa: E402
from scale_client import VoiceClient, question_clips  # noqa: E402

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(280)]

K = 2
"""Sessions per replica."""
PORT = 8765
METRICS_PORT = 8767
"""The head node's Ray metrics endpoint (Prometheus), where replicas' metrics appear."""
AGENT = str(Path(__file__).with_name("agent.py"))
FIGURES = os.environ.get("REJOINDER_SCALE_REPORT")

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
use_in_proxy()  # a lost replica's sessions get a close frame


# ------------------------------------------------------------------ processes


def _descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def _node_pids(node: Any) -> set[int]:
    pids: set[int] = set()
    for infos in node.all_processes.values():
        for info in infos:
            if info.process is not None:
                pids.add(info.process.pid)
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Processes:
    """The Ray processes the tests started, by id, to stop them all at the end."""

    def __init__(self) -> None:
        self.pids: set[int] = set()

    def note(self, *nodes: Any) -> None:
        roots: set[int] = set()
        for node in nodes:
            roots |= _node_pids(node)
        self.pids |= _descendants(roots) - {os.getpid()}

    def kill_survivors(self) -> list[int]:
        survivors = [pid for pid in sorted(self.pids) if _alive(pid)]
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return survivors


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    log = tmp_path_factory.mktemp("scale") / "sessions.jsonl"
    os.environ["REJOINDER_SCALE_LOG"] = str(log)
    procs = Processes()
    figures: dict[str, Any] = {}
    started = time.perf_counter()
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "metrics_export_port": METRICS_PORT,
            "_system_config": {"metrics_report_interval_ms": 1000},
        },
    )
    procs.note(cluster.head_node)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": PORT}, proxy_location="HeadOnly")
        state: dict[str, Any] = {
            "cluster": cluster,
            "procs": procs,
            "log": log,
            "figures": figures,
        }
        figures["cluster_up_s"] = round(time.perf_counter() - started, 1)
        yield state
    finally:
        procs.note(*[cluster.head_node, *cluster.worker_nodes])
        with contextlib.suppress(Exception):
            serve.shutdown()
        with contextlib.suppress(Exception):
            ray.shutdown()
        with contextlib.suppress(Exception):
            cluster.shutdown()
        time.sleep(1.0)
        survivors = procs.kill_survivors()
        if survivors:
            print(f"killed {len(survivors)} Ray process(es) still running: {survivors}")
        if FIGURES:
            Path(FIGURES).write_text(json.dumps(figures, indent=2) + "\n")


def _landed(log: Path) -> dict[str, dict[str, Any]]:
    """Which replica process and node each client's session started on."""
    out: dict[str, dict[str, Any]] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            out[str(entry["client"])] = entry
    return out


async def _ray_metric(http: aiohttp.ClientSession, name: str, within: float = 30) -> list[str]:
    """The samples of ``name`` on the head node's Ray metrics endpoint, once there."""
    deadline = time.perf_counter() + within
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"http://127.0.0.1:{METRICS_PORT}/metrics") as response:
                text = await response.text()
            lines = [line for line in text.splitlines() if line.startswith(name)]
            if lines:
                return lines
        if time.perf_counter() > deadline:
            raise AssertionError(f"no {name} on the Ray metrics endpoint")
        await asyncio.sleep(1.0)


# ---------------------------------------------------------------------- tests


async def test_autoscale_then_lose_a_node(cluster: dict[str, Any]) -> None:
    questions = await question_clips()
    figures = cluster["figures"]
    log: Path = cluster["log"]
    options = RayOptions(
        path=AGENT,
        sessions_per_replica=K,
        min_replicas=1,
        max_replicas=2,
        upscale_delay_s=1.0,
        downscale_delay_s=600.0,
        look_back_period_s=2.0,
        drain_timeout=10.0,
    )
    t0 = time.perf_counter()
    await asyncio.to_thread(serve.run, build_app(options), name="scale", route_prefix="/")
    figures["first_replica_ready_s"] = round(time.perf_counter() - t0, 1)
    head_node_id = ray.get_runtime_context().get_node_id()

    # The worker node joins only now, so the first replica is on the head.
    c = cluster["cluster"]
    worker = c.add_node(num_cpus=1, node_ip_address="127.0.0.1")  # (main thread only)
    c.wait_for_nodes()
    cluster["procs"].note(worker)

    url = f"ws://127.0.0.1:{PORT}/ws"
    async with aiohttp.ClientSession() as http:
        first = [VoiceClient(url, name=str(i)) for i in range(K)]
        await asyncio.gather(*(client.open(http) for client in first))
        answers = await asyncio.gather(
            *(client.ask(*questions[i % len(questions)]) for i, client in enumerate(first))
        )
        figures["latency_one_replica_s"] = [round(a.latency, 3) for a in answers]
        landed = _landed(log)
        first_pids = {landed[c.name]["pid"] for c in first}
        assert len(first_pids) == 1, landed
        assert {landed[c.name]["node"] for c in first} == {head_node_id}

        # K more: over the first replica's capacity; they wait until a second is ready.
        load_at = time.perf_counter()
        second = [VoiceClient(url, name=str(K + i)) for i in range(K)]
        await asyncio.gather(*(client.open(http) for client in second))
        figures["load_to_second_replica_sessions_ready_s"] = round(
            max(client.ready_at or 0 for client in second) - load_at, 1
        )
        landed = _landed(log)
        second_pids = {landed[c.name]["pid"] for c in second}
        assert len(second_pids) == 1 and not second_pids & first_pids, landed
        assert {landed[c.name]["node"] for c in second} == {worker.node_id}, landed
        cluster["procs"].note(c.head_node, worker)
        cluster["procs"].pids |= first_pids | second_pids

        # Both groups answer; the first K never moved. Meanwhile: the head's replica
        # reports its sessions on the node's Ray metrics endpoint, tagged by replica.
        everyone = first + second
        scraped = asyncio.create_task(_ray_metric(http, "ray_rejoinder_replica_sessions_live"))
        answers = await asyncio.gather(
            *(c.ask(*questions[(i + 1) % len(questions)]) for i, c in enumerate(everyone))
        )
        samples = await scraped
        figures["ray_metrics"] = sorted(
            {line.split("{")[0] for line in await _ray_metric(http, "ray_rejoinder_replica")}
        )
        assert any('replica="' in line and line.endswith(f" {K}.0") for line in samples), samples
        figures["latency_two_replicas_s"] = [round(a.latency, 3) for a in answers]
        assert not any(c.closed.is_set() for c in everyone)
        assert _landed(log)[first[0].name]["pid"] in first_pids

        # Lose the worker node: its K sessions end, nothing else does.
        killed_at = time.perf_counter()
        await asyncio.to_thread(c.remove_node, worker, False)
        ended = await asyncio.gather(*(client.wait_closed(60) for client in second))
        figures["node_loss_sessions_closed_s"] = round(time.perf_counter() - killed_at, 1)
        assert all(ended), [c.close_code for c in second]
        figures["node_loss_close_codes"] = [c.close_code for c in second]
        assert [c.close_code for c in second] == [SESSION_LOST] * K  # a close frame
        assert not any(c.closed.is_set() for c in first)
        answers = await asyncio.gather(
            *(c.ask(*questions[(i + 2) % len(questions)]) for i, c in enumerate(first))
        )
        assert not any(c.closed.is_set() for c in first)
        figures["sessions_lost_on_node_loss"] = sum(c.closed.is_set() for c in everyone)
        figures["sessions_on_lost_node"] = len(second)

        # New sessions still succeed (on the head, once a place frees up there).
        await first[0].close()
        late = VoiceClient(url, name="late")
        await late.open(http)
        answer = await late.ask(*questions[3])
        assert "humid" in answer.text.lower()
        assert _landed(log)["late"]["node"] == head_node_id
        for client in (*first, late):
            await client.close()
    await asyncio.to_thread(serve.delete, "scale")


async def test_drain_is_graceful_and_bounded(cluster: dict[str, Any]) -> None:
    questions = await question_clips()
    drain = 14.0  # time for a question and its whole answer while draining
    options = RayOptions(path=AGENT, sessions_per_replica=K, max_replicas=1, drain_timeout=drain)
    await asyncio.to_thread(serve.run, build_app(options), name="drain", route_prefix="/")
    url = f"ws://127.0.0.1:{PORT}/ws"
    async with aiohttp.ClientSession() as http:
        client = VoiceClient(url, name="drain")
        await client.open(http)
        await client.ask(*questions[0])
        started = time.perf_counter()
        deleting = asyncio.create_task(asyncio.to_thread(serve.delete, "drain"))
        await asyncio.sleep(0.5)
        assert not client.closed.is_set()
        answer = await client.ask(*questions[1])  # still served while draining
        assert "rain" in answer.text.lower()
        assert await client.wait_closed(drain + 10)
        took = time.perf_counter() - started
        assert client.close_code == 1000
        assert drain - 1.0 <= took <= drain + 8.0, took
        cluster["figures"]["drain_closed_after_s"] = round(took, 1)
        await deleting
        await client.close()
