"""Ray Serve figures: from load to a second ready replica, and what a node loss costs.

    sudo python bench/scale_ray.py [--runs 3]

Runs the two-node scale test (``tests/scale/test_ray_serve.py``: a head and a worker
Ray node on 127.0.0.1, the demo agent with K = 2 sessions per replica) ``--runs`` times,
each in a fresh network namespace with only loopback up (Ray binds every interface), and
reports what it measured:

- ``load_to_second_replica_sessions_ready_s``: K sessions fill the first replica; from
  the moment K more connect to the moment the last of them gets ``ready`` (the autoscaler
  noticing the queued sessions, Ray starting the replica's process on the worker node,
  the agent file loading Whisper and Piper, the sessions starting);
- ``node_loss_sessions_closed_s``, ``sessions_lost_on_node_loss`` and
  ``sessions_on_lost_node``: the worker node is killed with K sessions on it;
- the voice latencies the clients saw on one replica and on two.

(Setting ``RAY_SERVE_*_AUTOSCALING_METRIC_PUSH_INTERVAL_S`` to Ray's default 10 s changed
nothing, 5.4 s in one run: Serve 2.60 reports load at the deployment's
``metrics_interval_s``, which ``rejoinder.deploy.ray`` sets to 1 s here.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/scale/test_ray_serve.py::test_autoscale_then_lose_a_node"


def one_run() -> dict[str, object]:
    namespace = f"rj-scale-bench-{os.getpid()}"
    report = Path(tempfile.mkdtemp()) / "figures.json"
    env = {
        **os.environ,
        "REJOINDER_SCALE": "1",
        "REJOINDER_SCALE_REPORT": str(report),
    }
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(
            ["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"], check=True
        )
        pytest = str(ROOT / ".venv" / "bin" / "pytest")
        command = ["ip", "netns", "exec", namespace, pytest, "-p", "no:cacheprovider", "-q", TEST]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-4000:])
            raise SystemExit(f"the scale test failed ({done.returncode})")
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    figures: dict[str, object] = json.loads(report.read_text())
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        figures = one_run()
        print(json.dumps(figures, separators=(",", ":")), file=sys.stderr, flush=True)
        runs.append(figures)

    def median(key: str) -> float:
        return round(statistics.median(float(str(r[key])) for r in runs), 1)

    print(
        json.dumps(
            {
                "bench": "scale_ray",
                "runs": len(runs),
                "first_replica_ready_s": median("first_replica_ready_s"),
                "load_to_second_replica_sessions_ready_s": median(
                    "load_to_second_replica_sessions_ready_s"
                ),
                "load_to_second_replica_each_run_s": [
                    r["load_to_second_replica_sessions_ready_s"] for r in runs
                ],
                "node_loss_sessions_closed_s": median("node_loss_sessions_closed_s"),
                "sessions_lost_on_node_loss": [r["sessions_lost_on_node_loss"] for r in runs],
                "sessions_on_lost_node": [r["sessions_on_lost_node"] for r in runs],
                "node_loss_close_codes": [r["node_loss_close_codes"] for r in runs],
                "latency_one_replica_s": [r["latency_one_replica_s"] for r in runs],
                "latency_two_replicas_s": [r["latency_two_replicas_s"] for r in runs],
            },
            separators=(",", ":"),
        )
    )


if __name__ == "__main__":
    main()
