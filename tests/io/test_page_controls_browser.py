"""The page's controls in headless Chromium (tests/io/_browser.py), against a real app on
127.0.0.1 in real time, over each transport, in one conversation: Mute keeps the
microphone from the agent until unmuted (the agent hears silence, and only the question
asked after unmuting), and Stop interrupts the agent's answer, keeping what was heard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import _browser
from ._browser import (
    AGENT_IS,
    ONE_LOOP,
    QUESTION,
    MicWav,
    needs_chromium,
    page_state,
    screenshot,
    scripted_entrypoint,
    skip_without_webrtc,
    speech_seconds,
)

pytestmark = [
    ONE_LOOP,
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),  # the first test may build the SDK (npm ci: ~10 s)
    needs_chromium,
]

# which serve and open_page these tests use (the others: tests/io/conftest.py)
serve = _browser.serve_page
open_page = _browser.open_page
needs_bundle = pytest.mark.usefixtures("page_bundle")

LONG_ANSWER = (
    "It is three o'clock in the afternoon, and the sun is still high above the hills, "
    "so there is plenty of time left for a walk before dinner."
)
# Mute: silence, the question (asked muted), a pause, the question again (asked unmuted).
# The page is muted ~0.3 s into the microphone's audio (0.5 s at most seen), and unmuted
# ~0.7 s after the first question ended (0.5 s of them waited for on purpose): 2 s
# each leave a second and more to a loaded machine.
MUTED_LEAD, UNMUTED_AFTER = 2.0, 2.0


@needs_bundle
@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_mute_keeps_the_microphone_from_the_agent_and_stop_interrupts_it(
    serve: Any,
    open_page: Any,
    mic_wav: MicWav,
    tmp_path: Path,
    transport: str,
) -> None:
    """Both controls in one conversation (each needs a spoken turn answered, the slowest
    thing here): muted, the first question goes unheard; unmuted, the second is answered
    at length; Stop cuts that answer, keeping what was heard; after a disconnect the next
    conversation starts unmuted."""
    wav = mic_wav(MUTED_LEAD, QUESTION, UNMUTED_AFTER, QUESTION, 15.0)
    first_starts = MUTED_LEAD  # seconds into the microphone's audio
    first_ends = MUTED_LEAD + speech_seconds(QUESTION)
    url, app = await serve(scripted_entrypoint([[LONG_ANSWER]], [QUESTION]))
    if transport == "webrtc":
        skip_without_webrtc(app)
    page = await open_page(url, wav)
    assert await page.is_disabled("#stop")  # nothing to stop before connecting
    await page.click(f"#t-{transport}")
    assert await page.is_disabled("#mute")  # for a conversation under way
    await page.click("#connect")
    await page.click("#mute", timeout=10000)  # once the agent has entered
    assert await page.get_attribute("#mute", "aria-pressed") == "true"
    assert await page.text_content("#mute") == "Unmute"
    # The audio clock started before the microphone opened: the mic has played no more
    # than the clock says, so the first question is still to come.
    clock = "window.rejoinder.client.media.context.currentTime"
    assert await page.evaluate(f"() => {clock}") < first_starts
    # ... and it opened before the client was ready: once the clock has run past the first
    # question's end (and the VAD's silence) since then, so has the microphone.
    ready_at = await page.evaluate(
        "() => window.rejoinder.events.find((e) => e.type === 'ready').t"
    )
    ready_clock = await page.evaluate(
        f"(at) => {clock} - (performance.now() - at) / 1000", ready_at
    )
    await page.wait_for_function(f"(t) => {clock} >= t", arg=ready_clock + first_ends + 0.5)
    muted = await page_state(page)
    assert await page.text_content("#mic-meta") == "muted: the agent hears silence"
    await page.click("#mute")  # the second question is heard
    unmuted_at = await page.evaluate("() => performance.now()")
    assert await page.get_attribute("#mute", "aria-pressed") == "false"
    # the answer's first words were heard (its interim transcript follows playback)
    await page.wait_for_function(
        "() => document.querySelector('#agent-state').dataset.state === 'speaking'"
        " && document.querySelector('.msg.agent.interim')?.textContent.includes(' ')",
        timeout=15000,
    )
    await page.click("#stop")
    await page.wait_for_function(
        "() => document.querySelector('.msg.agent.cut') !== null", timeout=10000
    )
    await page.wait_for_function(AGENT_IS, arg="listening")
    seen = await page_state(page)
    await screenshot(page, tmp_path, f"controls_{transport}")
    # Mute: nothing of the first question reached the agent
    assert "speaking" not in muted["user"], muted["user"]
    assert not [text for cls, text in muted["bubbles"] if "user" in cls]
    if transport == "websocket":
        assert muted["mic"]["sent"] > 16000  # the clock of audio went on: zeros
    spoke = await page.evaluate(
        "() => window.rejoinder.states.filter((s) => s.who === 'user' && s.state === 'speaking')"
        ".map((s) => s.t)"
    )
    assert spoke and min(spoke) >= unmuted_at  # the user spoke only once unmuted
    assert [text for cls, text in seen["bubbles"] if "user" in cls] == [QUESTION]
    # Stop: the answer cut where the page was, the rest dropped
    assert "clear" in seen["types"]
    assert seen["audio"]["cleared"] >= 1  # the page said where it stopped
    if transport == "websocket":
        assert seen["audio"]["played"] < seen["audio"]["received"]  # the rest was dropped
    cut = next(text for cls, text in seen["bubbles"] if "cut" in cls)
    assert LONG_ANSWER.startswith(cut[:10])
    assert len(cut) < len(LONG_ANSWER)  # what was heard, not what was sent
    assert seen["user"].count("speaking") == 1  # the button stopped it, not a barge-in
    assert await page.is_disabled("#stop")  # the agent is listening: nothing to stop
    assert not seen["errors"] and not page.errors
    await page.click("#connect")  # disconnect: the next conversation starts unmuted
    await page.wait_for_function("() => !window.rejoinder.connected")
    assert await page.get_attribute("#mute", "aria-pressed") == "false"
    assert await page.evaluate("() => window.rejoinder.client.muted") is False
