"""The page's strips and measurements in headless Chromium (tests/io/_browser.py), against
a real app on 127.0.0.1 in real time: the floor strip draws the live timeline over each
transport, and a measurement reads in plain words with the right units.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rejoinder.testing import ToolCall

from . import _browser
from ._browser import (
    AGENT_IS,
    ONE_LOOP,
    ClockAgent,
    MicWav,
    needs_chromium,
    screenshot,
    scripted_entrypoint,
    skip_without_webrtc,
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

SILENCE = (15.0,)


@needs_bundle
@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_the_floor_strip_draws_the_live_timeline(
    serve: Any, open_page: Any, mic_wav: MicWav, tmp_path: Path, transport: str
) -> None:
    url, app = await serve(
        scripted_entrypoint([[ToolCall("check_clock")], ["Hello there."]], [], ClockAgent)
    )
    if transport == "webrtc":
        skip_without_webrtc(app)
    page = await open_page(url, mic_wav(*SILENCE))
    await page.click(f"#t-{transport}")
    await page.click("#connect")
    await page.wait_for_function("() => !document.querySelector('#text').disabled")
    await page.wait_for_function("() => window.rejoinder.audio.rate > 0")
    # the text box opens with the connection, but text before the agent is ready is
    # refused (not_ready): the agent has started once it is listening
    await page.wait_for_function(AGENT_IS, arg="listening")
    await page.fill("#text", "What time is it?")
    await page.press("#text", "Enter")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('.msg.agent')].some((el) => "
        "el.textContent === 'Hello there.' && !el.classList.contains('interim'))",
        timeout=15000,
    )
    await page.wait_for_function(
        "() => document.querySelector('#agent-state').dataset.state === 'listening'"
    )
    # the strip catches up on its next redraw (at most 200 ms)
    await page.wait_for_function(
        "() => Number(document.querySelector('#floor').dataset.bars) >= 1"
        " && document.querySelector('#floor').dataset.open === ''",
        timeout=2000,
    )
    entries = await page.evaluate("() => window.rejoinder.timeline")
    kinds = {e["kind"] for e in entries}
    assert {"agent_state", "ob_opened", "ob_closed"} <= kinds
    assert "transcript" not in kinds
    obs = {e["ob"] for e in entries if e["kind"] == "ob_opened"}
    assert "reply" in obs
    await screenshot(page, tmp_path, f"floor_{transport}")
    assert not page.errors


@needs_bundle
async def test_measurements_read_in_plain_words_and_the_right_units(
    serve: Any, open_page: Any, mic_wav: MicWav
) -> None:
    url, _ = await serve(scripted_entrypoint([], []))
    page = await open_page(url, mic_wav(*SILENCE))
    shown = await page.evaluate(
        """async () => {
      const { describe } = await import("./metrics.js");
      return [
        describe({ type: "eou", timestamp: 812.5, label: "rejoinder.session.UserTurns",
          end_of_utterance_delay: 0.42, transcription_delay: 1.5, end_of_turn_probability: 0.87 }),
        describe({ type: "llm", timestamp: 813.1, speech_id: "s1", model: "gpt-4o-mini",
          ttft: 0.2, duration: 12.34, prompt_tokens: 120, completion_tokens: 9 }),
      ];
    }"""
    )
    eou, llm = shown
    assert eou["name"] == "End of your turn" and eou["term"].startswith("eou")
    assert [(p["label"], p["term"], p["text"]) for p in eou["parts"]] == [
        ("turn ended after", "end_of_utterance_delay", "0.42 s"),
        ("text ready after", "transcription_delay", "1.50 s"),
        ("sure you were done", "end_of_turn_probability", "87 %"),  # a probability, not a time
    ]
    assert llm["term"] == "llm metrics · gpt-4o-mini"
    assert [(p["term"], p["text"]) for p in llm["parts"]] == [
        ("ttft", "0.20 s"),
        ("duration", "12.3 s"),
        ("prompt_tokens", "120"),
        ("completion_tokens", "9"),
    ]
    assert not page.errors
