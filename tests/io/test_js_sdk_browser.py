"""The JavaScript SDK (clients/js, ``@rejoinder/client``) in headless Chromium, against a real
app on 127.0.0.1 in real time.

The SDK is built with npm (``npm ci`` when its node_modules are missing, then ``npm run
build``); a tiny page served by the app imports the built bundle (``dist/index.js``) and
drives a ``RejoinderClient``, recording every event in ``window.log``. Chromium's fake
microphone plays a WAV that eSpeak NG spoke, at the WAV's rate (48 or 44.1 kHz); the app's
entry point runs the test kit's energy VAD and scripted STT/LLM with eSpeak NG as the TTS.
Each test checks what the SDK reported: a spoken turn answered over each transport (the
states in order, the transcripts, ``played`` at least every 100 ms, ``speaking`` only once
something was played), a ``clear`` during playback answered with ``cleared``, the
microphone resampled to the ``start`` rate by the capture worklet, a dropped WebSocket
reconnected, a drop in the middle of a reply resumed over each transport (the same session,
no close, never ``listening`` meanwhile, the unheard rest of the reply said and played after
the resume; WebRTC's network is a UDP relay that the test cuts), the agent ending the
session (a close, not a drop), and the errors a page
meets first: a refused microphone, and a Content-Security-Policy that forbids the embedded
worklet (``workletUrl`` then loads ``dist/worklet.js``).

Skipped, saying why, without npm, without Debian's ``chromium`` or without Playwright.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
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
SDK = Path(__file__).parents[2] / "clients" / "js"
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")
pytestmark = [
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),  # the first test may build the SDK (npm ci: ~10 s)
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
    pytest.mark.skipif(
        shutil.which("npm") is None, reason="npm is missing: the SDK cannot be built"
    ),
]

QUESTION = "What time is it?"
ANSWER = "It is three o'clock."
LONG_ANSWER = (
    "It is three o'clock in the afternoon, and the sun is still high above the hills, "
    "so there is plenty of time left for a walk before dinner, and even for a long one."
)
TURN_S = 15_000  # ms: each conversation must be over well within this

# The test page: imports the built bundle, records what the client emits.
PAGE = """<!doctype html>
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
    workletUrl: options.workletUrl,
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
ANSWERED = """(text) => {
  const agent = window.log.filter((e) => e.name === "agentState").map((e) => e.state);
  const at = agent.indexOf("speaking");
  return at >= 0 && agent.slice(at).includes("listening")
    && window.log.some((e) => e.name === "transcript" && e.role === "agent" && e.final
      && e.text === text);
}"""


# ---------------------------------------------------------------- fixtures


def _stale(bundle: Path) -> bool:
    """The bundle is missing or older than what it is built from."""
    if not bundle.exists():
        return True
    sources = [*(SDK / "src").rglob("*.ts"), SDK / "scripts" / "build.mjs", SDK / "package.json"]
    return max(path.stat().st_mtime for path in sources) > bundle.stat().st_mtime


@pytest.fixture(scope="module")
def sdk_bundle() -> Path:
    """clients/js built: its ``dist/`` folder (``npm ci`` first if needed). Built only when
    stale (``make test`` builds it before), one test process at a time: a second pytest
    worker must not rewrite the bundle while the first serves it."""

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
        if not (SDK / "node_modules" / ".bin" / "esbuild").exists():
            npm("ci", "--no-audit", "--no-fund", timeout=300)
        if _stale(SDK / "dist" / "index.js"):
            npm("run", "build", timeout=120)
    return SDK / "dist"


def _speech(text: str, rate: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    espeak = pytest.importorskip("rejoinder.providers.local.espeak")
    soxr = pytest.importorskip("soxr")
    pcm = espeak._render(text, "en-us", 175)
    resampled: np.ndarray[Any, np.dtype[np.float32]] = soxr.resample(
        pcm.astype(np.float32) / 32768, espeak.SAMPLE_RATE, rate
    )
    return resampled


def _wav(path: Path, rate: int, parts: list[str | float]) -> Path:
    """Mono 16-bit at ``rate``: strings are spoken, floats are seconds of silence."""
    audio = np.concatenate(
        [
            np.zeros(round(p * rate), np.float32) if isinstance(p, float) else _speech(p, rate)
            for p in parts
        ]
    )
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def wavs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], Path]:
    folder = tmp_path_factory.mktemp("mic")
    made: dict[tuple[str, int], Path] = {}

    def get(kind: str, rate: int) -> Path:
        if (kind, rate) not in made:
            parts: list[str | float] = [0.6, QUESTION, 15.0] if kind == "question" else [15.0]
            made[kind, rate] = _wav(folder / f"{kind}_{rate}.wav", rate, parts)
        return made[kind, rate]

    return get


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
        await conn.serve(session, rj.Agent(instructions="You tell the time."))

    return entrypoint


def _has_route(app: web.Application, method: str, path: str) -> bool:
    return any(
        route.method == method and route.resource is not None and route.resource.canonical == path
        for route in app.router.routes()
    )


@pytest.fixture
async def serve(
    sdk_bundle: Path,
) -> AsyncIterator[Callable[..., Awaitable[tuple[str, web.Application]]]]:
    """A real app on 127.0.0.1 that also serves the test page and the built bundle."""
    servers: list[TestServer] = []

    async def page(request: web.Request) -> web.Response:
        # ?csp=1: a Content-Security-Policy that allows no blob: scripts (nor worklets)
        strict = {"Content-Security-Policy": "script-src 'self' 'unsafe-inline'"}
        headers = strict if request.query.get("csp") else None
        return web.Response(text=PAGE, content_type="text/html", headers=headers)

    async def bundle(request: web.Request) -> web.FileResponse:
        name = request.match_info["name"]
        return web.FileResponse(sdk_bundle / name, headers={"Content-Type": "text/javascript"})

    async def start(entrypoint: Any, **options: Any) -> tuple[str, web.Application]:
        app = create_app(entrypoint, page=False, **options)
        app.router.add_get("/sdk-test.html", page)
        app.router.add_get("/sdk/{name:index.js|worklet.js}", bundle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/")), app

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def open_page() -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """A headless Chromium page (the test page at ``url``) whose microphone plays ``wav``."""
    async with playwright_api.async_playwright() as pw:
        browsers: list[Any] = []

        async def start(
            url: str, wav: Path, *, microphone_allowed: bool = True, query: str = ""
        ) -> Any:
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
                    "--allow-loopback-in-peer-connection",
                    "--autoplay-policy=no-user-gesture-required",
                ],
            )
            browsers.append(browser)
            page = await browser.new_page()
            page.errors = []
            page.on("pageerror", lambda exc: page.errors.append(str(exc)))
            await page.goto(url + "sdk-test.html" + query)
            await page.wait_for_function("() => window.loaded === true")
            return page

        yield start
        for browser in browsers:
            await browser.close()


async def _events(page: Any, name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = await page.evaluate(
        "(name) => window.log.filter((e) => e.name === name)", name
    )
    return events


def _in_order(states: list[str], wanted: list[str]) -> bool:
    it = iter(states)
    return all(state in it for state in wanted)


def _largest_gap_while_playing(played: list[dict[str, Any]]) -> float:
    """The longest wait (ms) between two reports while the count was still moving."""
    gaps = [
        b["t"] - a["t"]
        for a, b, c in zip(played, played[1:], played[2:], strict=False)
        if c["samples"] > b["samples"] and not a["cleared"]
    ]
    return max(gaps, default=0.0)


async def _check_answered(page: Any) -> None:
    agent = [e["state"] for e in await _events(page, "agentState")]
    assert _in_order(agent, ["listening", "thinking", "speaking", "listening"]), agent
    users = [e["state"] for e in await _events(page, "userState")]
    assert _in_order(users, ["listening", "speaking", "listening"]), users
    transcripts = await _events(page, "transcript")
    assert any(t["role"] == "user" and t["final"] and t["text"] == QUESTION for t in transcripts)
    finals = [t["text"] for t in transcripts if t["role"] == "agent" and t["final"]]
    assert finals == [ANSWER], finals
    played = await _events(page, "played")
    speaking_at = next(
        e["t"] for e in await _events(page, "agentState") if e["state"] == "speaking"
    )
    first_played = next(e["t"] for e in played if e["samples"] > 0)
    assert first_played <= speaking_at  # speaking only once the client played something
    # at least every 100 ms while playing; the bound leaves room for a loaded machine
    assert 0 < _largest_gap_while_playing(played) < 150, played
    timeline = await _events(page, "timeline")
    assert {"agent_state", "ob_opened", "ob_closed"} <= {e["kind"] for e in timeline}
    assert await _events(page, "error") == []
    assert page.errors == []


# ------------------------------------------------------------------- tests


@pytest.mark.parametrize("rate", [48000, 44100])
async def test_websocket_spoken_turn_is_answered(
    serve: Any, open_page: Any, wavs: Any, rate: int
) -> None:
    """The microphone at 48 or 44.1 kHz (the fake device and the audio context both at that
    rate), resampled by the capture worklet to the 16 kHz announced in ``start``."""
    url, _ = await serve(_entrypoint([[ANSWER]], [QUESTION]))
    page = await open_page(url, wavs("question", rate))
    ready = await page.evaluate(
        "(o) => window.run(o)", {"transport": "websocket", "contextRate": rate}
    )
    assert ready["sampleRate"] == 22050 and ready["transport"] == "websocket"
    assert await page.evaluate("() => window.mark.rate") == rate
    await page.wait_for_function(ANSWERED, arg=ANSWER, timeout=TURN_S)
    await _check_answered(page)
    # 16000 samples a second went out, on the audio clock: the resampling ratio is right
    sent_rate = await page.evaluate("() => window.sentRate()")
    assert abs(sent_rate - 16000) < 0.02 * 16000, sent_rate
    stats = await page.evaluate("() => window.client.stats")
    assert stats["receivedSamples"] > 0.5 * 22050
    # every sample received was played, and the last report said so
    assert stats["playedSamples"] == stats["receivedSamples"], stats


async def test_webrtc_spoken_turn_is_answered(serve: Any, open_page: Any, wavs: Any) -> None:
    url, app = await serve(_entrypoint([[ANSWER]], [QUESTION]))
    if not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, wavs("question", 48000))
    ready = await page.evaluate("(o) => window.run(o)", {"transport": "webrtc"})
    assert ready["sampleRate"] == 48000 and ready["transport"] == "webrtc"
    await page.wait_for_function(ANSWERED, arg=ANSWER, timeout=TURN_S)
    await _check_answered(page)
    played = await _events(page, "played")
    assert played[-1]["samples"] > 0.5 * 48000  # the track played out, at 48 kHz


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_a_clear_during_playback_is_answered_with_cleared(
    serve: Any, open_page: Any, wavs: Any, transport: str
) -> None:
    """``interrupt()`` while the agent speaks: the server sends ``clear``, the client drops
    its queue and reports where it stopped, marked ``cleared``; the history keeps what was
    heard."""
    url, app = await serve(_entrypoint([[LONG_ANSWER]], []))
    if transport == "webrtc" and not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, wavs("silence", 48000))
    await page.evaluate("(o) => window.run(o)", {"transport": transport})
    await page.evaluate("() => window.client.sendText('Tell me about the afternoon.')")
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
    names = [e["name"] for e in await page.evaluate("() => window.log")]
    assert "clear" in names
    played = await _events(page, "played")
    cleared = [i for i, e in enumerate(played) if e["cleared"]]
    assert cleared, played
    # no other report between the clear and its answer
    clear_at = next(e["t"] for e in await _events(page, "clear"))
    assert all(e["t"] < clear_at or e["cleared"] for e in played[: cleared[0] + 1])
    final = next(
        t for t in await _events(page, "transcript") if t["role"] == "agent" and t["final"]
    )
    assert final["interrupted"] is True
    assert LONG_ANSWER.startswith(final["text"][:10]) and len(final["text"]) < len(LONG_ANSWER)
    if transport == "websocket":
        stats = await page.evaluate("() => window.client.stats")
        assert stats["playedSamples"] < stats["receivedSamples"]  # the rest was dropped
        # nothing more played after the stop: the count stays where the clear left it
        assert played[-1]["samples"] == played[cleared[0]]["samples"], played[cleared[0] :]
    assert await _events(page, "error") == []
    assert page.errors == []


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_the_agent_ending_the_session_is_a_close_not_a_drop(
    serve: Any, open_page: Any, wavs: Any, transport: str
) -> None:
    """The server closing the session (1000; on WebRTC the data channel closed while the
    peer is connected) ends the client without an error, and nothing is reconnected."""

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([]), vad=ScriptedVAD(), stt=ScriptedSTT([]), user_away_timeout=None
        )
        serving = asyncio.ensure_future(conn.serve(session, rj.Agent(instructions="Bye.")))
        await asyncio.sleep(1.0)
        await session.aclose(reason="the agent said goodbye")
        await serving

    url, app = await serve(entrypoint)
    if transport == "webrtc" and not _has_route(app, "POST", "/api/offer"):
        pytest.skip("the app mounts no POST /api/offer (the webrtc extra is not installed)")
    page = await open_page(url, wavs("silence", 48000))
    await page.evaluate("(o) => window.run(o)", {"transport": transport})
    await page.wait_for_function("() => window.client.state === 'closed'", timeout=5000)
    closes = [{k: v for k, v in e.items() if k != "t"} for e in await _events(page, "close")]
    assert closes == [{"name": "close", "error": None, "byUser": False}]
    await page.wait_for_timeout(300)  # a reconnect would start within 100 ms
    assert await _events(page, "reconnecting") == []
    assert await page.evaluate("() => window.client.state") == "closed"
    assert page.errors == []


async def test_a_refused_microphone_fails_connect_and_says_why(
    serve: Any, open_page: Any, wavs: Any
) -> None:
    url, _ = await serve(_entrypoint([], []))
    page = await open_page(url, wavs("silence", 48000), microphone_allowed=False)
    error = await page.evaluate(
        "(o) => window.run(o).then(() => null, (e) => ({ code: e.code, message: e.message }))",
        {"transport": "websocket"},
    )
    assert error is not None and error["code"] == "microphone_unavailable", error
    assert "permission to use the microphone was denied" in error["message"]
    assert await page.evaluate("() => window.client.state") == "closed"
    assert await page.evaluate("() => window.client.media.context") is None  # released


async def test_a_page_whose_policy_forbids_blob_workers_loads_the_worklet_file(
    serve: Any, open_page: Any, wavs: Any
) -> None:
    """The embedded worklet loads from a blob: URL; a Content-Security-Policy without
    ``blob:`` refuses it, and the error names the way out: ``workletUrl``, with the
    package's ``dist/worklet.js``, which then works."""
    url, _ = await serve(_entrypoint([["Hello there."]], []))
    page = await open_page(url, wavs("silence", 48000), query="?csp=1")
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
    await page.evaluate("() => window.client.sendText('Hello')")
    await page.wait_for_function(ANSWERED, arg="Hello there.", timeout=TURN_S)


class _Proxy:
    """A TCP relay to the app that the test can cut, as a network drop would."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_dropped_websocket_is_reconnected(serve: Any, open_page: Any, wavs: Any) -> None:
    """The connection cut under the client: it reconnects (with the resume token when the
    server gave one), and the conversation goes on over the new connection."""
    url, _ = await serve(_entrypoint([["Hello there."], ["Welcome back."]], []))
    proxy = _Proxy(int(url.rsplit(":", 1)[1].strip("/")))
    try:
        proxied = f"http://127.0.0.1:{await proxy.start()}/"
        page = await open_page(proxied, wavs("silence", 48000))
        first = await page.evaluate("(o) => window.run(o)", {"transport": "websocket"})
        await page.evaluate("() => window.client.sendText('Hello')")
        await page.wait_for_function(ANSWERED, arg="Hello there.", timeout=TURN_S)
        proxy.cut()
        await page.wait_for_function(
            "() => window.log.filter((e) => e.name === 'ready').length === 2", timeout=5000
        )
        reconnecting = await _events(page, "reconnecting")
        assert reconnecting[0]["error"]["code"] == "connection_lost", reconnecting
        second = (await _events(page, "ready"))[1]
        restarted = [e["error"]["code"] for e in await _events(page, "sessionRestarted")]
        if reconnecting[0]["resuming"]:  # the server gave a resume token: it resumes
            assert second["resumed"] is True and restarted == [], (second, restarted)
            assert second["sessionId"] == first["sessionId"]
        else:  # it keeps no session to resume: a new one, and the client says why
            assert second["resumed"] is False and restarted == ["resume_unavailable"]
        await page.wait_for_function("() => window.client.state === 'connected'")
        await page.evaluate("() => window.client.sendText('I am back')")
        await page.wait_for_function(
            "() => window.log.some((e) => e.name === 'transcript' && e.role === 'agent' && e.final"
            " && ['Welcome back.', 'Hello there.'].includes(e.text) && e.id > 1)",
            timeout=TURN_S,
        )
        assert await _events(page, "close") == []
        assert page.errors == []
    finally:
        await proxy.close()


CUT_ANSWER = "It is three o'clock in the afternoon, and the sun is still high."


class _UdpRelay:
    """The network between the browser and the server's WebRTC peer, as two UDP sockets:
    what the browser sends to ``browser_side`` goes out of ``server_side`` to the server's
    candidate, and the server's answers come back the same way. ``cut()`` drops every
    datagram from then on, both ways: the network vanished (no close, no goodbye)."""

    def __init__(self) -> None:
        self.server: tuple[str, int] | None = None
        self.browser: tuple[str, int] | None = None
        self.is_cut = False
        self.sides: list[asyncio.DatagramTransport] = []

    async def start(self) -> tuple[int, int]:
        """Ports of the browser's side and of the server's side."""
        loop = asyncio.get_running_loop()
        relay = self

        class FromBrowser(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                relay.browser = addr
                if not relay.is_cut and relay.server is not None:
                    relay.sides[1].sendto(data, relay.server)

        class FromServer(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                if not relay.is_cut and relay.browser is not None:
                    relay.sides[0].sendto(data, relay.browser)

        for protocol in (FromBrowser, FromServer):
            transport, _ = await loop.create_datagram_endpoint(
                protocol, local_addr=("127.0.0.1", 0)
            )
            self.sides.append(transport)
        ports = [side.get_extra_info("sockname")[1] for side in self.sides]
        return ports[0], ports[1]

    def cut(self) -> None:
        self.is_cut = True

    def close(self) -> None:
        for side in self.sides:
            side.close()


# a=candidate:<foundation> <component> <transport> <priority> <address> <port> typ ...
CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ udp \d+ (\S+) (\d+) typ ", re.M | re.I)


def _through(sdp: str, port: int) -> tuple[str, tuple[str, int] | None]:
    """``sdp`` with its ICE candidates replaced by one at 127.0.0.1:``port``, and the
    first UDP candidate it had (address, port). Both sides' candidates are replaced, so
    that ICE finds no path around the relay."""
    found = CANDIDATE.search(sdp)
    first = (found[1], int(found[2])) if found else None
    lines = [line for line in sdp.split("\r\n") if not line.startswith("a=candidate:")]
    out: list[str] = []
    for line in lines:
        out.append(line)
        if line.startswith("m="):
            out.append(f"a=candidate:1 1 udp 2122260223 127.0.0.1 {port} typ host")
    return "\r\n".join(out), first


async def _relay_first_offer(page: Any, relays: list[_UdpRelay]) -> None:
    """The page's first WebRTC offer (and its answer) is rewritten so that its media and
    data channel go through a ``_UdpRelay``; later offers (the resume) go direct."""

    async def handle(route: Any) -> None:
        if relays:
            await route.continue_()
            return
        relay = _UdpRelay()
        relays.append(relay)
        browser_side, server_side = await relay.start()
        offer = json.loads(route.request.post_data)
        offer["sdp"], _ = _through(offer["sdp"], server_side)
        response = await route.fetch(post_data=json.dumps(offer))
        answer = await response.json()
        answer["sdp"], relay.server = _through(answer["sdp"], browser_side)
        await route.fulfill(response=response, json=answer)

    await page.route("**/api/offer*", handle)


# Resumed, and the agent back to listening after it (the rest said, or not).
AFTER_RESUME = """() => {
  const ready = window.log.filter((e) => e.name === "ready")[1];
  return ready !== undefined && window.log.some((e) => e.t >= ready.t
    && e.name === "agentState" && e.state === "listening");
}"""


async def _drop_mid_reply(page: Any, transport: str, cut: Callable[[], None]) -> float:
    """Connect, ask for ``CUT_ANSWER`` and ``cut`` the network once its first words were
    heard; then wait until the client resumed and the agent is listening again. When
    the network was cut (``performance.now()`` on the page)."""
    await page.evaluate("(o) => window.run(o)", {"transport": transport})
    await page.evaluate("() => window.client.sendText('Tell me about the afternoon.')")
    # speaking, and its first words heard (the interim transcript follows playback)
    await page.wait_for_function(
        "() => window.client.agentState === 'speaking' && window.log.some((e) =>"
        " e.name === 'transcript' && e.role === 'agent' && !e.final && e.text.includes(' '))",
        timeout=TURN_S,
    )
    cut_at: float = await page.evaluate("() => performance.now()")
    cut()
    # WebRTC: Chrome finds the peer disconnected ~6 s after its last packet, and the SDK
    # waits 4 s more before it takes that for a drop
    await page.wait_for_function(AFTER_RESUME, timeout=25000)
    return cut_at


async def _check_resumed_and_rest_said(page: Any, cut_at: float) -> None:
    """The same session resumed, nothing closed, the agent never ``listening`` from the
    cut until the rest of the reply was said, and that rest heard on the new connection."""
    log = await page.evaluate("() => window.log")
    first, second = [e for e in log if e["name"] == "ready"]
    assert second["resumed"] is True and second["sessionId"] == first["sessionId"], second
    names = [e["name"] for e in log]
    assert "close" not in names and "sessionRestarted" not in names, names
    reconnecting = [e for e in log if e["name"] == "reconnecting"]
    assert [e["error"]["code"] for e in reconnecting] == ["connection_lost"], reconnecting
    assert reconnecting[0]["resuming"] is True
    # After the cut: thinking (owed, nobody listening), then speaking the rest; the first
    # listening comes after the rest's final transcript.
    after = [e for e in log if e["t"] > cut_at and e["name"] in ("agentState", "transcript")]
    states = [e["state"] for e in after if e["name"] == "agentState"]
    assert states[-1] == "listening" and "listening" not in states[:-1], states
    assert _in_order(states, ["thinking", "speaking", "listening"]), states
    finals = [e for e in log if e["name"] == "transcript" and e["role"] == "agent" and e["final"]]
    assert len(finals) == 2, finals
    heard, rest = finals
    assert heard["interrupted"] is True and rest["interrupted"] is False, finals
    assert heard["t"] > cut_at and rest["t"] > second["t"]
    assert heard["text"].split() + rest["text"].split() == CUT_ANSWER.split(), finals
    assert heard["text"].split() != []  # its first words had been heard before the cut
    listening_at = next(e["t"] for e in after if e.get("state") == "listening")
    assert rest["t"] <= listening_at
    # the rest was played by the new connection, counted from its own zero
    played = [e["samples"] for e in log if e["name"] == "played" and e["t"] > second["t"]]
    assert played and played[-1] > 0, played
    assert await _events(page, "error") == []
    assert page.errors == []


async def test_a_websocket_dropped_mid_reply_resumes_and_says_the_unheard_rest(
    serve: Any, open_page: Any, wavs: Any
) -> None:
    """The TCP connection is cut (reset) while the agent speaks: the server sees the drop
    at once and cuts the reply where the client's last ``played`` report left it; the
    client reconnects with its token, and hears the rest."""
    url, _ = await serve(_entrypoint([[CUT_ANSWER]], []))
    proxy = _Proxy(int(url.rsplit(":", 1)[1].strip("/")))
    try:
        page = await open_page(f"http://127.0.0.1:{await proxy.start()}/", wavs("silence", 48000))
        cut_at = await _drop_mid_reply(page, "websocket", proxy.cut)
        await _check_resumed_and_rest_said(page, cut_at)
    finally:
        await proxy.close()


def _webrtc_options(**options: Any) -> Any:
    webrtc = pytest.importorskip("rejoinder.io.webrtc")
    pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
    # the server's candidate on 127.0.0.1, where the relay is
    return webrtc.WebRTCOptions(host_addresses=["127.0.0.1"], **options)


async def _webrtc_drop_mid_reply(serve: Any, open_page: Any, wavs: Any, **options: Any) -> None:
    url, _ = await serve(_entrypoint([[CUT_ANSWER]], []), webrtc=_webrtc_options(**options))
    relays: list[_UdpRelay] = []
    try:
        page = await open_page(url, wavs("silence", 48000))
        await _relay_first_offer(page, relays)
        cut_at = await _drop_mid_reply(page, "webrtc", lambda: relays[0].cut())
        await _check_resumed_and_rest_said(page, cut_at)
    finally:
        for relay in relays:
            relay.close()


async def test_a_webrtc_peer_dropped_mid_reply_resumes_and_says_the_unheard_rest(
    serve: Any, open_page: Any, wavs: Any
) -> None:
    """The network between the browser and the server's peer vanishes while the agent
    speaks (a relay drops every packet, both ways: no goodbye on the data channel, no
    DTLS or SCTP close). The server sees no microphone packet for 1 s and detaches the
    session; Chrome finds the peer disconnected, and the SDK sends a new offer with the
    token, on which the rest of the reply is said."""
    # 1 s: the server sees the drop before it would estimate the reply as played out
    # (see the next test)
    await _webrtc_drop_mid_reply(serve, open_page, wavs, media_idle_timeout=1.0)


@pytest.mark.xfail(
    strict=True,
    reason="server: a drop seen later than STALL_GRACE (1.5 s) past the reply's end (WebRTC:"
    " media_idle_timeout, 10 s by default) finds the reply counted as heard in full by"
    " ReportedPlayback's stall estimate; the resume says nothing again and shows listening",
)
async def test_a_webrtc_drop_seen_late_by_the_server_still_says_the_unheard_rest(
    serve: Any, open_page: Any, wavs: Any
) -> None:
    """The same drop with the server's default ``media_idle_timeout`` (10 s): the
    client's reports stopped at the cut, but 1.5 s after the reply's audio would have
    ended the server estimates it played out, records the whole reply as heard and goes
    back to listening; at 10 s it sees the drop, with nothing left to cut. On resume the
    unheard rest is not said, no final transcript ends the reply the page was showing,
    and the snapshot says ``listening``."""
    await _webrtc_drop_mid_reply(serve, open_page, wavs)
