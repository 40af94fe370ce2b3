"""Import time of ``rejoinder`` in fresh interpreters, and which heavy modules it pulls in.

Each figure is the median over ``--runs`` fresh subprocesses:
- ``wall_s``: wall time of ``python -c "import rejoinder"`` minus that of ``python -c "pass"``;
- ``cpu_s``: the same difference in the child's user+system CPU time (steadier than wall
  time on a busy machine);
- ``importtime_s``: the cumulative time ``python -X importtime`` reports for ``rejoinder``.

Bytecode caching: the children run with ``PYTHONPYCACHEPREFIX`` set to a private temporary
directory (warmed by one run first), so the figures are for an installed package with its
``.pyc`` files cached, even where ``PYTHONDONTWRITEBYTECODE`` is set, and nothing is written
next to the sources. ``uncached_wall_s`` is the same wall-time difference with
``PYTHONDONTWRITEBYTECODE=1`` and no prefix: rejoinder's own modules are compiled from
source on every import (what a checkout with bytecode writing disabled pays).

    python bench/import_time.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

HEAVY = ("aiohttp", "pydantic", "numpy", "docstring_parser", "yarl", "multidict")

_CHECK = (
    f"import sys, json, rejoinder; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(code: str, env: Mapping[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``python -c code``."""
    cpu0, t0 = _child_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0, _child_cpu() - cpu0


def run_importtime(env: Mapping[str, str]) -> float:
    """Cumulative time ``-X importtime`` reports for the top-level package, in seconds."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import rejoinder"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    for line in proc.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == "rejoinder":
            return int(parts[1]) / 1e6
    raise RuntimeError("rejoinder not found in -X importtime output")


def median_diff(code: str, env: Mapping[str, str], runs: int) -> tuple[float, float, float]:
    """Medians of (wall, CPU) for ``code`` minus those for ``pass``; also the baseline wall."""
    base = [run_timed("pass", env) for _ in range(runs)]
    meas = [run_timed(code, env) for _ in range(runs)]
    base_wall = statistics.median(w for w, _ in base)
    base_cpu = statistics.median(c for _, c in base)
    wall = statistics.median(w for w, _ in meas) - base_wall
    cpu = statistics.median(c for _, c in meas) - base_cpu
    return wall, cpu, base_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rejoinder-pycache-") as cache:
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = cache
        for _ in range(2):  # fill the cache, then warm the OS file cache
            run_timed("import rejoinder", cached)
        wall, cpu, startup = median_diff("import rejoinder", cached, args.runs)
        importtime = statistics.median(run_importtime(cached) for _ in range(args.runs))
        heavy = json.loads(
            subprocess.run(
                [sys.executable, "-c", _CHECK],
                check=True,
                capture_output=True,
                text=True,
                env=cached,
            ).stdout
        )

    uncached = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    uncached["PYTHONDONTWRITEBYTECODE"] = "1"
    uncached_wall, _, _ = median_diff("import rejoinder", uncached, args.runs)

    print(
        json.dumps(
            {
                "bench": "import_time",
                "runs": args.runs,
                "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 4),
                "importtime_s": round(importtime, 4),
                "interpreter_startup_s": round(startup, 4),
                "uncached_wall_s": round(uncached_wall, 4),
                "heavy_modules_imported": heavy,
            },
            separators=(",", ":"),
        )
    )


if __name__ == "__main__":
    main()
