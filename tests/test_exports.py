"""The public names import from where the API promises them, and ``import rejoinder`` stays
light (no numpy, no aiohttp until something needs them)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

# The public API contract: names users reach as ``rj.<name>``.
API_NAMES = [
    # agents and tools
    "Agent",
    "AgentTask",
    "function_tool",
    "FunctionTool",
    "RunContext",
    "ToolResult",
    "ToolError",
    "StopResponse",
    "ChatContext",
    "ChatMessage",
    "ChatChunk",
    # the session
    "AgentSession",
    "SpeechHandle",
    "RunResult",
    # events
    "AgentStateChangedEvent",
    "UserStateChangedEvent",
    "UserInputTranscribedEvent",
    "ConversationItemAddedEvent",
    "SpeechCreatedEvent",
    "FunctionToolsExecutedEvent",
    "MetricsCollectedEvent",
    "ErrorEvent",
    "CloseEvent",
    "AnsweredByEvent",
    "AwayTimerEvent",
    "BackgroundToolFinishedEvent",
    "SpeculationEvent",
    "UserTurnDiscardedEvent",
    "Owed",
    "DTMFEvent",
    "CollectDigits",
    "LeaveVoicemail",
    "Voicemail",
    "DetectorOptions",
    "detect_answered_by",
    "wait_answered_by",
    # metrics
    "LLMMetrics",
    "TTSMetrics",
    "STTMetrics",
    "EOUMetrics",
    "RealtimeMetrics",
    "VoiceLatencyMetrics",
    "UsageSummary",
    "Metrics",
    "Digits",
    # models
    "LLM",
    "STT",
    "TTS",
    "VAD",
    "RealtimeModel",
    "FallbackLLM",
    "FallbackSTT",
    "FallbackTTS",
    "FallbackRealtime",
    # audio and text i/o
    "AudioFilter",
    "filter_audio",
    "AudioFrame",
    "BackgroundAudio",
    "AudioInput",
    "AudioOutput",
    "TextOutput",
    "ConsoleTextOutput",
    "MemoryTextOutput",
]

TESTING_NAMES = [
    "ScriptedLLM",
    "ToolCall",
    "Delay",
    "Gate",
    "ScriptedTTS",
    "ScriptedSTT",
    "ScriptedVAD",
    "MemoryAudioOutput",
    "MemoryAudioInput",
    "StateTimeline",
    "GPTLiveServer",
    "OpenAIRealtimeServer",
    "OpenAIChatServer",
    "FakePhoneCall",
    "FakeTwilio",
    "FakeTelnyx",
    "FakePlivo",
    "CallOutcome",
]

MODEL_INTERFACES = ["LLM", "STT", "TTS", "VAD", "TextOutput", "RealtimeModel", "RealtimeSession"]


@pytest.mark.parametrize("name", API_NAMES)
def test_api_name_is_importable_from_rejoinder(name: str) -> None:
    module = importlib.import_module("rejoinder")
    assert getattr(module, name) is not None
    assert name in module.__all__


@pytest.mark.parametrize("name", TESTING_NAMES)
def test_test_kit_name_is_importable_from_rejoinder_testing(name: str) -> None:
    module = importlib.import_module("rejoinder.testing")
    assert getattr(module, name) is not None
    assert name in module.__all__


@pytest.mark.parametrize("name", MODEL_INTERFACES)
def test_model_interfaces_are_importable_from_rejoinder_models(name: str) -> None:
    models = importlib.import_module("rejoinder.models")
    assert getattr(models, name) is not None
    assert name in models.__all__


@pytest.mark.parametrize(
    "package", ["rejoinder", "rejoinder.models", "rejoinder.testing", "rejoinder.client"]
)
def test_every_name_in_all_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    assert len(set(module.__all__)) == len(module.__all__)


def test_the_same_class_is_exported_everywhere() -> None:
    import rejoinder as rj
    from rejoinder import models

    for name in ("LLM", "STT", "TTS", "VAD", "TextOutput"):
        assert getattr(rj, name) is getattr(models, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import rejoinder as rj

    with pytest.raises(AttributeError, match="no attribute 'Nonexistent'"):
        getattr(rj, "Nonexistent")  # noqa: B009 - the name is looked up on purpose


def _run(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, *flags, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


HEAVY = ["numpy", "aiohttp"]
_LOADED = f"import json, sys; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"


def test_import_rejoinder_does_not_import_numpy_or_aiohttp() -> None:
    result = _run(f"import rejoinder; {_LOADED}", "-X", "importtime")
    assert json.loads(result.stdout) == []
    # The import-time report names every module imported; none of the heavy ones.
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_model_interfaces_do_not_import_numpy() -> None:
    result = _run(f"from rejoinder import LLM, STT, TTS, VAD, TextOutput; {_LOADED}")
    assert json.loads(result.stdout) == []


def test_audio_names_load_numpy_on_first_use() -> None:
    code = (
        "import sys, rejoinder as rj; before = 'numpy' in sys.modules; "
        "frame = rj.AudioFrame; print(before, 'numpy' in sys.modules, frame.__module__)"
    )
    assert _run(code).stdout.split() == ["False", "True", "rejoinder.models.audio"]


REALTIME = ["rejoinder.models.realtime", "rejoinder.session.realtime.client_delegation"]


def test_a_text_session_never_loads_the_realtime_engine() -> None:
    code = (
        "import asyncio, json, sys, rejoinder as rj\n"
        "from rejoinder.testing import ScriptedLLM\n"
        "async def main():\n"
        "    session = rj.AgentSession(llm=ScriptedLLM(['hi']))\n"
        "    await session.start(rj.Agent(instructions='x'))\n"
        "    await session.generate_reply(user_input='hello')\n"
        "    await session.aclose()\n"
        "asyncio.run(main())\n"
        f"print(json.dumps([m for m in {REALTIME!r} if m in sys.modules]))"
    )
    assert json.loads(_run(code).stdout.splitlines()[-1]) == []


def test_realtime_names_load_on_first_use() -> None:
    code = (
        "import sys, rejoinder as rj; before = 'rejoinder.models.realtime' in sys.modules; "
        "names = (rj.RealtimeModel, rj.RealtimeSession, rj.RealtimeError, rj.FallbackRealtime, "
        "rj.ClientDelegation); "
        "print(before, 'rejoinder.models.realtime' in sys.modules, names[0].__module__, "
        "names[4].__module__)"
    )
    assert _run(code).stdout.split() == [
        "False",
        "True",
        "rejoinder.models.realtime",
        # What on_delegation is handed is a plain value beside Agent: naming it loads
        # no realtime module.
        "rejoinder.session.agents.agent",
    ]
