"""The container image's tests: the fast ones read the Dockerfile, .dockerignore,
compose.yaml and coturn's file; the slow one (marked ``container``) builds the image's
layout with container/check_image.py, or the real image where Docker or Podman runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "container"

# container/ is a folder of scripts, not a package: its modules import each other by name.
if str(CONTAINER) not in sys.path:
    sys.path.insert(0, str(CONTAINER))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "container: builds the container image's layout (a pip install of the offline "
        "stack into a new venv, an npm build) and runs it: about two minutes",
    )
