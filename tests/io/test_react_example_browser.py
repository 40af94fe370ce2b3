"""The React example (clients/react/example, on ``@rejoinder/react``) in headless Chromium,
built as a user would build it, talking to a real app on 127.0.0.1 in real time.

The example is built with npm (``npm ci`` in clients/js and clients/react when their
node_modules are missing, then each package's build and ``npm run build:example``) and
served by the app next to its ``/ws`` with ``add_example_routes`` from the example's
``serve.py``. Chromium's fake microphone plays a WAV that eSpeak NG spoke; the app's entry
point runs the test kit's energy VAD and scripted STT/LLM with eSpeak NG as the TTS. The
test clicks the page's buttons and reads only what the page shows: the indicator's word
and ``title`` as they change (a MutationObserver records them), the transcript, the
buttons and the error line (and, for Mute, the frame the page sent). A screenshot goes to
``$REJOINDER_SCREENSHOTS`` when set.

Skipped, saying why, without npm, without Debian's ``chromium`` or without Playwright.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import tempfile
import wave
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedVAD

CHROMIUM = "/usr/bin/chromium"
CLIENTS = Path(__file__).parents[2] / "clients"
SDK = CLIENTS / "js"
REACT = CLIENTS / "react"
EXAMPLE_DIST = REACT / "example" / "dist"
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")
pytestmark = [
    pytest.mark.looptime(False),
    # A build from nothing (npm ci in both packages) takes most of this; built already
    # (make builds it first), each test is a few seconds, its waits bounded by TURN_MS.
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
    pytest.mark.skipif(
        shutil.which("npm") is None, reason="npm is missing: the example cannot be built"
    ),
]

QUESTION = "What time is it?"
ANSWER = "It is three o'clock."
TURN_MS = 15_000

# Before the page's own scripts: records each word and title the indicator shows.
RECORD_INDICATOR = """
window.shown = [];
new MutationObserver(() => {
  const status = document.querySelector('[role="status"]');
  if (status === null) return;
  const now = [status.title, status.textContent];
  const last = window.shown.at(-1);
  if (!last || last[0] !== now[0] || last[1] !== now[1]) window.shown.push(now);
}).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
"""


# ---------------------------------------------------------------- building


def _stale(bundle: Path, sources: list[Path]) -> bool:
    """``bundle`` is missing or older than one of ``sources``."""
    return not bundle.exists() or max(p.stat().st_mtime for p in sources) > bundle.stat().st_mtime


def _npm(folder: Path, *args: str, timeout: float) -> None:
    done = subprocess.run(
        ["npm", *args], cwd=folder, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        pytest.fail(
            f"npm {' '.join(args)} in {folder} failed:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )


def _build(folder: Path, lock_name: str, stale: Callable[[], bool], *scripts: str) -> None:
    """``npm ci`` when needed, then ``npm run <script>`` for each of ``scripts`` when
    ``stale()``: one test process at a time (a second pytest worker must not rewrite a
    bundle that the first is serving)."""
    lock = Path(tempfile.gettempdir()) / lock_name
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (folder / "node_modules" / ".bin" / "esbuild").exists():
            _npm(folder, "ci", "--no-audit", "--no-fund", timeout=300)
        if stale():
            for script in scripts:
                _npm(folder, "run", script, timeout=120)


@pytest.fixture(scope="module")
def example() -> Path:
    """clients/react/example/dist, built (and clients/js, which it bundles, first)."""

    def sdk_stale() -> bool:  # as tests/io/test_js_sdk_browser.py decides it
        sources = [
            *(SDK / "src").rglob("*.ts"),
            SDK / "scripts" / "build.mjs",
            SDK / "package.json",
        ]
        return _stale(SDK / "dist" / "index.js", sources)

    def example_stale() -> bool:
        sources = [
            *(REACT / "src").glob("*.ts*"),
            *(REACT / "example").glob("*.tsx"),
            REACT / "example" / "index.html",
            REACT / "example" / "build.mjs",
            SDK / "dist" / "index.js",  # bundled into the example
        ]
        return _stale(EXAMPLE_DIST / "app.js", sources)

    # The same lock as tests/io/test_js_sdk_browser.py's build of the SDK.
    _build(SDK, "rejoinder-js-sdk-build.lock", sdk_stale, "build")
    _build(REACT, "rejoinder-react-example-build.lock", example_stale, "build:example")
    return EXAMPLE_DIST


def _example_routes() -> Callable[[web.Application, Path], None]:
    """``add_example_routes`` from clients/react/example/serve.py (not a package)."""
    spec = importlib.util.spec_from_file_location(
        "_rejoinder_react_example_serve", REACT / "example" / "serve.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    routes: Callable[[web.Application, Path], None] = module.add_example_routes
    return routes


# ---------------------------------------------------------------- fixtures


def _wav(path: Path, parts: list[str | float]) -> Path:
    """48 kHz mono 16-bit: strings are spoken by eSpeak NG, floats are seconds of silence."""
    espeak = pytest.importorskip("rejoinder.providers.local.espeak")
    soxr = pytest.importorskip("soxr")
    chunks = []
    for part in parts:
        if isinstance(part, float):
            chunks.append(np.zeros(round(part * 48000), np.float32))
        else:
            pcm = espeak._render(part, "en-us", 175).astype(np.float32) / 32768
            chunks.append(soxr.resample(pcm, espeak.SAMPLE_RATE, 48000))
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48000)
        out.writeframes((np.clip(np.concatenate(chunks), -1, 1) * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _wav(tmp_path_factory.mktemp("mic") / "question.wav", [0.6, QUESTION, 15.0])


async def _entrypoint(conn: Connection) -> None:
    from rejoinder.providers.local import EspeakTTS

    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([[ANSWER]]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT([QUESTION]),
        tts=EspeakTTS(),
        user_away_timeout=None,
        min_endpointing_delay=0.1,
    )
    await conn.serve(session, rj.Agent(instructions="You tell the time."))


@pytest.fixture
async def example_url(example: Path) -> AsyncIterator[str]:
    """A real app on 127.0.0.1 serving the agent and, at ``/``, the built example."""
    app = create_app(_entrypoint, page=False)
    _example_routes()(app, example)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/"))
    await server.close()


@pytest.fixture
async def open_page() -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """A headless Chromium page at ``url`` whose microphone plays ``wav`` once."""
    async with playwright_api.async_playwright() as pw:
        browsers: list[Any] = []

        async def start(url: str, wav: Path, *, microphone_allowed: bool = True) -> Any:
            permission = (
                "--use-fake-ui-for-media-stream"
                if microphone_allowed
                else "--deny-permission-prompts"
            )
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--use-fake-device-for-media-stream",
                    permission,
                    f"--use-file-for-fake-audio-capture={wav}%noloop",
                    "--autoplay-policy=no-user-gesture-required",
                ],
            )
            browsers.append(browser)
            page = await browser.new_page()
            page.errors = []
            page.on("pageerror", lambda exc: page.errors.append(str(exc)))
            page.sent_text = []  # the text frames the page sent on its WebSockets

            def on_socket(socket: Any) -> None:
                socket.on("framesent", lambda p: isinstance(p, str) and page.sent_text.append(p))

            page.on("websocket", on_socket)
            await page.add_init_script(RECORD_INDICATOR)
            await page.goto(url)
            await page.get_by_role("button", name="Talk").wait_for(timeout=5000)
            return page

        yield start
        for browser in browsers:
            await browser.close()


def _in_order(seen: list[str], wanted: list[str]) -> bool:
    it = iter(seen)
    return all(item in it for item in wanted)


# ------------------------------------------------------------------- tests


async def test_the_example_talks_to_an_agent(
    example_url: str, open_page: Any, question_wav: Path
) -> None:
    """Talk: the indicator goes connecting, listening, thinking, speaking, listening (in
    words, with the states on ``title``); the question and the answer appear as turns;
    Mute and Hang up do what they say."""
    page = await open_page(example_url, question_wav)
    assert await page.locator('[role="status"]').get_attribute("title") == "idle"
    await page.get_by_role("button", name="Talk").click()
    await page.get_by_text(f"Agent: {ANSWER}").wait_for(timeout=TURN_MS)
    await page.get_by_text(f"You: {QUESTION}").wait_for(timeout=1000)
    await page.wait_for_function(
        "() => document.querySelector('[role=\"status\"]').title === 'listening'",
        timeout=TURN_MS,
    )
    shown: list[list[str]] = await page.evaluate("() => window.shown")
    titles = [title for title, _ in shown]
    assert _in_order(
        titles, ["idle", "connecting", "listening", "thinking", "speaking", "listening"]
    ), shown
    words = dict(map(tuple, shown))
    assert words["connecting"] == "Connecting" and words["speaking"] == "Speaking", shown
    assert words["listening"] == "Listening" and words["thinking"] == "Thinking", shown
    # one agent turn, final: an interim shown while it played was replaced in place
    assert await page.locator("p.agent").count() == 1
    if folder := os.environ.get("REJOINDER_SCREENSHOTS"):
        await page.screenshot(path=str(Path(folder) / "react-example.png"))

    await page.get_by_role("button", name="Mute").click()
    await page.get_by_role("button", name="Unmute").wait_for(timeout=1000)
    await page.wait_for_timeout(0)  # let Playwright deliver the frame events
    assert '{"type":"mute","muted":true}' in page.sent_text, page.sent_text
    await page.get_by_role("button", name="Hang up").click()
    await page.get_by_role("button", name="Talk").wait_for(timeout=5000)
    status = page.locator('[role="status"]')
    assert await status.get_attribute("title") == "closed"
    assert await status.text_content() == "Not connected"
    assert await page.locator('[role="alert"]').count() == 0
    assert await page.get_by_text(f"Agent: {ANSWER}").count() == 1  # the transcript stays
    assert page.errors == []


async def test_a_refused_microphone_is_said_on_the_page(
    example_url: str, open_page: Any, question_wav: Path
) -> None:
    page = await open_page(example_url, question_wav, microphone_allowed=False)
    await page.get_by_role("button", name="Talk").click()
    alert = page.locator('[role="alert"]')
    await alert.wait_for(timeout=5000)
    assert "permission to use the microphone was denied" in (await alert.text_content() or "")
    assert await page.locator('[role="status"]').get_attribute("title") == "closed"
    assert await page.get_by_role("button", name="Talk").is_enabled()
    assert page.errors == []
