"""The JavaScript SDK (clients/js, ``@rejoinder/client``) in headless Chromium, against a real
app on 127.0.0.1 in real time.

The SDK is built with npm (``npm ci`` when its node_modules are missing, then ``npm run
build``); a tiny page served by the app imports the built bundle (``dist/index.js``) and
drives a ``RejoinderClient``, recording every event in ``window.log`` (tests/io/_browser.py:
the page, Chromium, the builds). Chromium's fake microphone plays a WAV that eSpeak NG
spoke, at the WAV's rate (48 or 44.1 kHz); the app's entry point runs the test kit's energy
VAD and scripted STT/LLM with eSpeak NG as the TTS. Each test checks what the SDK reported:
a spoken turn answered over each transport (the states in order, the transcripts,
``played`` at least every 100 ms, ``speaking`` only once something was played), a
``clear`` during playback answered with ``cleared``, the microphone resampled to the
``start`` rate by the capture worklet, the agent ending the session (a close, not a drop),
and the errors a page meets first: a refused microphone, and a Content-Security-Policy
that forbids the embedded worklet (``workletUrl`` then loads ``dist/worklet.js``). Drops
and resumes: tests/io/test_js_sdk_resume_browser.py.

Skipped, saying why, without Debian's ``chromium``, without Playwright, or without npm
when the bundle must be built.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedVAD

from . import _browser
from ._browser import (
    ANSWER,
    ONE_LOOP,
    QUESTION,
    SDK_ANSWERED,
    in_order,
    logged,
    needs_chromium,
    scripted_entrypoint,
    send_text,
    skip_without_webrtc,
)

pytestmark = [
    ONE_LOOP,
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),  # the first test may build the SDK (npm ci: ~10 s)
    needs_chromium,
]

# which serve and open_page these tests use (the others: tests/io/conftest.py)
serve = _browser.serve_sdk_page
open_page = _browser.open_sdk_page

QUESTION_MIC = (0.6, QUESTION, 15.0)
SILENCE = (15.0,)
LONG_ANSWER = (
    "It is three o'clock in the afternoon, and the sun is still high above the hills, "
    "so there is plenty of time left for a walk before dinner, and even for a long one."
)
TURN_S = 15_000  # ms: each conversation must be over well within this


def _largest_gap_while_playing(played: list[dict[str, Any]]) -> float:
    """The longest wait (ms) between two reports while the count was still moving."""
    gaps = [
        b["t"] - a["t"]
        for a, b, c in zip(played, played[1:], played[2:], strict=False)
        if c["samples"] > b["samples"] and not a["cleared"]
    ]
    return max(gaps, default=0.0)


async def _check_answered(page: Any) -> None:
    agent = [e["state"] for e in await logged(page, "agentState")]
    assert in_order(agent, ["listening", "thinking", "speaking", "listening"]), agent
    users = [e["state"] for e in await logged(page, "userState")]
    assert in_order(users, ["listening", "speaking", "listening"]), users
    transcripts = await logged(page, "transcript")
    assert any(t["role"] == "user" and t["final"] and t["text"] == QUESTION for t in transcripts)
    finals = [t["text"] for t in transcripts if t["role"] == "agent" and t["final"]]
    assert finals == [ANSWER], finals
    played = await logged(page, "played")
    speaking_at = next(e["t"] for e in await logged(page, "agentState") if e["state"] == "speaking")
    first_played = next(e["t"] for e in played if e["samples"] > 0)
    assert first_played <= speaking_at  # speaking only once the client played something
    # at least every 100 ms while playing; the bound leaves room for a loaded machine
    assert 0 < _largest_gap_while_playing(played) < 150, played
    timeline = await logged(page, "timeline")
    assert {"agent_state", "ob_opened", "ob_closed"} <= {e["kind"] for e in timeline}
    assert await logged(page, "error") == []
    assert page.errors == []


# ------------------------------------------------------------------- tests


# ------------------------------------------------------------------- tests


@pytest.mark.parametrize("rate", [48000, 44100])
async def test_websocket_spoken_turn_is_answered(
    serve: Any, open_page: Any, mic_wav: Any, rate: int
) -> None:
    """The microphone at 48 or 44.1 kHz (the fake device and the audio context both at that
    rate), resampled by the capture worklet to the 16 kHz announced in ``start``."""
    url, _ = await serve(scripted_entrypoint([[ANSWER]], [QUESTION]))
    page = await open_page(url, mic_wav(*QUESTION_MIC, rate=rate))
    ready = await page.evaluate(
        "(o) => window.run(o)", {"transport": "websocket", "contextRate": rate}
    )
    assert ready["sampleRate"] == 22050 and ready["transport"] == "websocket"
    assert await page.evaluate("() => window.mark.rate") == rate
    await page.wait_for_function(SDK_ANSWERED, arg=ANSWER, timeout=TURN_S)
    await _check_answered(page)
    # 16000 samples a second went out, on the audio clock: the resampling ratio is right
    sent_rate = await page.evaluate("() => window.sentRate()")
    assert abs(sent_rate - 16000) < 0.02 * 16000, sent_rate
    stats = await page.evaluate("() => window.client.stats")
    assert stats["receivedSamples"] > 0.5 * 22050
    # every sample received was played, and the last report said so
    assert stats["playedSamples"] == stats["receivedSamples"], stats


async def test_webrtc_spoken_turn_is_answered(serve: Any, open_page: Any, mic_wav: Any) -> None:
    url, app = await serve(scripted_entrypoint([[ANSWER]], [QUESTION]))
    skip_without_webrtc(app)
    page = await open_page(url, mic_wav(*QUESTION_MIC))
    ready = await page.evaluate("(o) => window.run(o)", {"transport": "webrtc"})
    assert ready["sampleRate"] == 48000 and ready["transport"] == "webrtc"
    await page.wait_for_function(SDK_ANSWERED, arg=ANSWER, timeout=TURN_S)
    await _check_answered(page)
    played = await logged(page, "played")
    assert played[-1]["samples"] > 0.5 * 48000  # the track played out, at 48 kHz


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_a_clear_during_playback_is_answered_with_cleared(
    serve: Any, open_page: Any, mic_wav: Any, transport: str
) -> None:
    """``interrupt()`` while the agent speaks: the server sends ``clear``, the client drops
    its queue and reports where it stopped, marked ``cleared``; the history keeps what was
    heard."""
    url, app = await serve(scripted_entrypoint([[LONG_ANSWER]], []))
    if transport == "webrtc":
        skip_without_webrtc(app)
    page = await open_page(url, mic_wav(*SILENCE))
    await page.evaluate("(o) => window.run(o)", {"transport": transport})
    await send_text(page, "Tell me about the afternoon.")
    # speaking, and about a second of it heard
    await page.wait_for_function(
        "() => window.client.agentState === 'speaking' && window.client.stats.playedSamples"
        " > window.client.ready.sampleRate",
        timeout=TURN_S,
    )
    await page.evaluate("() => window.client.interrupt()")
    await page.wait_for_function(
        "() => window.log.some((e) => e.name === 'transcript' && e.role === 'agent' && e.final)",
        timeout=5000,
    )
    await page.wait_for_function("() => window.client.agentState === 'listening'", timeout=5000)
    # The answer to the clear may come after listening: the server waits 0.5 s at most
    # for it, and on a busy machine the WebRTC client's stats read can take longer (one
    # run in ~10 on 2 workers had none yet when listening came).
    await page.wait_for_function(
        "() => window.log.some((e) => e.name === 'played' && e.cleared)", timeout=5000
    )
    names = [e["name"] for e in await page.evaluate("() => window.log")]
    assert "clear" in names
    played = await logged(page, "played")
    cleared = [i for i, e in enumerate(played) if e["cleared"]]
    assert cleared, played
    # no other report between the clear and its answer
    clear_at = next(e["t"] for e in await logged(page, "clear"))
    assert all(e["t"] < clear_at or e["cleared"] for e in played[: cleared[0] + 1])
    final = next(t for t in await logged(page, "transcript") if t["role"] == "agent" and t["final"])
    assert final["interrupted"] is True
    assert LONG_ANSWER.startswith(final["text"][:10]) and len(final["text"]) < len(LONG_ANSWER)
    if transport == "websocket":
        stats = await page.evaluate("() => window.client.stats")
        assert stats["playedSamples"] < stats["receivedSamples"]  # the rest was dropped
        # nothing more played after the stop: the count stays where the clear left it
        assert played[-1]["samples"] == played[cleared[0]]["samples"], played[cleared[0] :]
    assert await logged(page, "error") == []
    assert page.errors == []


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_the_agent_ending_the_session_is_a_close_not_a_drop(
    serve: Any, open_page: Any, mic_wav: Any, transport: str
) -> None:
    """The server closing the session (1000; on WebRTC the data channel closed while the
    peer is connected) ends the client without an error, and nothing is reconnected."""
    goodbye = asyncio.Event()  # the agent says goodbye once the client is ready

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([]), vad=ScriptedVAD(), stt=ScriptedSTT([]), user_away_timeout=None
        )
        serving = asyncio.ensure_future(conn.serve(session, rj.Agent(instructions="Bye.")))
        await asyncio.wait_for(goodbye.wait(), 10)
        await session.aclose(reason="the agent said goodbye")
        await serving

    url, app = await serve(entrypoint)
    if transport == "webrtc":
        skip_without_webrtc(app)
    page = await open_page(url, mic_wav(*SILENCE))
    await page.evaluate("(o) => window.run(o)", {"transport": transport})
    goodbye.set()
    await page.wait_for_function("() => window.client.state === 'closed'", timeout=5000)
    closes = [{k: v for k, v in e.items() if k != "t"} for e in await logged(page, "close")]
    assert closes == [{"name": "close", "error": None, "byUser": False}]
    await page.wait_for_timeout(300)  # a reconnect would start within 100 ms
    assert await logged(page, "reconnecting") == []
    assert await page.evaluate("() => window.client.state") == "closed"
    assert page.errors == []


async def test_a_refused_microphone_fails_connect_and_says_why(
    serve: Any, open_page: Any, mic_wav: Any
) -> None:
    url, _ = await serve(scripted_entrypoint([], []))
    page = await open_page(url, mic_wav(*SILENCE), microphone_allowed=False)
    error = await page.evaluate(
        "(o) => window.run(o).then(() => null, (e) => ({ code: e.code, message: e.message }))",
        {"transport": "websocket"},
    )
    assert error is not None and error["code"] == "microphone_unavailable", error
    assert "permission to use the microphone was denied" in error["message"]
    assert await page.evaluate("() => window.client.state") == "closed"
    assert await page.evaluate("() => window.client.media.context") is None  # released


async def test_a_page_whose_policy_forbids_blob_workers_loads_the_worklet_file(
    serve: Any, open_page: Any, mic_wav: Any
) -> None:
    """The embedded worklet loads from a blob: URL; a Content-Security-Policy without
    ``blob:`` refuses it, and the error names the way out: ``workletUrl``, with the
    package's ``dist/worklet.js``, which then works."""
    url, _ = await serve(scripted_entrypoint([["Hello there."]], []))
    page = await open_page(url, mic_wav(*SILENCE), query="?csp=1")
    error = await page.evaluate(
        "(o) => window.run(o).then(() => null, (e) => ({ code: e.code, message: e.message }))",
        {"transport": "websocket"},
    )
    assert error is not None and error["code"] == "audio_worklet_unavailable", error
    assert "workletUrl" in error["message"]
    ready = await page.evaluate(
        "(o) => window.run(o)", {"transport": "websocket", "workletUrl": "/sdk/worklet.js"}
    )
    assert ready["sampleRate"] == 22050
    await send_text(page, "Hello")
    await page.wait_for_function(SDK_ANSWERED, arg="Hello there.", timeout=TURN_S)
