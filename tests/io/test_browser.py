"""The page in headless Chromium, talking to a real app on 127.0.0.1 in real time.

The page runs on the TypeScript SDK (``@rejoinder/client``): ``rejoinder-client.js`` beside
it is a copy of ``clients/js/dist/index.js``, which ``make demo`` builds and copies, and
which the ``page_bundle`` fixture builds and copies when it is missing or older than the
SDK's sources (skipping, saying why, without npm).

Chromium's fake microphone plays a WAV that eSpeak NG spoke; the app's entry point runs
the test kit's energy VAD and scripted STT/LLM with eSpeak NG as the TTS, so the answer
is real speech. Each test checks what the page showed (``window.rejoinder``, filled from
the client's events, and the DOM): the user's turn, a tool call,
``thinking -> speaking -> listening``, the answer's transcript and audio that played; the
Mute and Stop buttons; and, without the bundle, a page that says so instead of a blank one.

Needs Debian's ``chromium`` (``make test`` installs it) and Playwright for Python, which
drives it through ``executable_path`` (Playwright's own browser download is not used).
Screenshots go to ``$REJOINDER_SCREENSHOTS`` when set (else the test's tmp dir).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
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
from rejoinder.io import Connection, create_app, static
from rejoinder.io.static import BUNDLE_MISSING, CLIENT_BUNDLE, page_routes
from rejoinder.testing import Fail, ScriptedLLM, ScriptedSTT, ScriptedVAD, ToolCall

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).parents[2]
SDK = ROOT / "clients" / "js"
STATIC = ROOT / "src" / "rejoinder" / "io" / "static"
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")
pytestmark = [
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),  # the first test may build the SDK (npm ci: ~10 s)
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]

QUESTION = "What time is it?"
ANSWER = "It is three o'clock."
LONG_ANSWER = (
    "It is three o'clock in the afternoon, and the sun is still high above the hills, "
    "so there is plenty of time left for a walk before dinner."
)
SHOWED_ANSWER = """() => {
  const agent = window.rejoinder.states.filter((s) => s.who === "agent").map((s) => s.state);
  const at = agent.indexOf("speaking");
  return at > 0 && agent.slice(at).includes("listening");
}"""


class Assistant(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You tell the time.")

    @rj.function_tool
    async def check_clock(self) -> str:
        """Read the clock."""
        await asyncio.sleep(0.3)
        return "three o'clock"


needs_bundle = pytest.mark.usefixtures("page_bundle")

# ---------------------------------------------------------------- fixtures


def _older_than_sources(path: Path) -> bool:
    """``path`` is missing or older than the SDK's sources."""
    if not path.exists():
        return True
    sources = [*(SDK / "src").rglob("*.ts"), SDK / "scripts" / "build.mjs", SDK / "package.json"]
    return max(source.stat().st_mtime for source in sources) > path.stat().st_mtime


@pytest.fixture(scope="module")
def page_bundle() -> Path:
    """The SDK bundle beside the page (what ``make demo`` puts there): built with npm and
    copied when missing or stale, one test process at a time (the lock is the one
    tests/io/test_js_sdk_browser.py builds under: nobody rewrites the bundle another
    worker is serving). The copy is renamed into place, never written where it is read."""
    copy, built = STATIC / CLIENT_BUNDLE, SDK / "dist" / "index.js"

    def npm(*args: str, timeout: float) -> None:
        done = subprocess.run(
            ["npm", *args], cwd=SDK, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            pytest.fail(
                f"npm {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )

    lock = Path(tempfile.gettempdir()) / "rejoinder-js-sdk-build.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        stale = _older_than_sources(copy) or (
            built.exists() and built.stat().st_mtime > copy.stat().st_mtime
        )
        if stale:
            if _older_than_sources(built):
                if shutil.which("npm") is None:
                    pytest.skip(
                        f"npm is missing: the page's client bundle ({copy}) cannot be built"
                    )
                if not (SDK / "node_modules" / ".bin" / "esbuild").exists():
                    npm("ci", "--no-audit", "--no-fund", timeout=300)
                npm("run", "build", timeout=120)
            with tempfile.NamedTemporaryFile(dir=STATIC, suffix=".part", delete=False) as part:
                part.write(built.read_bytes())
            os.replace(part.name, copy)
    return copy


def _speech_48k(text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    espeak = pytest.importorskip("rejoinder.providers.local.espeak")
    soxr = pytest.importorskip("soxr")
    pcm = espeak._render(text, "en-us", 175)
    resampled: np.ndarray[Any, np.dtype[np.float32]] = soxr.resample(
        pcm.astype(np.float32) / 32768, espeak.SAMPLE_RATE, 48000
    )
    return resampled


def _write_wav(path: Path, parts: list[np.ndarray[Any, np.dtype[np.float32]] | float]) -> Path:
    """48 kHz mono 16-bit: arrays are audio, floats are seconds of silence."""
    audio = np.concatenate(
        [np.zeros(round(p * 48000), np.float32) if isinstance(p, float) else p for p in parts]
    )
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48000)
        out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mic")
    return _write_wav(folder / "question.wav", [0.6, _speech_48k(QUESTION), 15.0])


@pytest.fixture(scope="module")
def barge_in_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The question, then, while the long answer plays, the user talks over it."""
    folder = tmp_path_factory.mktemp("mic")
    question = _speech_48k(QUESTION)
    return _write_wav(folder / "barge_in.wav", [0.6, question, 3.0, _speech_48k("Stop."), 15.0])


@pytest.fixture(scope="module")
def two_questions_wav(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float, float]:
    """4 s of silence, the question, 4 s, the question again; when the first one starts
    and when it ends (seconds)."""
    folder = tmp_path_factory.mktemp("mic")
    question = _speech_48k(QUESTION)
    path = _write_wav(folder / "two_questions.wav", [4.0, question, 4.0, question, 15.0])
    return path, 4.0, 4.0 + len(question) / 48000


@pytest.fixture(scope="module")
def silent_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_wav(tmp_path_factory.mktemp("mic") / "silence.wav", [15.0])


def _entrypoint(replies: list[list[Any]], transcripts: list[str]) -> Any:
    async def entrypoint(conn: Connection) -> None:
        from rejoinder.providers.local import EspeakTTS

        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM(replies),
            vad=ScriptedVAD(),
            stt=ScriptedSTT(transcripts),
            tts=EspeakTTS(),
            user_away_timeout=None,
            min_endpointing_delay=0.1,
        )
        await conn.serve(session, Assistant())

    return entrypoint


def _has_route(app: web.Application, method: str, path: str) -> bool:
    return any(
        route.method == method and route.resource is not None and route.resource.canonical == path
        for route in app.router.routes()
    )


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[tuple[str, web.Application]]]]:
    servers: list[TestServer] = []

    async def start(entrypoint: Any) -> tuple[str, web.Application]:
        app = create_app(entrypoint)
        if not _has_route(app, "GET", "/"):  # until the app mounts the page itself
            app.add_routes(page_routes())
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/")), app

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def open_page() -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """A headless Chromium page whose microphone plays ``wav`` (once)."""
    async with playwright_api.async_playwright() as pw:
        browsers: list[Any] = []

        async def start(url: str, wav: Path, video: Path | None = None) -> Any:
            camera = [f"--use-file-for-fake-video-capture={video}"] if video else []
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--use-fake-device-for-media-stream",
                    "--use-fake-ui-for-media-stream",
                    f"--use-file-for-fake-audio-capture={wav}%noloop",
                    *camera,
                    "--allow-loopback-in-peer-connection",
                    "--autoplay-policy=no-user-gesture-required",
                ],
            )
            browsers.append(browser)
            page = await browser.new_page(viewport={"width": 1100, "height": 820})
            page.errors = []
            page.on("pageerror", lambda exc: page.errors.append(str(exc)))
            await page.goto(url)
            return page

        yield start
        for browser in browsers:
            await browser.close()


async def _screenshot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("REJOINDER_SCREENSHOTS") or tmp_path)
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    await page.wait_for_timeout(300)  # let the state swatches finish their transition
    await page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


async def _seen(page: Any) -> dict[str, Any]:
    seen: dict[str, Any] = await page.evaluate(
        """() => {
      const R = window.rejoinder;
      return {
        agent: R.states.filter((s) => s.who === "agent").map((s) => [s.state, s.t]),
        user: R.states.filter((s) => s.who === "user").map((s) => s.state),
        types: R.events.map((e) => e.type),
        audio: R.audio, errors: R.errors, mic: R.mic,
        shown: document.querySelector("#agent-state").dataset.state,
        bubbles: [...document.querySelectorAll(".msg")].map((el) => [el.className, el.textContent]),
        tools: [...document.querySelectorAll(".chip")].map((el) => el.textContent),
      };
    }"""
    )
    return seen


def _in_order(states: list[str], wanted: list[str]) -> bool:
    it = iter(states)
    return all(state in it for state in wanted)


async def _converse(page: Any, transport: str) -> dict[str, Any]:
    await page.click(f"#t-{transport}")
    await page.click("#connect")
    await page.wait_for_function(SHOWED_ANSWER, timeout=15000)
    return await _seen(page)


def _check_answer(seen: dict[str, Any]) -> None:
    agent = [state for state, _ in seen["agent"]]
    assert _in_order(agent, ["listening", "thinking", "speaking", "listening"]), agent
    assert _in_order(seen["user"], ["listening", "speaking", "listening"]), seen["user"]
    assert seen["shown"] == "listening"
    assert ["msg user", QUESTION] in seen["bubbles"], seen["bubbles"]
    assert ["msg agent", ANSWER] in seen["bubbles"], seen["bubbles"]
    assert any("check_clock" in chip and "running" not in chip for chip in seen["tools"])
    assert "tool" in seen["types"]
    assert not seen["errors"]
    # Playback truth: speaking began only once the page had played something.
    speaking_at = next(t for state, t in seen["agent"] if state == "speaking")
    assert seen["audio"]["firstPlayed"] is not None
    assert seen["audio"]["firstPlayed"] <= speaking_at
    # The page reports at least every 100 ms while playing (40-65 ms measured); the bound
    # leaves room for a loaded machine delaying the page's main thread.
    assert 0 < seen["audio"]["maxGap"] < 150, seen["audio"]["maxGap"]


# ------------------------------------------------------------------- tests


@needs_bundle
async def test_websocket_page_shows_the_answer_it_played(
    serve: Any, open_page: Any, question_wav: Path, tmp_path: Path
) -> None:
    url, _ = await serve(_entrypoint([[ToolCall("check_clock")], [ANSWER]], [QUESTION]))
    page = await open_page(url, question_wav)
    seen = await _converse(page, "websocket")
    await _screenshot(page, tmp_path, "websocket")
    _check_answer(seen)
    assert seen["mic"]["sent"] > 16000  # over a second of microphone audio went out
    audio = seen["audio"]
    assert audio["rate"] == 22050  # eSpeak NG's rate: the server sent it as is
    assert audio["received"] > 0.5 * audio["rate"]
    assert audio["played"] == audio["received"]  # every sample played, and reported
    # listening came after the page played the last sample, not when the audio arrived
    listening_at = [t for state, t in seen["agent"] if state == "listening"][-1]
    assert audio["lastPlayed"] <= listening_at
    assert not page.errors


@needs_bundle
@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_barge_in_keeps_what_was_heard(
    serve: Any, open_page: Any, barge_in_wav: Path, tmp_path: Path, transport: str
) -> None:
    url, app = await serve(_entrypoint([[LONG_ANSWER], ["Okay."]], [QUESTION, "Stop."]))
    if transport == "webrtc" and not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, barge_in_wav)
    await page.click(f"#t-{transport}")
    await page.click("#connect")
    await page.wait_for_function(
        "() => document.querySelector('.msg.agent.cut') !== null", timeout=15000
    )
    seen = await _seen(page)
    await _screenshot(page, tmp_path, f"barge_in_{transport}")
    assert "clear" in seen["types"]
    assert seen["audio"]["cleared"] >= 1  # the page said where it stopped
    if transport == "websocket":
        assert seen["audio"]["played"] < seen["audio"]["received"]  # the rest was dropped
    cut = next(text for cls, text in seen["bubbles"] if "cut" in cls)
    assert LONG_ANSWER.startswith(cut[:10])
    assert len(cut) < len(LONG_ANSWER)  # what was heard, not what was sent
    assert not seen["errors"]
    assert not page.errors


@needs_bundle
async def test_webrtc_page_shows_the_answer_it_played(
    serve: Any, open_page: Any, question_wav: Path, tmp_path: Path
) -> None:
    url, app = await serve(_entrypoint([[ToolCall("check_clock")], [ANSWER]], [QUESTION]))
    if not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, question_wav)
    seen = await _converse(page, "webrtc")
    await _screenshot(page, tmp_path, "webrtc")
    _check_answer(seen)
    audio = seen["audio"]
    assert audio["rate"] == 48000
    assert audio["played"] > 0.5 * 48000
    assert audio["energy"] > 0  # the played track carried sound, not only silence
    assert not page.errors


def _solid_y4m(path: Path, rgb: tuple[int, int, int], width: int = 640, height: int = 480) -> Path:
    """A Y4M video of one colour (Chromium's fake camera plays it in a loop)."""
    r, g, b = rgb
    y = round(0.299 * r + 0.587 * g + 0.114 * b)
    u = round(128 - 0.168736 * r - 0.331264 * g + 0.5 * b)
    v = round(128 + 0.5 * r - 0.418688 * g - 0.081312 * b)
    frame = b"FRAME\n" + bytes([y]) * (width * height)
    frame += bytes([u]) * (width * height // 4) + bytes([v]) * (width * height // 4)
    header = f"YUV4MPEG2 W{width} H{height} F5:1 Ip A1:1 C420jpeg\n".encode()
    path.write_bytes(header + frame * 5)
    return path


def _name_the_colour(ctx: rj.ChatContext) -> list[str]:
    import av

    images = ctx.messages()[-1].images
    if not images or images[0].data is None:
        return ["I see nothing."]
    frame = av.CodecContext.create("mjpeg", "r").decode(av.Packet(images[0].data))[0]
    red, green, blue = frame.to_ndarray(format="rgb24").mean(axis=(0, 1))
    return ["I see red." if red > max(green, blue) + 60 else "I see no red."]


@needs_bundle
async def test_the_camera_is_shared_and_the_model_sees_a_still_of_it(
    serve: Any, open_page: Any, question_wav: Path, tmp_path: Path
) -> None:
    async def entrypoint(conn: Connection) -> None:
        from rejoinder.providers.local import EspeakTTS

        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM(_name_the_colour),
            vad=ScriptedVAD(),
            stt=ScriptedSTT([QUESTION]),
            tts=EspeakTTS(),
            user_away_timeout=None,
            min_endpointing_delay=0.1,
        )
        await conn.serve(session, rj.Agent(instructions="You can see."))

    url, app = await serve(entrypoint)
    if not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, question_wav, _solid_y4m(tmp_path / "red.y4m", (220, 20, 20)))
    await page.click("#t-websocket")
    assert await page.is_disabled("#camera")  # the camera goes over WebRTC only
    await page.click("#t-webrtc")
    await page.click("#camera")
    assert await page.get_attribute("#camera", "aria-pressed") == "true"
    seen = await _converse(page, "webrtc")
    assert await page.is_visible("#camera-preview")
    await _screenshot(page, tmp_path, "camera")
    assert ["msg agent", "I see red."] in seen["bubbles"], seen["bubbles"]
    assert not seen["errors"] and not page.errors
    await page.click("#connect")  # disconnect: the camera stops, its preview goes
    await page.wait_for_function("() => document.querySelector('#camera-preview').hidden")


@needs_bundle
async def test_typed_text_is_answered_and_errors_are_shown(
    serve: Any, open_page: Any, silent_wav: Path, tmp_path: Path
) -> None:
    url, _ = await serve(_entrypoint([["Hello there."], [Fail("the model is down")]], []))
    page = await open_page(url, silent_wav)
    await page.click("#t-websocket")
    await page.click("#connect")
    await page.wait_for_function("() => !document.querySelector('#text').disabled")
    await page.wait_for_function("() => window.rejoinder.audio.rate > 0")
    await page.fill("#text", "Hello")
    await page.press("#text", "Enter")
    await page.wait_for_function(SHOWED_ANSWER, timeout=10000)
    await page.fill("#text", "Again")
    await page.click("#say button")
    await page.wait_for_selector("#banner.show", timeout=10000)
    seen = await _seen(page)
    await _screenshot(page, tmp_path, "error")
    assert [cls for cls, text in seen["bubbles"] if text == "Hello"] == ["msg user"]
    assert ["msg agent", "Hello there."] in seen["bubbles"]
    banner = await page.text_content("#banner")
    assert banner is not None and "session_error" in banner and "the model is down" in banner
    assert not page.errors


PAGE_ROUTES = {
    "/", "/page.css", "/page.js", "/strips.js", "/metrics.js", "/favicon.svg", "/favicon.ico",
    "/rejoinder-client.js",
}  # fmt: skip


def test_page_files_are_package_data(page_bundle: Path) -> None:
    """The page and its scripts ship inside the package, the SDK bundle beside them once
    built; nothing is loaded from the network."""
    assert {route.path for route in page_routes()} == PAGE_ROUTES
    for name in ("index.html", "page.css", "page.js", "strips.js", "metrics.js", "favicon.svg"):
        # (an XML namespace is a name, not a download)
        text = (STATIC / name).read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "http://" not in text and "https://" not in text  # nothing from the network
    bundle = page_bundle.read_text()
    assert "http://" not in bundle and "https://" not in bundle
    assert "audio-worklet.js" not in (STATIC / "page.js").read_text()  # the SDK embeds its own


async def _get(app: web.Application, path: str) -> tuple[int, str, str]:
    import aiohttp

    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.get(server.make_url(path)) as response:
            return response.status, response.content_type, await response.text()
    finally:
        await server.close()


async def test_the_bundle_is_served_as_javascript_or_said_missing(
    page_bundle: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = web.Application()
    app.add_routes(page_routes())
    status, content_type, body = await _get(app, "/rejoinder-client.js")
    assert (status, content_type) == (200, "text/javascript")
    assert body == await asyncio.to_thread(page_bundle.read_text)

    monkeypatch.setattr(static, "CLIENT_BUNDLE", "not-built.js")
    app = web.Application()
    with caplog.at_level(logging.WARNING, logger="rejoinder.io.static"):
        app.add_routes(page_routes())
    said = [r.getMessage() for r in caplog.records if r.name == "rejoinder.io.static"]
    assert len(said) == 1 and said[0].startswith(BUNDLE_MISSING), said
    assert await _get(app, "/rejoinder-client.js") == (404, "text/plain", BUNDLE_MISSING + "\n")
    status, content_type, page = await _get(app, "/")
    assert (status, content_type) == (200, "text/html")  # the page itself is still there
    assert 'src="page.js"' in page


async def test_a_missing_bundle_is_said_on_the_page(
    serve: Any,
    open_page: Any,
    silent_wav: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(static, "CLIENT_BUNDLE", "not-built.js")
    url, _ = await serve(_entrypoint([], []))
    page = await open_page(url, silent_wav)
    await page.wait_for_selector("#banner.show", timeout=5000)
    await _screenshot(page, tmp_path, "missing_bundle")
    assert await page.text_content("#banner") == BUNDLE_MISSING
    assert await page.evaluate("() => window.rejoinder.errors") == [BUNDLE_MISSING]
    assert await page.is_disabled("#connect")  # nothing to connect with
    assert await page.is_visible("#agent-state")  # the page is drawn, not blank
    assert not page.errors


@needs_bundle
@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_the_floor_strip_draws_the_live_timeline(
    serve: Any, open_page: Any, silent_wav: Path, tmp_path: Path, transport: str
) -> None:
    url, app = await serve(_entrypoint([[ToolCall("check_clock")], ["Hello there."]], []))
    if transport == "webrtc" and not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, silent_wav)
    await page.click(f"#t-{transport}")
    await page.click("#connect")
    await page.wait_for_function("() => !document.querySelector('#text').disabled")
    await page.wait_for_function("() => window.rejoinder.audio.rate > 0")
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
    await _screenshot(page, tmp_path, f"floor_{transport}")
    assert not page.errors


AGENT_IS = "(state) => document.querySelector('#agent-state').dataset.state === state"


@needs_bundle
@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_mute_keeps_the_microphone_from_the_agent_until_unmuted(
    serve: Any,
    open_page: Any,
    two_questions_wav: tuple[Path, float, float],
    tmp_path: Path,
    transport: str,
) -> None:
    wav, first_starts, first_ends = two_questions_wav
    url, app = await serve(_entrypoint([[ANSWER]], [QUESTION]))
    if transport == "webrtc" and not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, wav)
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
    muted = await _seen(page)
    assert await page.text_content("#mic-meta") == "muted: the agent hears silence"
    await page.click("#mute")  # the second question is heard
    unmuted_at = await page.evaluate("() => performance.now()")
    assert await page.get_attribute("#mute", "aria-pressed") == "false"
    await page.wait_for_function(SHOWED_ANSWER, timeout=15000)
    seen = await _seen(page)
    await _screenshot(page, tmp_path, f"mute_{transport}")
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
    assert ["msg agent", ANSWER] in seen["bubbles"]
    assert not seen["errors"] and not page.errors
    await page.click("#connect")  # disconnect: the next conversation starts unmuted
    await page.wait_for_function("() => !window.rejoinder.connected")
    assert await page.get_attribute("#mute", "aria-pressed") == "false"
    assert await page.evaluate("() => window.rejoinder.client.muted") is False


@needs_bundle
@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_stop_interrupts_the_agent_and_keeps_what_was_heard(
    serve: Any, open_page: Any, question_wav: Path, tmp_path: Path, transport: str
) -> None:
    url, app = await serve(_entrypoint([[LONG_ANSWER]], [QUESTION]))
    if transport == "webrtc" and not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, question_wav)
    assert await page.is_disabled("#stop")  # nothing to stop before connecting
    await page.click(f"#t-{transport}")
    await page.click("#connect")
    # the agent's first words were heard (its interim transcript follows playback)
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
    seen = await _seen(page)
    await _screenshot(page, tmp_path, f"stop_{transport}")
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


@needs_bundle
async def test_measurements_read_in_plain_words_and_the_right_units(
    serve: Any, open_page: Any, silent_wav: Path
) -> None:
    url, _ = await serve(_entrypoint([], []))
    page = await open_page(url, silent_wav)
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
