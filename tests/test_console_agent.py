"""``rejoinder console FILE``: the agent file's own entry point, with the terminal as its
connection. In-process on virtual time with scripted models, and as a person runs it: a
subprocess on an example with its input piped in."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rejoinder import _extras
from rejoinder.cli import build_parser, main
from rejoinder.console_agent import run_agent_console
from rejoinder.console_audio import Speaker
from rejoinder.testing import speech_frame

ROOT = Path(__file__).resolve().parents[1]

AGENT = """
import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD
from rejoinder.testing.scripted_llm import Delay, ToolCall


class Greeter(rj.Agent):
    instructions = "test"

    async def on_enter(self) -> None:
        self.session.say("Hi there.")

    @rj.function_tool
    async def get_weather(self, city: str) -> str:
        '''The weather.

        Args:
            city: the city
        '''
        return f"sunny in {city}"


async def entrypoint(conn):
    session = rj.AgentSession(
        llm=ScriptedLLM(RESPONSES),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(["Hi."]),
        tts=ScriptedTTS(seconds_per_char=0.01),
        user_away_timeout=None,
    )
    await conn.serve(session, Greeter())
"""

WEATHER = """
RESPONSES = [
    [ToolCall("get_weather", {"city": "Paris"})],
    ["It is sunny in Paris."],
    ["Bye now."],
]
"""


def agent_file(tmp_path: Path, responses: str = WEATHER, source: str = AGENT) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(source) + textwrap.dedent(responses), encoding="utf-8")
    return path


async def typed(*lines: str | float) -> AsyncIterator[str]:
    """Lines as a person types them; a number waits that many seconds first."""
    for line in lines:
        if isinstance(line, float):
            await asyncio.sleep(line)
        else:
            yield line + "\n"


async def run(
    path: Path,
    lines: AsyncIterator[str] | None,
    *argv: str,
    barge_in: bool | None = None,
    devices: Any = None,
) -> tuple[int, str, str]:
    args = build_parser().parse_args(["console", str(path), *argv])
    out, err = io.StringIO(), io.StringIO()
    code = await run_agent_console(
        args, out, stderr=err, lines=lines, barge_in=barge_in, devices=devices
    )
    return code, out.getvalue(), err.getvalue()


def conversation(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("you> ", "agent> "))]


# ------------------------------------------------------------------ text mode


async def test_the_entrypoint_answers_typed_lines_turn_by_turn(tmp_path: Path) -> None:
    path = agent_file(tmp_path)
    code, out, err = await run(path, typed("Weather in Paris?", "Thanks."))

    assert (code, err) == (0, "")
    assert out.startswith(f"rejoinder console: {path}\n")
    assert conversation(out) == [
        "agent> Hi there.",  # the greeting is over before the first line is sent
        "you> Weather in Paris?",
        "agent> It is sunny in Paris.",
        "you> Thanks.",
        "agent> Bye now.",
    ]
    lines = out.splitlines()
    asked = lines.index("you> Weather in Paris?")
    answered = lines.index("agent> It is sunny in Paris.")
    between = " ".join(lines[asked:answered])
    assert "tool call: get_weather" in between and "tool finished: get_weather" in between
    # The turn never reported listening before its answer (the tool's follow-up).
    assert "→ listening" not in between
    assert "end of input: finishing anything still owed" in out
    assert out.rstrip().endswith("session closed")
    assert "\033[" not in out  # not a terminal: no colours


async def test_a_line_typed_during_a_reply_interrupts_it(tmp_path: Path) -> None:
    long_reply = """
    RESPONSES = [
        ["This answer goes on. ", "And on. ", Delay(5.0), "It never finishes."],
        ["Sure, stopping."],
    ]
    """
    path = agent_file(tmp_path, long_reply)
    code, out, _ = await run(path, typed(0.5, "Tell me a story.", 1.0, "Stop."), barge_in=True)

    assert code == 0
    said = conversation(out)
    assert said[:2] == ["agent> Hi there.", "you> Tell me a story."]
    # The words shown as its voice was heard, then the user's line, then all that was
    # heard of it, marked as cut; then the answer to the new line.
    assert said[2].startswith("agent> This")
    assert "This answer goes on. And on.".startswith(said[2].removeprefix("agent> "))
    assert said[3:] == [
        "you> Stop.",
        "agent> This answer goes on. And on. [interrupted]",
        "agent> Sure, stopping.",
    ]
    assert "never finishes" not in out


async def test_quit_closes_at_once_without_waiting_for_the_reply(tmp_path: Path) -> None:
    slow = """
    RESPONSES = [["Thinking ", Delay(100.0), "slowly."]]
    """
    path = agent_file(tmp_path, slow)
    loop = asyncio.get_running_loop()
    started = loop.time()
    code, out, _ = await run(path, typed(0.5, "Hello?", 0.5, "/quit"), barge_in=True)
    assert code == 0
    assert "quit: closing now" in out
    assert loop.time() - started < 50  # the 100 s reply was not waited for
    assert out.rstrip().endswith("session closed")


async def test_script_lines_are_sent_in_order(tmp_path: Path) -> None:
    script = tmp_path / "lines.txt"
    script.write_text("# a comment\nWeather in Paris?\n\nThanks.\n", encoding="utf-8")
    code, out, _ = await run(agent_file(tmp_path), None, "--script", str(script))
    assert code == 0
    assert f"input: {script} (2 messages)" in out
    assert [line for line in conversation(out) if line.startswith("you> ")] == [
        "you> Weather in Paris?",
        "you> Thanks.",
    ]


async def test_an_entrypoint_that_fails_is_reported(tmp_path: Path) -> None:
    failing = """
    async def entrypoint(conn):
        raise RuntimeError("no API key for the model")
    """
    path = agent_file(tmp_path, "", failing)
    code, _, err = await run(path, typed("hello"))
    assert code == 1
    assert err == (
        "rejoinder console: error: the entrypoint failed: RuntimeError: no API key for the model\n"
    )


async def test_an_entrypoint_that_serves_nothing_is_reported(tmp_path: Path) -> None:
    idle = """
    async def entrypoint(conn):
        return None
    """
    code, _, err = await run(agent_file(tmp_path, "", idle), typed(1.0, "hello"))
    assert code == 1
    assert "returned without serving a session" in err
    assert "await conn.serve(session, agent)" in err


async def test_demo_options_are_refused_with_a_file(tmp_path: Path) -> None:
    code, out, err = await run(agent_file(tmp_path), typed(), "--llm", "gpt-4o-mini")
    assert (code, out) == (2, "")
    assert "--llm: for the built-in demo only" in err


def test_a_file_without_an_entrypoint_is_a_clear_error() -> None:
    """As a person meets it: a sample that is a plain script, not an agent file."""
    done = subprocess.run(
        [sys.executable, "-m", "rejoinder.cli", "console", "examples/claude_agent.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        "rejoinder console: error: examples/claude_agent.py defines no 'entrypoint'."
    )
    assert "async def entrypoint(conn: rejoinder.io.Connection)" in done.stderr


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
@pytest.mark.skipif(
    not _extras.available("piper", "faster_whisper", "onnxruntime", "silero_vad"),
    reason="examples/voice_agent.py runs on the offline stack (rejoinder[local])",
)
def test_the_voice_example_answers_in_the_terminal() -> None:
    """``rejoinder console examples/voice_agent.py``, the agent ``make demo`` serves, with
    a question piped in: its own session (Whisper, Piper, the demo LLM), in text."""
    env = {k: v for k, v in os.environ.items() if k != "REJOINDER_LLM"}
    done = subprocess.run(
        [sys.executable, "-m", "rejoinder.cli", "console", "examples/voice_agent.py"],
        cwd=ROOT,
        input="What's the weather in Paris?\n",
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    said = conversation(done.stdout)
    assert said[0].startswith("agent> Hi! I'm the rejoinder voice demo."), done.stdout
    assert said[1] == "you> What's the weather in Paris?"
    assert "agent> In Paris today: sunny, 22 °C, light wind from the west." in said[2:]
    assert "tool finished: get_weather" in done.stdout


# ------------------------------------------------------------------ audio mode


class FakeSoundCard:
    """A microphone that hears a tone from ``speech_from`` for ``speech_for`` seconds,
    and a speaker that plays what it is given in real (here: virtual) time."""

    name = "fake microphone → fake speaker"

    def __init__(self, *, speech_from: float, speech_for: float, speaker_rate: int) -> None:
        self.mic_rate = 16000
        self.speaker_rate = speaker_rate
        self.speech = (speech_from, speech_from + speech_for)
        self.heard: list[np.ndarray[Any, Any]] = []
        self.closed = False
        self._task: asyncio.Task[None] | None = None

    def start(self, on_mic: Callable[[bytes], None], fill: Callable[[Any], None]) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(on_mic, fill))

    async def _run(self, on_mic: Callable[[bytes], None], fill: Callable[[Any], None]) -> None:
        clock = 0.0
        quiet = np.zeros(320, np.int16).tobytes()
        while True:
            await asyncio.sleep(0.02)
            talking = self.speech[0] <= clock < self.speech[1]
            on_mic(speech_frame(0.02, 16000).data.tobytes() if talking else quiet)
            out = bytearray(round(self.speaker_rate * 0.02) * 2)
            fill(memoryview(out))
            self.heard.append(np.frombuffer(bytes(out), np.int16))
            clock += 0.02

    def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()


async def test_audio_mode_hears_the_microphone_and_plays_on_the_speaker(tmp_path: Path) -> None:
    path = agent_file(tmp_path, 'RESPONSES = [["Hello to you."]]\n')
    card = FakeSoundCard(speech_from=0.5, speech_for=1.0, speaker_rate=24000)
    code, out, err = await run(path, typed(4.0), "--audio", devices=card)

    assert (code, err) == (0, ""), err
    assert "audio: fake microphone → fake speaker (use headphones" in out
    assert conversation(out) == ["agent> Hi there.", "you> Hi.", "agent> Hello to you."]
    assert "user: listening → speaking" in out
    assert card.closed
    played = np.concatenate(card.heard)
    sounding = np.flatnonzero(played)
    # What the speaker played is the two replies' voice (ScriptedTTS: 10 ms a character,
    # in 20 ms frames): "Hi there." and "Hello to you.", nothing more.
    seconds = sounding.size / 24000
    assert 0.18 <= seconds <= 0.26, seconds


def test_the_speaker_reports_what_it_played_and_where_a_clear_stopped() -> None:
    reports: list[tuple[int, bool]] = []

    async def scenario() -> None:
        speaker = Speaker(1000, lambda n, c: reports.append((n, c)), asyncio.get_running_loop())
        speaker.play(np.arange(1, 121, dtype=np.int16).tobytes())  # 120 ms at 1 kHz
        block = bytearray(40)  # 20 samples a callback
        speaker.fill(memoryview(block))
        assert np.frombuffer(bytes(block), np.int16).tolist() == list(range(1, 21))
        await asyncio.sleep(0)
        assert reports == []  # under REPORT_EVERY (50 samples) played: not yet
        for _ in range(2):
            speaker.fill(memoryview(block))
        await asyncio.sleep(0)
        assert reports == [(60, False)]
        speaker.clear()  # the user talked over it: the 60 queued samples are dropped
        await asyncio.sleep(0)
        assert reports[-1] == (60, True)
        assert speaker.queued == 0
        speaker.fill(memoryview(block))
        assert bytes(block) == bytes(40)  # silence, not counted as played
        speaker.play(np.ones(10, np.int16).tobytes())
        speaker.fill(memoryview(block))
        await asyncio.sleep(0)
        assert reports[-1] == (70, False)  # the queue ran dry: reported at once
        assert speaker.played == 70

    asyncio.run(scenario())


def test_sound_devices_open_raw_mono_streams_and_close_them() -> None:
    from rejoinder.console_audio import SoundDevices

    opened: list[Any] = []

    class Stream:
        def __init__(self, **options: Any) -> None:
            self.options = options
            self.state = "new"
            opened.append(self)

        def start(self) -> None:
            self.state = "started"

        def stop(self) -> None:
            self.state = "stopped"

        def close(self) -> None:
            self.state += ", closed"

    class FakeSd:
        RawInputStream = Stream
        RawOutputStream = Stream

    devices = SoundDevices(FakeSd(), mic_rate=48000, speaker_rate=44100, name="x")
    mic: list[bytes] = []
    wanted: list[Any] = []
    devices.start(mic.append, wanted.append)
    first, second = opened
    assert first.options["samplerate"] == 48000 and first.options["blocksize"] == 960
    assert second.options["samplerate"] == 44100 and second.options["blocksize"] == 882
    assert {s.options["dtype"] for s in opened} == {"int16"}
    assert {s.options["channels"] for s in opened} == {1}
    first.options["callback"](b"\x01\x00", 1, None, None)
    second.options["callback"]("buffer", 1, None, None)
    assert (mic, wanted) == ([b"\x01\x00"], ["buffer"])
    devices.close()
    devices.close()
    assert [s.state for s in opened] == ["stopped, closed", "stopped, closed"]


def test_audio_without_its_extra_names_the_pip_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)
    assert main(["console", str(agent_file(tmp_path)), "--audio"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "rejoinder console: error: rejoinder console --audio needs sounddevice, which is not "
        "installed: pip install 'rejoinder[audio]'\n"
    )


def test_audio_needs_an_agent_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["console", "--audio"]) == 2
    assert "--audio needs an agent FILE" in capsys.readouterr().err


def test_console_help_shows_the_file_and_audio(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["console", "--help"]) == 0
    text = capsys.readouterr().out
    assert "[FILE]" in text and "--audio" in text
    assert "`rejoinder dev FILE` serves" in " ".join(text.split())
