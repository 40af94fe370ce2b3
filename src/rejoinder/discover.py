"""Find the agent's entry point in a file given by path (``rejoinder dev`` / ``serve``).

The file is loaded on its own with ``importlib.util.spec_from_file_location``; nothing else
is imported to look for it. It must define, at module level::

    async def entrypoint(conn: rejoinder.io.Connection) -> None:
        session = rj.AgentSession(llm=..., vad=..., stt=..., tts=...)
        await conn.serve(session, Assistant())

``entrypoint`` is called once per connection (a browser page over WebSocket or WebRTC, a
test client) with the typed ``Connection``. Anything that goes wrong is an
``EntrypointError`` whose message says what to fix: a missing file, a syntax error (with
its line), an exception while the file ran, no ``entrypoint``, or one of the wrong shape.

It may also define ``prewarm`` (``async def prewarm() -> None``, or a plain function): run
once per process after the file loads and before it serves, so that models shared by
every session (``rj.shared(...)``) are loaded before the first caller waits for them.

The file's directory is put at the front of ``sys.path`` while it loads, as ``python
FILE`` would, so it can import modules next to it. Loading again (``rejoinder dev``
reloads after an edit) runs the file afresh under the same module name.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import inspect
import re
import sys
import traceback
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

__all__ = [
    "ENTRYPOINT_NAME",
    "PREWARM_NAME",
    "AgentFile",
    "EntrypointError",
    "load_agent_file",
    "load_entrypoint",
    "module_name_for",
]

ENTRYPOINT_NAME = "entrypoint"
PREWARM_NAME = "prewarm"

_EXAMPLE = (
    "    async def entrypoint(conn: rejoinder.io.Connection) -> None:\n"
    "        session = rj.AgentSession(llm=..., vad=..., stt=..., tts=...)\n"
    "        await conn.serve(session, Assistant())"
)

Loaded = Callable[[Any], Awaitable[None]]


class EntrypointError(Exception):
    """The agent file cannot be used; the message says why and what to do."""


def module_name_for(path: Path) -> str:
    """The name the agent file is loaded under (in ``sys.modules``)."""
    stem = re.sub(r"\W", "_", path.stem) or "agent"
    return f"_rejoinder_agent_{stem}"


@dataclass(frozen=True, slots=True)
class AgentFile:
    entrypoint: Loaded
    prewarm: Callable[[], object] | None = None
    """The file's ``prewarm``, if it has one (``run_prewarm`` calls it)."""

    async def run_prewarm(self) -> None:
        """Run ``prewarm`` (a plain function in a thread, off the event loop)."""
        if self.prewarm is None:
            return
        if inspect.iscoroutinefunction(self.prewarm):
            await self.prewarm()
        else:
            await asyncio.to_thread(self.prewarm)


def load_agent_file(path: str | Path) -> AgentFile:
    """Load ``path``: its ``entrypoint`` (an async function of one argument) and its
    ``prewarm``, if any (a function of no arguments)."""
    entrypoint = load_entrypoint(path)
    module = sys.modules[module_name_for(Path(path).resolve())]
    prewarm = getattr(module, PREWARM_NAME, None)
    if prewarm is None:
        return AgentFile(entrypoint)
    if not callable(prewarm) or not _takes_nothing(prewarm):
        raise EntrypointError(
            f"{PREWARM_NAME} in {path} must be a function of no arguments, run once per "
            f"process before serving: async def {PREWARM_NAME}() -> None"
        )
    return AgentFile(entrypoint, prewarm)


def _takes_nothing(call: Callable[..., object]) -> bool:
    try:
        inspect.signature(call).bind()
    except TypeError:
        return False
    except ValueError:  # pragma: no cover - no signature to read
        return True
    return True


def load_entrypoint(path: str | Path) -> Loaded:
    """Load ``path`` and return its ``entrypoint`` (an async function of one argument)."""
    file = Path(path)
    if not file.exists():
        raise EntrypointError(f"agent file not found: {file}")
    if file.is_dir():
        raise EntrypointError(f"{file} is a directory; give the agent's .py file")
    if file.suffix != ".py":
        raise EntrypointError(f"{file} is not a Python file (expected a .py file)")
    file = file.resolve()
    name = module_name_for(file)
    previous = sys.modules.get(name)
    module = _run_file(file, name, previous)
    try:
        candidate = getattr(module, ENTRYPOINT_NAME, None)
        if candidate is None:
            raise EntrypointError(
                f"{path} defines no {ENTRYPOINT_NAME!r}. Define one at module level; it is "
                f"called once per connection:\n\n{_EXAMPLE}"
            )
        return _checked(candidate, str(path))
    except EntrypointError:
        _restore(name, previous)  # a failed load leaves the previous version in place
        raise


class _FreshSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the agent file from its source on every load, never from a cached
    ``.pyc``: a reload must run what the file says now (a bytecode cache is checked by
    modification time and size, so an edit within the same second that kept the size
    ran the old code), and nothing is written into the user's folder."""

    def get_code(self, fullname: str) -> types.CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def _run_file(file: Path, name: str, previous: object) -> object:
    spec = importlib.util.spec_from_file_location(
        name, file, loader=_FreshSourceLoader(name, str(file))
    )
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has one
        raise EntrypointError(f"cannot load {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    folder = str(file.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    # Registered while it runs: dataclasses, pydantic and pickling look modules up by name.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        _restore(name, previous)
        raise EntrypointError(_describe_syntax_error(file, exc)) from None
    except BaseException as exc:
        _restore(name, previous)
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            if isinstance(exc, SystemExit):
                raise EntrypointError(
                    f"{file} called sys.exit({exc.code!r}) while loading; an agent file "
                    f"should only define things (keep `asyncio.run(...)` under "
                    f"`if __name__ == '__main__':`)"
                ) from None
            raise
        raise EntrypointError(_describe_failure(file, exc)) from None
    return module


def _restore(name: str, previous: object) -> None:
    if previous is None:
        sys.modules.pop(name, None)
    else:
        sys.modules[name] = cast(Any, previous)


def _describe_syntax_error(file: Path, exc: SyntaxError) -> str:
    where = f"{exc.filename or file}:{exc.lineno}" if exc.lineno else str(file)
    if exc.offset:
        where += f":{exc.offset}"
    text = f"syntax error in {where}: {exc.msg}"
    if exc.text:
        line = exc.text.rstrip("\n")
        text += f"\n    {line.strip()}"
        if exc.offset:
            indent = len(line) - len(line.lstrip())
            text += "\n    " + " " * max(exc.offset - 1 - indent, 0) + "^"
    return text


def _describe_failure(file: Path, exc: BaseException) -> str:
    """The exception and the frames of the traceback that are in the agent file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(file)]
    text = f"loading {file} failed: {type(exc).__name__}: {exc}"
    if frames:
        last = frames[-1]
        text += f"\n    at line {last.lineno}: {(last.line or '').strip()}"
    return text


def _checked(candidate: object, where: str) -> Loaded:
    if not callable(candidate):
        raise EntrypointError(
            f"{ENTRYPOINT_NAME} in {where} is a {type(candidate).__name__}, not a function; "
            f"define it as:\n\n{_EXAMPLE}"
        )
    call = candidate
    is_async = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004 - an object with an async __call__
    )
    if not is_async:
        raise EntrypointError(
            f"{ENTRYPOINT_NAME} in {where} must be an async function (async def); "
            f"define it as:\n\n{_EXAMPLE}"
        )
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):  # pragma: no cover - builtins have no async signature
        return cast(Loaded, call)
    try:
        signature.bind(object())
    except TypeError:
        raise EntrypointError(
            f"{ENTRYPOINT_NAME}{signature} in {where} must take exactly one argument, the "
            f"connection; define it as:\n\n{_EXAMPLE}"
        ) from None
    return cast(Loaded, call)
