"""The documentation's Python samples run as written.

A ```python block whose first line is ``# file: NAME.py`` is a file the reader is told to
save: every such block of a page is written into a directory of the page's own (a page's
files import each other, as the quickstart's test imports its agent file), and the
``test_*.py`` files among them are run by pytest in a process of its own, on virtual
time, as the page tells the reader to run them. Any other ```python block of the guides
listed in ``GUIDES`` must at least compile (top-level ``await`` allowed: those blocks are
pieces of a larger program).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDES = ("quickstart.md", "state-model.md", "testing.md", "websocket.md", "sip.md", "models.md")
"""The pages written with this test in mind: all their Python must compile."""
RUN_TIMEOUT = 90.0
"""Seconds of real time for the pages' tests (each test itself runs on virtual time)."""

_FILE_MARKER = re.compile(r"#\s*file:\s*(?P<name>[\w./-]+\.py)\s*")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    """The line of the block's first code line in the page (1-based)."""
    code: str

    @property
    def file_name(self) -> str | None:
        """The file the page tells the reader to save the block as, if it does."""
        first = self.code.split("\n", 1)[0]
        marker = _FILE_MARKER.fullmatch(first.strip())
        return marker.group("name") if marker else None


def python_blocks(page: Path) -> list[Block]:
    """Every ```python block of ``page``, in order."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```python":
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(lines[index + 1 : end]) + "\n"
        blocks.append(Block(page.name, index + 2, code))
        index = end + 1
    return blocks


def _pages_with_files() -> list[Path]:
    return sorted(
        page for page in DOCS.rglob("*.md") if any(b.file_name for b in python_blocks(page))
    )


def test_the_guides_exist_and_have_runnable_samples() -> None:
    for guide in GUIDES:
        assert (DOCS / guide).is_file(), f"docs/{guide} is missing"
    runnable = {page.name for page in _pages_with_files()}
    assert {"quickstart.md", "state-model.md", "testing.md"} <= runnable


@pytest.mark.parametrize(
    "block",
    [
        block
        for guide in GUIDES
        if (DOCS / guide).is_file()
        for block in python_blocks(DOCS / guide)
    ],
    ids=lambda b: f"{b.page}:{b.line}",
)
def test_every_python_block_of_the_guides_compiles(block: Block) -> None:
    source = "\n" * (block.line - 1) + block.code  # errors name the page's own lines
    flags = 0 if block.file_name else ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    compile(source, f"docs/{block.page}", "exec", flags=flags, dont_inherit=True)


def test_the_files_the_pages_have_you_save_pass_their_tests(tmp_path: Path) -> None:
    # Each page's files in a directory of their own (a page's test imports its agent
    # file by name); one pytest process runs them all, which costs one start-up.
    tests: list[str] = []
    for page in _pages_with_files():
        folder = tmp_path / page.stem
        for block in python_blocks(page):
            name = block.file_name
            if name is None:
                continue
            target = folder / name
            assert not target.exists(), f"{page.name} saves {name} twice"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
            if Path(name).name.startswith("test_"):
                tests.append(str(target.relative_to(tmp_path)))
    assert tests, "no page has a test_*.py file to save"
    # The reader's setup: pytest-asyncio in auto mode, looptime's virtual time; the
    # directory is the rootdir, so none of this repository's configuration applies.
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
        "--looptime", "--import-mode=importlib", "--rootdir", str(tmp_path), *tests,
    ]  # fmt: skip
    folders = sorted({str(tmp_path / Path(test).parts[0]) for test in tests})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(folders)}
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(key, None)  # the samples must not need a provider
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"the pages' tests failed:\n{done.stdout}\n{done.stderr}"
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= len(tests), done.stdout
