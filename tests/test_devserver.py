"""``rejoinder dev`` / ``serve``: finding the entry point, admitting sessions, and the
server itself as a subprocess on 127.0.0.1 (real time, each test bounded to seconds)."""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
from pathlib import Path

import pytest

from rejoinder.discover import EntrypointError, load_entrypoint, module_name_for
from rejoinder.io.admission import SessionGate

ROOT = Path(__file__).resolve().parents[1]
REJOINDER = [sys.executable, "-m", "rejoinder.cli"]
STARTUP_TIMEOUT = 15.0


def write(tmp_path: Path, source: str, name: str = "agent.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


# ------------------------------------------------------------------ discovery


def test_discovery_finds_an_async_entrypoint(tmp_path: Path) -> None:
    helper = write(tmp_path, "GREETING = 'hi'\n", name="helper_for_agent.py")
    path = write(
        tmp_path,
        """
        from helper_for_agent import GREETING  # a module next to the agent file

        async def entrypoint(conn):
            return None
        """,
    )
    entry = load_entrypoint(path)
    assert entry.__name__ == "entrypoint"
    assert asyncio.iscoroutinefunction(entry)
    assert module_name_for(path.resolve()) in sys.modules
    assert helper.exists()


def test_discovery_accepts_an_object_with_an_async_call(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        class Entry:
            async def __call__(self, conn):
                return None

        entrypoint = Entry()
        """,
    )
    assert callable(load_entrypoint(path))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = 1\n", r"defines no 'entrypoint'\. Define one.*async def entrypoint\(conn"),
        ("entrypoint = 42\n", r"is a int, not a function"),
        ("def entrypoint(conn):\n    pass\n", r"must be an async function \(async def\)"),
        ("async def entrypoint():\n    pass\n", r"must take exactly one argument"),
        ("async def entrypoint(a, b):\n    pass\n", r"must take exactly one argument"),
        (
            "async def entrypoint(conn):\n    return (\n",
            r"syntax error in .*\.py:2:12: .*never closed\n    return \(\n           \^",
        ),
        ("import no_such_module_here\n", r"failed: ModuleNotFoundError.*\n    at line 1"),
        ("raise SystemExit(3)\n", r"called sys\.exit\(3\) while loading"),
    ],
)
def test_discovery_errors_say_what_to_fix(tmp_path: Path, source: str, expected: str) -> None:
    path = write(tmp_path, source, name=f"failing_{tmp_path.name}.py")
    with pytest.raises(EntrypointError, match=re.compile(expected, re.DOTALL)):
        load_entrypoint(path)
    assert module_name_for(path.resolve()) not in sys.modules  # a failed load leaves nothing


def test_discovery_syntax_error_shows_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "async def entrypoint(conn):\n    await conn.serve(\n\nx = = 1\n")
    with pytest.raises(EntrypointError) as info:
        load_entrypoint(path)
    message = str(info.value)
    assert message.startswith("syntax error in ")
    assert re.search(r"agent\.py:\d+", message)


def test_discovery_missing_file_directory_and_not_python(tmp_path: Path) -> None:
    with pytest.raises(EntrypointError, match=r"agent file not found: .*nope\.py"):
        load_entrypoint(tmp_path / "nope.py")
    with pytest.raises(EntrypointError, match="is a directory"):
        load_entrypoint(tmp_path)
    text = write(tmp_path, "async def entrypoint(conn): pass\n", name="agent.txt")
    with pytest.raises(EntrypointError, match="not a Python file"):
        load_entrypoint(text)


def test_discovery_reload_runs_the_file_again(tmp_path: Path) -> None:
    path = write(tmp_path, "VERSION = 1\nasync def entrypoint(conn):\n    return VERSION\n")
    first = load_entrypoint(path)
    path.write_text("VERSION = 2\nasync def entrypoint(conn):\n    return VERSION\n")
    second = load_entrypoint(path)
    assert asyncio.run(first(None)) == 1  # type: ignore[func-returns-value]
    assert asyncio.run(second(None)) == 2  # type: ignore[func-returns-value]


# --------------------------------------------------------------- admission


async def test_gate_limits_live_sessions_and_drains() -> None:
    gate: SessionGate[None] = SessionGate(max_sessions=1)
    release = asyncio.Event()

    async def entry(conn: object) -> None:
        await release.wait()

    with gate.admit() as admission:
        assert admission is not None
        assert gate.refusal() is not None  # the place is held before the session starts
        task = asyncio.create_task(gate.run(entry, None))
        await asyncio.sleep(0)
    assert gate.live == 1
    with gate.admit() as refused:
        assert refused is None
    assert gate.refused_total == 1
    release.set()
    await task
    assert gate.live == 0
    assert gate.refusal() is None

    # Draining: new sessions are refused; one that never ends is cancelled after the wait.
    release.clear()
    with gate.admit():
        task = asyncio.create_task(gate.run(entry, None))
        await asyncio.sleep(0)
    started = asyncio.get_running_loop().time()
    cancelled = await gate.drain(10.0)
    assert cancelled == 1
    assert asyncio.get_running_loop().time() - started == pytest.approx(10.0, abs=0.01)
    assert task.cancelled()
    assert gate.status == "draining"
    assert "draining" in (gate.refusal() or "")


async def test_gate_closes_gracefully_before_cancelling() -> None:
    ended: list[str] = []
    stop = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def close(conn: str) -> None:
        if conn == "a":  # "a" ends when asked; "b" ignores it and is cancelled
            stop[conn].set()

    async def entry(conn: str) -> None:
        try:
            await stop[conn].wait()
            ended.append(f"{conn} returned")
        except asyncio.CancelledError:
            ended.append(f"{conn} cancelled")
            raise

    gate: SessionGate[str] = SessionGate(close=close)
    tasks = [asyncio.create_task(gate.run(entry, name)) for name in ("a", "b")]
    await asyncio.sleep(0)
    assert sorted(gate.connections) == ["a", "b"]
    assert await gate.drain(1.0) == 2
    await asyncio.wait(tasks)
    assert ended == ["a returned", "b cancelled"]
    assert gate.live == 0


async def test_gate_admission_not_used_is_given_back() -> None:
    gate: SessionGate[None] = SessionGate(max_sessions=1)
    with gate.admit() as admission:
        assert admission is not None
    assert gate.refusal() is None
    # A WebRTC offer: the place stays held for a while after the answer went out.
    with gate.admit(linger=3.0) as admission:
        assert admission is not None
    assert gate.refusal() is not None
    await asyncio.sleep(3.0)
    assert gate.refusal() is None

    # ... and the session that starts later, from a task the request created, takes it.
    release = asyncio.Event()

    async def later() -> None:
        await asyncio.sleep(1.0)
        await gate.run(lambda _conn: release.wait(), None)  # type: ignore[arg-type, return-value]

    with gate.admit(linger=3.0):
        task = asyncio.create_task(later())
    await asyncio.sleep(5.0)
    assert gate.live == 1
    assert gate.refusal() is not None
    release.set()
    await task
    assert gate.refusal() is None
    with pytest.raises(ValueError, match="at least 1"):
        SessionGate(max_sessions=0)
