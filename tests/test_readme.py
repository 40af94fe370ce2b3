"""Every ```python block in README.md runs as written.

Each block runs in its own Python process (``sys.executable``, a temporary directory as
the working directory, at most ``SAMPLE_TIMEOUT`` seconds of real time), with
``OPENAI_BASE_URL`` pointing at a loopback server that this test runs and
``OPENAI_API_KEY=test``:

- a block that builds ``openai.GPTLive`` talks to a ``GPTLiveServer``, one that builds
  ``openai.Realtime`` to an ``OpenAIRealtimeServer``, any other to an
  ``OpenAIChatServer`` that answers like a cooperative model: when the user just spoke
  and tools are offered it calls the first one (arguments made up from the tool's
  schema), otherwise it answers with text that quotes the latest tool result;
- a complete program is executed as ``__main__`` (its ``asyncio.run(main())`` runs);
- a block preceded by ``<!-- fragment: a, b -->`` is a piece of a larger program that uses
  the names ``a`` and ``b`` (a microphone, a speaker, models) without defining them: it
  runs inside ``asyncio.run`` with top-level ``await`` allowed, with stand-ins from the
  test kit bound to those names, and a ``session`` it leaves behind is closed after it;
- module-level ``async def test_*`` functions a block defines (the testing sample) are
  then run, as pytest would.

A sample passes when its process exits 0, writes nothing to stderr (no traceback, no
warning logged by the session), and the loopback server saw it connect.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import GPTLiveServer, OpenAIChatServer, OpenAIRealtimeServer, StreamReply
from rejoinder.testing.openai_chat_server import chunk, text_chunks, tool_call_delta

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SAMPLE_TIMEOUT = 20.0
OK_MARKER = "README-SAMPLE-OK"

_FRAGMENT = re.compile(r"<!--\s*fragment(?::\s*(?P<names>[\w\s,]*?))?\s*-->")


@dataclass(frozen=True)
class Block:
    line: int
    """The line of the block's first code line in README.md (1-based)."""
    code: str
    stand_ins: tuple[str, ...] | None
    """``None`` for a complete program; the names a fragment leaves to its context."""

    @property
    def label(self) -> str:
        first = next((ln for ln in self.code.splitlines() if ln.strip()), "")
        return f"README.md:{self.line}: {first.strip()[:40]}"


def _blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```python":
            index += 1
            continue
        start = index + 1
        end = start
        while lines[end].strip() != "```":
            end += 1
        previous = next((ln for ln in reversed(lines[:index]) if ln.strip()), "")
        marker = _FRAGMENT.fullmatch(previous.strip())
        stand_ins: tuple[str, ...] | None = None
        if marker is not None:
            names = marker.group("names") or ""
            stand_ins = tuple(n.strip() for n in names.split(",") if n.strip())
        blocks.append(Block(start + 1, "\n".join(lines[start:end]) + "\n", stand_ins))
        index = end + 1
    return blocks


BLOCKS = _blocks(README.read_text(encoding="utf-8"))


def _compile(block: Block) -> Any:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.stand_ins is not None else 0
    # Leading newlines make tracebacks and syntax errors name the README's own lines.
    source = "\n" * (block.line - 1) + block.code
    return compile(source, str(README), "exec", flags=flags, dont_inherit=True)


def _tree(block: Block) -> ast.Module:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree: ast.Module = compile(block.code, "<block>", "exec", flags)
    return tree


def _constructed(block: Block) -> set[str]:
    """Names of the ``openai.<Name>(...)`` models a block builds (comments excluded)."""
    return {
        node.func.attr
        for node in ast.walk(_tree(block))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "openai"
    }


# ---------------------------------------------------------------------- static checks


def test_the_readme_has_python_samples_and_the_main_ones_are_complete_programs() -> None:
    complete = [b for b in BLOCKS if b.stand_ins is None]
    assert len(BLOCKS) >= 5
    for needle in ("class Assistant(rj.Agent)", "class GetEmail(rj.AgentTask[str])"):
        assert any(needle in b.code for b in complete), f"no complete sample with {needle}"
    assert all("asyncio.run(main())" in b.code or "async def test_" in b.code for b in complete)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.label)
def test_sample_compiles_and_uses_only_public_names(block: Block) -> None:
    assert _compile(block) is not None
    used = {
        node.attr
        for node in ast.walk(_tree(block))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "rj"
    }
    assert [name for name in sorted(used) if not hasattr(rj, name)] == []


def test_the_readme_keeps_its_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    fence = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in fence.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


@pytest.mark.parametrize("doc", ["README.md", "docs/README.md", "docs/architecture.md"])
def test_relative_links_resolve(doc: str) -> None:
    path = ROOT / doc
    text = path.read_text(encoding="utf-8")
    assert "../shared" not in text
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc} links to a missing {target}"


# -------------------------------------------------------------------- running samples

# Runs one block in a fresh interpreter: argv = [block file, first line, stand-in names or "-"].
RUNNER = r"""
import ast, asyncio, inspect, sys

path, first_line, names = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fragment = names != "-"
source = "\n" * (first_line - 1) + open(path, encoding="utf-8").read()
flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if fragment else 0
code = compile(source, "README.md", "exec", flags=flags, dont_inherit=True)


async def _entrypoint(conn):
    await conn.serve(None, None)


def stand_in(name):
    from rejoinder import testing
    makers = {
        "microphone": lambda: testing.MemoryAudioInput(),
        "speaker": lambda: testing.MemoryAudioOutput(),
        "llm": lambda: testing.ScriptedLLM([["Hello."]]),
        "vad": lambda: testing.ScriptedVAD(),
        "stt": lambda: testing.ScriptedSTT(["hello"]),
        "tts": lambda: testing.ScriptedTTS(),
        "entrypoint": lambda: _entrypoint,
    }
    return makers[name]()


async def run_fragment():
    namespace = {"__name__": "__main__"}
    namespace.update({name: stand_in(name) for name in names.split(",") if name})
    result = eval(code, namespace)
    if inspect.isawaitable(result):
        await result
    session = namespace.get("session")
    if session is not None:
        await session.aclose()
    return namespace


if fragment:
    namespace = asyncio.run(run_fragment())
else:
    namespace = {"__name__": "__main__"}
    exec(code, namespace)
for name, value in list(namespace.items()):
    if name.startswith("test_") and inspect.iscoroutinefunction(value):
        asyncio.run(value())
print("README-SAMPLE-OK")
"""

_MADE_UP = {"city": "Paris", "email": "ada@example.com"}


def _arguments(tool: dict[str, Any]) -> dict[str, Any]:
    """Arguments that fit a tool's JSON schema: a plausible value for each required one."""
    schema = tool["function"].get("parameters") or {}
    properties: dict[str, Any] = schema.get("properties", {})
    made: dict[str, Any] = {}
    for name in schema.get("required", []):
        kind = properties.get(name, {}).get("type")
        made[name] = _MADE_UP.get(name, "test") if kind in (None, "string") else 1
    return made


def called_tool(body: dict[str, Any]) -> str | None:
    """The tool the cooperative model calls for this request: the first one offered,
    when the user spoke last (it takes the user's last word as a request)."""
    messages: list[dict[str, Any]] = body["messages"]
    tools: list[dict[str, Any]] = body.get("tools") or []
    if messages and messages[-1]["role"] == "user" and tools:
        name: str = tools[0]["function"]["name"]
        return name
    return None


def cooperative_model(body: dict[str, Any]) -> StreamReply:
    """Calls the first offered tool right after the user spoke; otherwise says something
    that quotes the latest tool result (or greets)."""
    messages: list[dict[str, Any]] = body["messages"]
    tools: list[dict[str, Any]] = body.get("tools") or []
    if called_tool(body) is not None:
        tool = tools[0]
        call = tool_call_delta(
            0,
            call_id=f"call_{len(messages)}",
            name=tool["function"]["name"],
            arguments=json.dumps(_arguments(tool)),
        )
        return StreamReply(
            [
                chunk(role="assistant"),
                chunk(tool_calls=[call]),
                chunk(finish_reason="tool_calls"),
            ]
        )
    results = [m["content"] for m in messages if m["role"] == "tool" and m.get("content")]
    words = (f"Done: {results[-1]}." if results else "Hello! How can I help?").split(" ")
    return StreamReply(text_chunks(words[0], *(" " + word for word in words[1:])))


@dataclass
class Backend:
    base_url: str
    connected: Any
    """Returns whether the sample talked to this server."""


@asynccontextmanager
async def _backend_for(block: Block) -> AsyncIterator[Backend]:
    models = _constructed(block)
    if "GPTLive" in models:
        async with GPTLiveServer() as live:
            yield Backend(live.base_url, lambda: "session.start" in live.received_types())
    elif "Realtime" in models:
        async with OpenAIRealtimeServer() as realtime:
            yield Backend(realtime.base_url, lambda: bool(realtime.received_types()))
    else:
        async with OpenAIChatServer(cooperative_model) as chat:
            needs_model = "LLM" in models
            yield Backend(chat.base_url, lambda: bool(chat.requests) or not needs_model)


async def _run(block: Block, workdir: Path, base_url: str) -> tuple[int, str, str]:
    sample = workdir / "sample.py"
    sample.write_text(block.code, encoding="utf-8")
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "PYTHON"))
    }
    env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY="test", PYTHONDONTWRITEBYTECODE="1")
    names = "-" if block.stand_ins is None else ",".join(block.stand_ins)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RUNNER,
        str(sample),
        str(block.line),
        names,
        cwd=workdir,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), SAMPLE_TIMEOUT)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        pytest.fail(f"{block.label} ran longer than {SAMPLE_TIMEOUT} s\n{err.decode()}")
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.looptime(False)
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.label)
async def test_sample_runs_as_written(block: Block, tmp_path: Path) -> None:
    async with _backend_for(block) as backend:
        code, out, err = await _run(block, tmp_path, backend.base_url)
        assert code == 0, f"{block.label} failed:\n{err}"
        assert err == "", f"{block.label} wrote to stderr:\n{err}"
        assert out.rstrip().endswith(OK_MARKER)
        assert backend.connected(), f"{block.label} never reached the loopback server"


def _block_with(needle: str) -> Block:
    return next(b for b in BLOCKS if needle in b.code)


@pytest.mark.looptime(False)
async def test_the_first_agent_answers_with_its_tool_result(tmp_path: Path) -> None:
    block = _block_with("async def lookup")
    async with OpenAIChatServer(cooperative_model) as chat:
        code, out, err = await _run(block, tmp_path, chat.base_url)
    assert code == 0, err
    assert "sunny in Paris" in out
    assert re.findall(r"\[(\w+)\]", out)[-1] == "listening"  # the last state printed
    assert [r["messages"][-1]["role"] for r in chat.requests] == ["user", "tool"]


@pytest.mark.looptime(False)
async def test_the_sign_up_task_asks_then_the_caller_answers(tmp_path: Path) -> None:
    block = _block_with("class GetEmail")
    async with OpenAIChatServer(cooperative_model) as chat:
        code, out, err = await _run(block, tmp_path, chat.base_url)
    assert code == 0, err
    assert "What is your email address?" in out
    # The assistant calls sign_up once, the task calls record, the assistant answers
    # from sign_up's result (it used to read the user's answer last and sign up again).
    assert [called_tool(r) for r in chat.requests] == ["sign_up", "record", None]
    assert chat.requests[1]["messages"][-1]["content"] == "It's ada@example.com."
    follow_up = chat.requests[2]["messages"]
    assert [(m["role"], m.get("content")) for m in follow_up[1:4]] == [
        ("user", "Sign me up, please."),
        ("assistant", "What is your email address?"),
        ("user", "It's ada@example.com."),
    ]
    assert follow_up[4]["tool_calls"][0]["function"]["name"] == "sign_up"
    assert follow_up[5] == {
        "role": "tool",
        "tool_call_id": follow_up[4]["tool_calls"][0]["id"],
        "content": "signed up ada@example.com",
    }
    assert "Done: signed up ada@example.com." in out  # the assistant's answer, printed
