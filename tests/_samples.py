"""Run an example as a user would: its own process, offline (no provider key in its
environment, so it takes its offline path), bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "ASSEMBLYAI_API_KEY",
    "CARTESIA_API_KEY",
    "DEEPGRAM_API_KEY",
    "ELEVENLABS_API_KEY",
)


def run_example(path: str, *args: str, timeout: float = 60.0) -> str:
    """``examples/<path>`` with ``args``; its output, once it exited 0 with nothing on
    stderr."""
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout
