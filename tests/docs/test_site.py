"""The documentation site builds with ``--strict``, and the API reference is complete.

- ``mkdocs build --strict`` (what ``make docs`` runs) into a temporary directory: a broken
  link or anchor, a page missing from the nav or the nav naming a missing page, or a
  docstring griffe cannot read is a warning, and ``--strict`` makes any warning fail.
- Every name a public module exports (its ``__all__``) has a docstring
  (``public_api.py``, which reads the sources as mkdocstrings does).
- Every such name is on an API reference page: a ``::: module`` directive renders the
  whole module, a ``::: module.Name`` directive one name (the curated pages of
  ``rejoinder`` and ``rejoinder.testing``), so a name added to an ``__all__`` and left
  off its curated page fails here.

Skipped, saying why, when the docs tools (the ``docs`` extra) are not installed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.public_api import exported_names, load_package, public_modules, undocumented

ROOT = Path(__file__).resolve().parents[2]
API_PAGES = ROOT / "docs" / "api"
BUILD_TIMEOUT = 180.0
"""Seconds of real time for the build (about 12 s of CPU; more on a loaded machine)."""

_DIRECTIVE = re.compile(r"^:::\s+(?P<path>[\w.]+)\s*$", re.MULTILINE)

needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="the docs tools are not installed: pip install -e '.[docs]'",
)
needs_griffe = pytest.mark.skipif(
    importlib.util.find_spec("griffe") is None,
    reason="griffe (from the docs extra's mkdocstrings-python) is not installed",
)


@needs_mkdocs
@pytest.mark.site
def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2
    done = subprocess.run(
        # Not --quiet: it silences the warnings, and --strict then has none to count.
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr}"
    assert (site / "index.html").is_file()
    # The API reference was generated, not left as its directives.
    reference = (site / "api" / "rejoinder" / "index.html").read_text(encoding="utf-8")
    assert 'id="rejoinder.AgentSession"' in reference
    assert ":::" not in reference


@needs_griffe
def test_every_exported_name_has_a_docstring() -> None:
    missing = list(undocumented())
    assert missing == [], "exported names without a docstring:\n  " + "\n  ".join(missing)


def _directives() -> set[str]:
    found: set[str] = set()
    for page in API_PAGES.rglob("*.md"):
        found.update(m.group("path") for m in _DIRECTIVE.finditer(page.read_text("utf-8")))
    return found


@needs_griffe
def test_every_exported_name_is_on_an_api_page() -> None:
    directives = _directives()
    package = load_package()
    left_out: list[str] = []
    for dotted in public_modules():
        if dotted in directives:
            continue  # the whole module is rendered
        module = package if dotted == "rejoinder" else package[dotted.removeprefix("rejoinder.")]
        names = [n for n in exported_names(module) if n != "__version__"]
        if not any(f"{dotted}.{name}" in directives for name in names):
            left_out.append(f"{dotted} (no page)")
            continue
        left_out += [f"{dotted}.{n}" for n in names if f"{dotted}.{n}" not in directives]
    assert left_out == [], "not in the API reference (docs/api/):\n  " + "\n  ".join(left_out)
