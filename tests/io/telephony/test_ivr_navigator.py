"""The IVR sample (``examples/ivr_navigator.py``) against a scripted phone menu over a real
socket, in real time: ``FakePhoneCall.answer_menu`` is the company, hearing keys only from
the DTMF tones in the audio it played; the agent hears the prompts through the scripted
recognizer and presses keys through its ``press`` tool (``session.send_dtmf``), its model
scripted by the sample's ``MenuReader``.

The path is checked from both ends: the menu said its main prompt, heard 2, said the
billing submenu, heard 1, said "you reached billing"; the agent heard those prompts in that
order and pressed those keys, the second after a half-second pause ("w1"), which the line
kept; the agent spoke only once it had reached billing."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.testing import FakePhoneCall, ScriptedLLM, ScriptedTTS, ScriptedVAD, ToolCall

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ivr_navigator.py"
TICK = 0.02


def loop_time() -> float:
    return asyncio.get_running_loop().time()


def load_sample() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ivr_navigator_sample", SAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look the module up
    spec.loader.exec_module(module)
    return module


ivr = load_sample()


def pauses_before_keys(call: FakePhoneCall) -> list[float]:
    """For each key's tone the far end played, the seconds of silence it played just
    before it, without a break in the playout."""
    loud = [int(np.abs(h.pcm).max()) > 1000 for h in call.heard]
    pauses: list[float] = []
    for i, is_tone in enumerate(loud):
        if not is_tone or (i > 0 and loud[i - 1]):
            continue  # not the first chunk of a tone
        quiet, j = 0.0, i - 1
        while j >= 0 and not loud[j] and call.heard[j + 1].at - call.heard[j].at < 0.1:
            if int(np.abs(call.heard[j].pcm).max()) > 50:
                break  # audio that is not silence: the agent's voice, say
            quiet += len(call.heard[j].pcm) / 8000
            j -= 1
        pauses.append(quiet)
    return pauses


async def test_the_agent_presses_its_way_to_billing_heard_from_the_tones_alone() -> None:
    reader = ivr.MenuReader("billing", pauses=("", "w"))
    sessions: list[rj.AgentSession[Any]] = []
    states: list[str] = []

    async def entrypoint(conn: Connection) -> None:
        session = ivr.offline_session(reader)
        session.on("agent_state_changed", lambda e: states.append(e.new_state))
        sessions.append(session)
        await conn.serve(session, ivr.IVRNavigator("reach billing"))

    app = create_app(entrypoint, telephony=["twilio"], webrtc=False, page=False)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with FakePhoneCall.connect(str(server.make_url("/twilio"))) as call:
            reached = await call.answer_menu(ivr.MENU, ivr.voice, key_timeout=4)
            await call.until(lambda: "speaking" in states and states[-1] == "listening", 5)
    finally:
        await server.close()

    # The menu's side: the path it went through, on keys it decoded from the audio.
    assert reached.prompt == ivr.BILLING
    assert [(what, value) for _, what, value in call.menu_log] == [
        ("said", ivr.MAIN),
        ("key", "2"),
        ("said", ivr.BILLING_MENU),
        ("key", "1"),
        ("said", ivr.BILLING),
    ]
    assert call.keys_heard() == "21"  # no other key anywhere in what it played
    # The second key came after its "w": half a second of silence played right before
    # it; the first, pressed without one, at once.
    assert [round(p, 2) for p in pauses_before_keys(call)] == [0.0, 0.5]
    # The agent's side: it heard the prompts in order and pressed what each one offered.
    history = sessions[0].history.items
    heard = [i.content for i in history if isinstance(i, rj.ChatMessage) and i.role == "user"]
    assert heard == [ivr.MAIN, ivr.BILLING_MENU, ivr.BILLING]
    calls = [i.arguments for i in history if isinstance(i, rj.FunctionCall)]
    assert calls == ['{"keys": "2"}', '{"keys": "w1"}']
    outputs = [i.output for i in history if isinstance(i, rj.FunctionCallOutput)]
    assert all(o.startswith("pressed") for o in outputs) and len(outputs) == 2
    # It spoke once, at billing: the keys never made it speaking.
    assert states.count("speaking") == 1
    said = [i.content for i in history if isinstance(i, rj.ChatMessage) and i.role == "assistant"]
    assert said == ["Hi, I am calling about my bill."]


def test_the_sample_without_a_model_says_which_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REJOINDER_LLM", raising=False)
    with pytest.raises(RuntimeError, match="REJOINDER_LLM"):
        ivr.make_session()


def test_the_sample_agent_has_its_goal_and_one_tool() -> None:
    agent = ivr.IVRNavigator("reach support")
    assert "Your goal: reach support." in agent.instructions
    assert [t.name for t in agent.tools] == ["press"]


async def test_keys_pressed_in_a_reply_that_speaks_follow_its_words() -> None:
    states: list[tuple[float, str]] = []
    sessions: list[rj.AgentSession[Any]] = []
    llm = ScriptedLLM([["One moment.", ToolCall("press", {"keys": "2"})], []])

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=llm,
            vad=ScriptedVAD(min_silence=0.15),
            stt=ivr.PromptSTT(),
            tts=ScriptedTTS(seconds_per_char=0.02, latency=0.2),  # a voice slow to start
            user_away_timeout=None,
            min_endpointing_delay=0.05,
        )
        session.on("agent_state_changed", lambda e: states.append((loop_time(), e.new_state)))
        sessions.append(session)
        await conn.serve(session, ivr.IVRNavigator())

    app = create_app(entrypoint, telephony=["twilio"], webrtc=False, page=False)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with FakePhoneCall.connect(str(server.make_url("/twilio"))) as call:
            await call.say(ivr.voice(ivr.MAIN), 8000)
            await call.until(lambda: call.keys_heard() == "2", 5)
            await call.until(lambda: len(llm.calls) == 2 and states[-1][1] == "listening", 5)
    finally:
        await server.close()

    heard = call.heard_audio()
    voice = round(len("One moment.") * 0.02 * 8000)
    assert np.abs(heard[:voice]).max() < 1000  # the words first...
    assert call.keys_heard() == "2" and len(heard) > voice  # ...then the key
    spoke = [t for t, s in states if s == "speaking"]
    first_tone = next(h.at for h in call.heard if int(np.abs(h.pcm).max()) > 1000)
    assert len(spoke) == 1 and spoke[0] < first_tone
    said = [
        i.content
        for i in sessions[0].history.items
        if isinstance(i, rj.ChatMessage) and i.role == "assistant"
    ]
    assert said == ["One moment."]
