"""What the browser tests share: headless Chromium through Playwright, against a real app
on 127.0.0.1 in real time (the page's tests: tests/io/test_browser.py and
tests/io/test_page_*_browser.py; the SDK's: tests/io/test_js_sdk*_browser.py).

- ``chromium`` (one per test module): one Playwright driver, and one Chromium per set of
  launch flags, started when first asked for. The fake microphone's WAV is a launch flag,
  so a module launches a browser per WAV, not per test; each test gets its own browser
  contexts (``new_page``), closed after it. Chromium starts the WAV again at each
  ``getUserMedia``. A module's tests and async fixtures run on one event loop, the
  module's (``ONE_LOOP`` in its ``pytestmark``): Playwright's objects belong to the loop
  that started them.
- The SDK (clients/js) built with npm when stale, one test process at a time
  (``sdk_bundle``; the lock is the one tests/io/test_react_example_browser.py builds
  under), and its bundle copied beside the page (``page_bundle``).
- The fake microphone's WAVs, spoken by eSpeak NG (``mic_wav``), an entry point on the
  test kit's scripted models with eSpeak NG as the TTS (``scripted_entrypoint``), and apps
  served for one test (``serve_app``).
- The page (src/rejoinder/io/static): served (``serve_page``), opened (``open_page``), what
  it showed (``page_state``), screenshots (to ``$REJOINDER_SCREENSHOTS`` when set, else the
  test's tmp dir).
- The SDK's own test page, which records every event of a ``RejoinderClient`` in
  ``window.log``: served (``serve_sdk_page``), opened (``open_sdk_page``), read
  (``logged``).

tests/io/conftest.py binds the shared fixtures for every module; a module binds ``serve``
and ``open_page`` itself (``serve = _browser.serve_page``, or the SDK's), since those differ.

Needs Debian's ``chromium`` (``make test`` installs it) and Playwright for Python, which
drives it through ``executable_path`` (Playwright's own browser download is not used):
``needs_chromium`` skips, saying why, without it.
"""

from __future__ import annotations

import asyncio
import fcntl
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
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.static import CLIENT_BUNDLE, page_routes
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedVAD

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).parents[2]
SDK = ROOT / "clients" / "js"
STATIC = ROOT / "src" / "rejoinder" / "io" / "static"
BUILD_LOCK = Path(tempfile.gettempdir()) / "rejoinder-js-sdk-build.lock"
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")

needs_chromium = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
)
ONE_LOOP = pytest.mark.asyncio(loop_scope="module")
"""In a module's ``pytestmark``: its tests run on the module's loop, as ``chromium`` does."""

QUESTION = "What time is it?"
ANSWER = "It is three o'clock."

# ---------------------------------------------------------------- Chromium


class Chromium:
    """One Chromium per set of launch flags, launched when first asked for."""

    def __init__(self, playwright: Any) -> None:
        self._playwright = playwright
        self._browsers: dict[tuple[str, ...], Any] = {}

    async def context(self, flags: tuple[str, ...], **options: Any) -> Any:
        """A new browser context of the Chromium launched with ``flags``."""
        browser = self._browsers.get(flags)
        if browser is None or not browser.is_connected():
            browser = self._browsers[flags] = await self._playwright.chromium.launch(
                executable_path=CHROMIUM, args=list(flags)
            )
        return await browser.new_context(**options)

    async def close(self) -> None:
        for browser in self._browsers.values():
            await browser.close()
        self._browsers.clear()


def microphone_flags(
    wav: Path, *, allowed: bool = True, camera: Path | None = None
) -> tuple[str, ...]:
    """Chromium's fake devices: the microphone plays ``wav`` once (the camera, if given,
    plays a Y4M in a loop); ``allowed`` False refuses the permission."""
    return (
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream" if allowed else "--deny-permission-prompts",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        *([f"--use-file-for-fake-video-capture={camera}"] if camera else []),
        "--allow-loopback-in-peer-connection",
        "--autoplay-policy=no-user-gesture-required",
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Chromium]:
    async with playwright_api.async_playwright() as playwright:
        browsers = Chromium(playwright)
        try:
            yield browsers
        finally:
            await browsers.close()


NewPage = Callable[..., Awaitable[Any]]


@pytest_asyncio.fixture(loop_scope="module")
async def new_page(chromium: Chromium) -> AsyncIterator[NewPage]:
    """``new_page(flags, **context_options)``: a blank page in a context of its own, closed
    after the test; ``page.errors`` collects the page's uncaught errors."""
    contexts: list[Any] = []

    async def start(flags: tuple[str, ...], **options: Any) -> Any:
        context = await chromium.context(flags, **options)
        contexts.append(context)
        page = await context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        return page

    yield start
    for context in contexts:
        await context.close()


# ------------------------------------------------------------ the bundles


def _older_than_sources(path: Path) -> bool:
    """``path`` is missing or older than the SDK's sources."""
    if not path.exists():
        return True
    sources = [*(SDK / "src").rglob("*.ts"), SDK / "scripts" / "build.mjs", SDK / "package.json"]
    return max(source.stat().st_mtime for source in sources) > path.stat().st_mtime


def _npm(*args: str, timeout: float) -> None:
    done = subprocess.run(
        ["npm", *args], cwd=SDK, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"npm {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def _build_sdk(what: str) -> Path:
    """clients/js/dist, built when stale (``npm ci`` first if needed; ``make test`` builds
    it before); skips without npm. Call with ``BUILD_LOCK`` held."""
    if _older_than_sources(SDK / "dist" / "index.js"):
        if shutil.which("npm") is None:
            pytest.skip(f"npm is missing: {what} cannot be built")
        if not (SDK / "node_modules" / ".bin" / "esbuild").exists():
            _npm("ci", "--no-audit", "--no-fund", timeout=300)
        _npm("run", "build", timeout=120)
    return SDK / "dist"


@pytest.fixture(scope="module")
def sdk_bundle() -> Path:
    """clients/js built: its ``dist/`` folder."""
    with BUILD_LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return _build_sdk("the SDK")


@pytest.fixture(scope="module")
def page_bundle() -> Path:
    """The SDK bundle beside the page (what ``make demo`` puts there), built and copied
    when missing or stale; renamed into place, never written where it is read."""
    copy, built = STATIC / CLIENT_BUNDLE, SDK / "dist" / "index.js"
    with BUILD_LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        stale = _older_than_sources(copy) or (
            built.exists() and built.stat().st_mtime > copy.stat().st_mtime
        )
        if stale:
            _build_sdk(f"the page's client bundle ({copy})")
            with tempfile.NamedTemporaryFile(dir=STATIC, suffix=".part", delete=False) as part:
                part.write(built.read_bytes())
            os.replace(part.name, copy)
    return copy


# ------------------------------------------------- microphone, agent, app


def _speech(text: str, rate: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    espeak = pytest.importorskip("rejoinder.providers.local.espeak")
    soxr = pytest.importorskip("soxr")
    pcm = espeak._render(text, "en-us", 175)
    resampled: np.ndarray[Any, np.dtype[np.float32]] = soxr.resample(
        pcm.astype(np.float32) / 32768, espeak.SAMPLE_RATE, rate
    )
    return resampled


def speech_seconds(text: str) -> float:
    """How long eSpeak NG takes to say ``text``."""
    return len(_speech(text, 48000)) / 48000


MicWav = Callable[..., Path]


@pytest.fixture(scope="module")
def mic_wav(tmp_path_factory: pytest.TempPathFactory) -> MicWav:
    """``mic_wav(*parts, rate=48000)``: a mono 16-bit WAV for the fake microphone, made
    once per module: strings are spoken, floats are seconds of silence."""
    folder = tmp_path_factory.mktemp("mic")
    made: dict[tuple[tuple[str | float, ...], int], Path] = {}

    def get(*parts: str | float, rate: int = 48000) -> Path:
        if (parts, rate) not in made:
            audio = np.concatenate(
                [
                    np.zeros(round(p * rate), np.float32)
                    if isinstance(p, float)
                    else _speech(p, rate)
                    for p in parts
                ]
            )
            path = made[parts, rate] = folder / f"mic_{len(made)}_{rate}.wav"
            with wave.open(str(path), "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(rate)
                out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
        return made[parts, rate]

    return get


def scripted_entrypoint(
    replies: list[list[Any]] | Callable[..., Any],
    transcripts: list[str],
    agent: Callable[[], rj.Agent] = lambda: rj.Agent(instructions="You tell the time."),
) -> Callable[[Connection], Awaitable[None]]:
    """Each connection gets a session on the test kit's energy VAD and scripted STT/LLM,
    with eSpeak NG as the TTS: the answer is real speech."""

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
        await conn.serve(session, agent())

    return entrypoint


def has_route(app: web.Application, method: str, path: str) -> bool:
    return any(
        route.method == method and route.resource is not None and route.resource.canonical == path
        for route in app.router.routes()
    )


def skip_without_webrtc(app: web.Application) -> None:
    if not has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")


def in_order(states: list[str], wanted: list[str]) -> bool:
    it = iter(states)
    return all(state in it for state in wanted)


ServeApp = Callable[[web.Application], Awaitable[str]]


@pytest_asyncio.fixture(loop_scope="module")
async def serve_app() -> AsyncIterator[ServeApp]:
    """``serve_app(app)``: the app on 127.0.0.1 until the test ends; its base URL."""
    servers: list[TestServer] = []

    async def start(app: web.Application) -> str:
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/"))

    yield start
    for server in servers:
        await server.close()


# ---------------------------------------------------------------- the page


@pytest_asyncio.fixture(loop_scope="module")
async def serve_page(
    serve_app: ServeApp,
) -> Callable[..., Awaitable[tuple[str, web.Application]]]:
    """``serve_page(entrypoint)``: an app serving ``entrypoint`` and the page at ``/``."""

    async def start(entrypoint: Any) -> tuple[str, web.Application]:
        app = create_app(entrypoint)
        if not has_route(app, "GET", "/"):  # until the app mounts the page itself
            app.add_routes(page_routes())
        return await serve_app(app), app

    return start


@pytest_asyncio.fixture(loop_scope="module")
async def open_page(new_page: NewPage) -> Callable[..., Awaitable[Any]]:
    """``open_page(url, wav, camera=None)``: the page, whose microphone plays ``wav``."""

    async def start(url: str, wav: Path, camera: Path | None = None) -> Any:
        flags = microphone_flags(wav, camera=camera)
        page = await new_page(flags, viewport={"width": 1100, "height": 820})
        await page.goto(url)
        return page

    return start


async def screenshot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("REJOINDER_SCREENSHOTS") or tmp_path)
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    # the state swatches' transitions over (an endless animation is not a transition)
    await page.wait_for_function(
        "() => !document.getAnimations().some((a) => a instanceof CSSTransition)",
        timeout=2000,
    )
    await page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


async def page_state(page: Any) -> dict[str, Any]:
    """What the page showed: ``window.rejoinder`` (filled from the client's events) and
    the DOM."""
    shown: dict[str, Any] = await page.evaluate(
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
    return shown


class ClockAgent(rj.Agent):
    """An agent with a tool: the page shows its call."""

    def __init__(self) -> None:
        super().__init__(instructions="You tell the time.")

    @rj.function_tool
    async def check_clock(self) -> str:
        """Read the clock."""
        await asyncio.sleep(0.3)
        return "three o'clock"


# The page showed the agent speaking, then listening again.
SHOWED_ANSWER = """() => {
  const agent = window.rejoinder.states.filter((s) => s.who === "agent").map((s) => s.state);
  const at = agent.indexOf("speaking");
  return at > 0 && agent.slice(at).includes("listening");
}"""
AGENT_IS = "(state) => document.querySelector('#agent-state').dataset.state === state"


# ------------------------------------------------------- the SDK's test page

# A tiny page that imports the built bundle and records what the client emits in
# ``window.log``; ``window.run(options)`` connects a ``RejoinderClient``.
SDK_PAGE = """<!doctype html>
<meta charset="utf-8"><title>rejoinder SDK test</title>
<script type="module">
import { RejoinderClient, RejoinderError } from "/sdk/index.js";
const EVENTS = ["ready", "agentState", "userState", "transcript", "tool", "metrics", "timeline",
  "error", "clear", "played", "reconnecting", "sessionRestarted", "close"];
const plain = (value) => value instanceof RejoinderError
  ? { code: value.code, message: value.message, closeCode: value.closeCode }
  : value && typeof value === "object"
    ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)])) : value;
window.log = [];
window.run = async (options) => {
  const audioContext = options.contextRate
    ? new AudioContext({ sampleRate: options.contextRate }) : undefined;
  const client = window.client = new RejoinderClient();
  for (const name of EVENTS) {
    client.on(name, (p) => window.log.push({ name, t: performance.now(), ...plain(p) }));
  }
  const ready = await client.connect({
    url: options.url || "/", transport: options.transport, timeline: true, audioContext,
    workletUrl: options.workletUrl, pingIntervalMs: options.pingIntervalMs,
    reconnect: { initialDelayMs: 100, jitter: 0 },
  });
  const context = client.media.context;
  window.mark = {
    time: context.currentTime, sent: client.stats.sentSamples, rate: context.sampleRate,
  };
  return ready;
};
window.sentRate = () => {
  const context = window.client.media.context;
  const sent = window.client.stats.sentSamples - window.mark.sent;
  return sent / (context.currentTime - window.mark.time);
};
window.loaded = true;
</script>
"""

# The agent said its answer and went back to listening, after the client played it.
SDK_ANSWERED = """(text) => {
  const agent = window.log.filter((e) => e.name === "agentState").map((e) => e.state);
  const at = agent.indexOf("speaking");
  return at >= 0 && agent.slice(at).includes("listening")
    && window.log.some((e) => e.name === "transcript" && e.role === "agent" && e.final
      && e.text === text);
}"""


@pytest_asyncio.fixture(loop_scope="module")
async def serve_sdk_page(
    sdk_bundle: Path, serve_app: ServeApp
) -> Callable[..., Awaitable[tuple[str, web.Application]]]:
    """``serve_sdk_page(entrypoint, **create_app_options)``: an app serving
    ``entrypoint``, the SDK's test page (``/sdk-test.html``) and the built bundle."""

    async def page(request: web.Request) -> web.Response:
        # ?csp=1: a Content-Security-Policy that allows no blob: scripts (nor worklets)
        strict = {"Content-Security-Policy": "script-src 'self' 'unsafe-inline'"}
        headers = strict if request.query.get("csp") else None
        return web.Response(text=SDK_PAGE, content_type="text/html", headers=headers)

    async def bundle(request: web.Request) -> web.FileResponse:
        name = request.match_info["name"]
        return web.FileResponse(sdk_bundle / name, headers={"Content-Type": "text/javascript"})

    async def start(entrypoint: Any, **options: Any) -> tuple[str, web.Application]:
        app = create_app(entrypoint, page=False, **options)
        app.router.add_get("/sdk-test.html", page)
        app.router.add_get("/sdk/{name:index.js|worklet.js}", bundle)
        return await serve_app(app), app

    return start


@pytest_asyncio.fixture(loop_scope="module")
async def open_sdk_page(new_page: NewPage) -> Callable[..., Awaitable[Any]]:
    """``open_sdk_page(url, wav, microphone_allowed=True, query="")``: the SDK's test page,
    loaded, whose microphone plays ``wav``."""

    async def start(
        url: str, wav: Path, *, microphone_allowed: bool = True, query: str = ""
    ) -> Any:
        page = await new_page(microphone_flags(wav, allowed=microphone_allowed))
        await page.goto(url + "sdk-test.html" + query)
        await page.wait_for_function("() => window.loaded === true")
        return page

    return start


async def send_text(page: Any, text: str) -> None:
    """``text`` from the SDK's test page, once the agent is listening: text sent before the
    agent is ready is refused (``not_ready``), and ``ready`` comes before the agent has
    started (``initializing``)."""
    await page.wait_for_function("() => window.client.agentState === 'listening'")
    await page.evaluate("(text) => window.client.sendText(text)", text)


async def logged(page: Any, name: str) -> list[dict[str, Any]]:
    """The events named ``name`` the SDK's test page recorded, in order."""
    events: list[dict[str, Any]] = await page.evaluate(
        "(name) => window.log.filter((e) => e.name === name)", name
    )
    return events
