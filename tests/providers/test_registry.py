"""Chat models by name (``--llm``, agent files): the built-in prefixes, the OpenAI-compatible
default, and a provider a package registers through a real entry point (a distribution's
metadata on ``sys.path``, found by importlib.metadata as pip would leave it)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

import rejoinder as rj
from rejoinder.cli import build_parser, run_console
from rejoinder.providers import anthropic, google, openai
from rejoinder.providers.registry import ENTRY_POINT_GROUP, llm_from_name, llm_providers
from rejoinder.testing import ScriptedLLM
from rejoinder.testing.anthropic_server import AnthropicServer, StreamReply, message

# The console test talks over a real socket on virtual time, as the provider tests do.
pytestmark = pytest.mark.looptime(noop_cycles=2000)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("llama3.2", "llama3.2"),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),  # no such provider
        ("openai/gpt-4o", "gpt-4o"),
        ("  openai/gpt-4o  ", "gpt-4o"),
    ],
)
def test_names_without_a_known_provider_go_to_an_openai_compatible_server(
    name: str, model: str
) -> None:
    llm = llm_from_name(name, base_url="http://127.0.0.1:1/v1", api_key="k")
    assert isinstance(llm, openai.LLM) and llm.model == model
    assert llm.base_url == "http://127.0.0.1:1/v1"


def test_a_provider_prefix_makes_that_providers_model() -> None:
    llm = llm_from_name("anthropic/claude-sonnet-4-5", api_key="k")
    assert isinstance(llm, anthropic.LLM) and llm.model == "claude-sonnet-4-5"
    with pytest.raises(ValueError, match="no model after"):
        llm_from_name("anthropic/")
    with pytest.raises(ValueError, match="a model name is needed"):
        llm_from_name("  ")
    assert {"openai", "anthropic", "google"} <= set(llm_providers())
    gemini = llm_from_name("google/gemini-2.5-flash", api_key="k")
    assert isinstance(gemini, google.LLM) and gemini.model == "gemini-2.5-flash"


def make_fake(model: str, *, base_url: str | None, api_key: str | None) -> rj.LLM:
    return ScriptedLLM([f"{model} via {base_url} with {api_key}"])  # type: ignore[return-value]


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: str) -> None:
    """A distribution as pip leaves one: its metadata on a sys.path entry."""
    dist = tmp_path / "rejoinder_fake-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rejoinder-fake\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entries}\n")
    (tmp_path / "rejoinder_fake.py").write_text(
        "from tests.providers.test_registry import make_fake\n"
        "def not_a_model(model, *, base_url, api_key):\n"
        "    return 'a string'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


async def test_a_package_registers_a_provider_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path,
        monkeypatch,
        "fake = rejoinder_fake:make_fake\n"
        "odd = rejoinder_fake:not_a_model\n"
        "gone = rejoinder_missing:make",
    )
    llm = llm_from_name("fake/m1", base_url="u", api_key="k")
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    await session.start(rj.Agent(instructions="x"))
    assert (await session.run(user_input="hi")).final_output == "m1 via u with k"
    await session.aclose()
    with pytest.raises(ValueError, match=r"'odd' \(rejoinder_fake:not_a_model\) made a str"):
        llm_from_name("odd/m")
    with pytest.raises(ValueError, match=r"'gone' .* could not be loaded: ModuleNotFoundError"):
        llm_from_name("gone/m")


async def test_the_console_talks_to_claude_by_name(tmp_path: Path) -> None:
    script = tmp_path / "s.txt"
    script.write_text("hello\n", encoding="utf-8")
    async with AnthropicServer([StreamReply(message("Hello from Claude."))]) as server:
        argv = ["console", "--llm", "anthropic/claude-test", "--base-url", server.base_url]
        args = build_parser().parse_args([*argv, "--api-key", "k", "--script", str(script)])
        out = io.StringIO()
        code = await asyncio.wait_for(run_console(args, out, stderr=out, lines=None), 30)
    text = out.getvalue()
    assert code == 0, text
    assert "claude-test (anthropic)" in text and "Hello from Claude." in text
    assert server.requests[0]["model"] == "claude-test"
    assert server.headers[0]["x-api-key"] == "k"
