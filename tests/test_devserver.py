"""``rejoinder dev`` / ``serve``: finding the entry point, admitting sessions, and the
server itself as a subprocess on 127.0.0.1 (real time, each test bounded to seconds)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rejoinder.discover import EntrypointError, load_entrypoint, module_name_for
from rejoinder.io.admission import SessionGate
from rejoinder.io.webrtc import available as webrtc_available

from ._served import REJOINDER, ROOT, server


def write(tmp_path: Path, source: str, name: str = "agent.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


# ------------------------------------------------------------------ discovery


def test_discovery_finds_an_async_entrypoint(tmp_path: Path) -> None:
    helper = write(tmp_path, "GREETING = 'hi'\n", name="helper_for_agent.py")
    path = write(
        tmp_path,
        """
        from helper_for_agent import GREETING  # a module next to the agent file

        async def entrypoint(conn):
            return None
        """,
    )
    entry = load_entrypoint(path)
    assert entry.__name__ == "entrypoint"
    assert asyncio.iscoroutinefunction(entry)
    assert module_name_for(path.resolve()) in sys.modules
    assert helper.exists()


def test_discovery_accepts_an_object_with_an_async_call(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        class Entry:
            async def __call__(self, conn):
                return None

        entrypoint = Entry()
        """,
    )
    assert callable(load_entrypoint(path))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = 1\n", r"defines no 'entrypoint'\. Define one.*async def entrypoint\(conn"),
        ("entrypoint = 42\n", r"is a int, not a function"),
        ("def entrypoint(conn):\n    pass\n", r"must be an async function \(async def\)"),
        ("async def entrypoint():\n    pass\n", r"must take exactly one argument"),
        ("async def entrypoint(a, b):\n    pass\n", r"must take exactly one argument"),
        (
            "async def entrypoint(conn):\n    return (\n",
            r"syntax error in .*\.py:2:12: .*never closed\n    return \(\n           \^",
        ),
        ("import no_such_module_here\n", r"failed: ModuleNotFoundError.*\n    at line 1"),
        ("raise SystemExit(3)\n", r"called sys\.exit\(3\) while loading"),
    ],
)
def test_discovery_errors_say_what_to_fix(tmp_path: Path, source: str, expected: str) -> None:
    path = write(tmp_path, source, name=f"failing_{tmp_path.name}.py")
    with pytest.raises(EntrypointError, match=re.compile(expected, re.DOTALL)):
        load_entrypoint(path)
    assert module_name_for(path.resolve()) not in sys.modules  # a failed load leaves nothing


def test_discovery_syntax_error_shows_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "async def entrypoint(conn):\n    await conn.serve(\n\nx = = 1\n")
    with pytest.raises(EntrypointError) as info:
        load_entrypoint(path)
    message = str(info.value)
    assert message.startswith("syntax error in ")
    assert re.search(r"agent\.py:\d+", message)


def test_discovery_missing_file_directory_and_not_python(tmp_path: Path) -> None:
    with pytest.raises(EntrypointError, match=r"agent file not found: .*nope\.py"):
        load_entrypoint(tmp_path / "nope.py")
    with pytest.raises(EntrypointError, match="is a directory"):
        load_entrypoint(tmp_path)
    text = write(tmp_path, "async def entrypoint(conn): pass\n", name="agent.txt")
    with pytest.raises(EntrypointError, match="not a Python file"):
        load_entrypoint(text)


def test_discovery_reload_runs_the_file_again(tmp_path: Path) -> None:
    path = write(tmp_path, "VERSION = 1\nasync def entrypoint(conn):\n    return VERSION\n")
    first = load_entrypoint(path)
    path.write_text("VERSION = 2\nasync def entrypoint(conn):\n    return VERSION\n")
    second = load_entrypoint(path)
    assert asyncio.run(first(None)) == 1  # type: ignore[func-returns-value]
    assert asyncio.run(second(None)) == 2  # type: ignore[func-returns-value]


# --------------------------------------------------------------- admission


async def test_gate_limits_live_sessions_and_drains() -> None:
    gate: SessionGate[None] = SessionGate(max_sessions=1)
    release = asyncio.Event()

    async def entry(conn: object) -> None:
        await release.wait()

    with gate.admit() as admission:
        assert admission is not None
        assert gate.refusal() is not None  # the place is held before the session starts
        task = asyncio.create_task(gate.run(entry, None))
        await asyncio.sleep(0)
    assert gate.live == 1
    with gate.admit() as refused:
        assert refused is None
    assert gate.refused_total == 1
    release.set()
    await task
    assert gate.live == 0
    assert gate.refusal() is None

    # Draining: new sessions are refused; one that never ends is cancelled after the wait.
    release.clear()
    with gate.admit():
        task = asyncio.create_task(gate.run(entry, None))
        await asyncio.sleep(0)
    started = asyncio.get_running_loop().time()
    cancelled = await gate.drain(10.0)
    assert cancelled == 1
    assert asyncio.get_running_loop().time() - started == pytest.approx(10.0, abs=0.01)
    assert task.cancelled()
    assert gate.status == "draining"
    assert "draining" in (gate.refusal() or "")


def test_gate_tells_its_drain_listeners_once_and_a_failing_one_stops_no_other() -> None:
    gate: SessionGate[None] = SessionGate()
    heard: list[str] = []

    def broken() -> None:
        heard.append("broken")
        raise RuntimeError("a listener's bug")

    gate.on_draining += [broken, lambda: heard.append("registry")]
    gate.stop_admitting()
    gate.stop_admitting()
    assert heard == ["broken", "registry"] and gate.draining


async def test_gate_closes_gracefully_before_cancelling() -> None:
    ended: list[str] = []
    stop = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def close(conn: str) -> None:
        if conn == "a":  # "a" ends when asked; "b" ignores it and is cancelled
            stop[conn].set()

    async def entry(conn: str) -> None:
        try:
            await stop[conn].wait()
            ended.append(f"{conn} returned")
        except asyncio.CancelledError:
            ended.append(f"{conn} cancelled")
            raise

    gate: SessionGate[str] = SessionGate(close=close)
    tasks = [asyncio.create_task(gate.run(entry, name)) for name in ("a", "b")]
    await asyncio.sleep(0)
    assert sorted(gate.connections) == ["a", "b"]
    assert await gate.drain(1.0) == 2
    await asyncio.wait(tasks)
    assert ended == ["a returned", "b cancelled"]
    assert gate.live == 0


async def test_gate_admission_not_used_is_given_back() -> None:
    gate: SessionGate[None] = SessionGate(max_sessions=1)
    with gate.admit() as admission:
        assert admission is not None
    assert gate.refusal() is None
    # A WebRTC offer: the place stays held for a while after the answer went out.
    with gate.admit(linger=3.0) as admission:
        assert admission is not None
    assert gate.refusal() is not None
    await asyncio.sleep(3.0)
    assert gate.refusal() is None

    # ... and the session that starts later, from a task the request created, takes it.
    release = asyncio.Event()

    async def later() -> None:
        await asyncio.sleep(1.0)
        await gate.run(lambda _conn: release.wait(), None)  # type: ignore[arg-type, return-value]

    with gate.admit(linger=3.0):
        task = asyncio.create_task(later())
    await asyncio.sleep(5.0)
    assert gate.live == 1
    assert gate.refusal() is not None
    release.set()
    await task
    assert gate.refusal() is None
    with pytest.raises(ValueError, match="at least 1"):
        SessionGate(max_sessions=0)


# ------------------------------------------------- the server, as a subprocess

AGENT = """
import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD

VERSION = {version!r}


class Greeter(rj.Agent):
    instructions = "test"

    async def on_enter(self) -> None:
        self.session.say(VERSION)


async def entrypoint(conn):
    session = rj.AgentSession(
        llm=ScriptedLLM([["Hello."]]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(["Hi."]),
        tts=ScriptedTTS(seconds_per_char=0.01),
        user_away_timeout=None,
    )
    await conn.serve(session, Greeter())
"""


@dataclass
class Client:
    """A minimal protocol v1 client: reports everything it received as played at once."""

    ws: aiohttp.ClientWebSocketResponse
    messages: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0

    async def start(self) -> dict[str, Any]:
        await self.ws.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
        return await self.wait_for(lambda m: m["type"] == "ready")

    async def wait_for(self, check: Any, within: float = 10.0) -> dict[str, Any]:
        async with asyncio.timeout(within):
            for message in self.messages:
                if check(message):
                    return message
            while True:
                msg = await self.ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    self.samples += len(msg.data) // 2
                    await self.ws.send_str(json.dumps({"type": "played", "samples": self.samples}))
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    message = json.loads(msg.data)
                    self.messages.append(message)
                    if check(message):
                        return message
                else:
                    raise AssertionError(f"the socket closed: {msg}")

    async def wait_closed(self, within: float) -> int | None:
        async with asyncio.timeout(within):
            while True:
                msg = await self.ws.receive()
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    return self.ws.close_code


def greeted(text: str) -> Any:
    return lambda m: (
        m["type"] == "transcript" and m["role"] == "agent" and m["final"] and (m["text"] == text)
    )


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_serve_health_session_limit_and_drain_when_the_client_leaves(
    tmp_path: Path,
) -> None:
    agent = write(tmp_path, AGENT.format(version="version one"))
    argv = ["serve", str(agent), "--max-sessions", "1", "--drain-timeout", "20"]
    argv += ["--resume-grace", "7"]
    async with server(argv) as srv, aiohttp.ClientSession() as http:
        async with http.get(f"{srv.base}/healthz") as response:
            assert response.status == 200
            health = await response.json()
            assert health["capacity"] >= 1 and 0 <= health["load"] <= 1  # admission by load
            assert health == {**health, "status": "ok", "sessions": 0, "max_sessions": 1}
        ws = await http.ws_connect(f"{srv.base}/ws")
        client = Client(ws)
        ready = await client.start()
        assert ready["protocol"] == 1 and ready["resume_grace"] == 7
        assert any("resume its session within 7 s" in line for line in srv.lines)
        await client.wait_for(greeted("version one"))
        async with http.get(f"{srv.base}/healthz") as response:
            assert (await response.json())["sessions"] == 1

        # Over --max-sessions: the upgrade is refused with 503, and so is a WebRTC offer.
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{srv.base}/ws")
        assert refused.value.status == 503
        async with http.post(f"{srv.base}/api/offer", json={}) as response:
            assert response.status == (503 if webrtc_available() else 404)

        # SIGTERM: draining; new sessions refused, the live one goes on.
        srv.process.send_signal(signal.SIGTERM)
        await srv.wait_line(r"^draining: .*1 live session")
        async with http.get(f"{srv.base}/healthz") as response:
            assert response.status == 503
            health = await response.json()
            assert health == {**health, "status": "draining", "sessions": 1, "max_sessions": 1}
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{srv.base}/ws")
        assert refused.value.status == 503
        await ws.send_str(json.dumps({"type": "text", "text": "still here?"}))
        await client.wait_for(greeted("Hello."))  # the live session still answers

        # The client leaves: the drain is over long before its 20 s timeout.
        started = asyncio.get_running_loop().time()
        await ws.close()
        assert await srv.exit_code(within=10) == 0
        assert asyncio.get_running_loop().time() - started < 5
        assert srv.lines[-1] == "stopped"
        assert not any("closing 1 live session" in line for line in srv.lines)


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_serve_closes_live_sessions_after_the_drain_timeout(tmp_path: Path) -> None:
    agent = write(tmp_path, AGENT.format(version="hello"))
    async with (
        server(["serve", str(agent), "--drain-timeout", "1.5"]) as srv,
        aiohttp.ClientSession() as http,
    ):
        ws = await http.ws_connect(f"{srv.base}/ws")
        client = Client(ws)
        await client.start()
        await client.wait_for(greeted("hello"))
        started = asyncio.get_running_loop().time()
        srv.process.send_signal(signal.SIGTERM)
        code = await client.wait_closed(within=10)
        closed_after = asyncio.get_running_loop().time() - started
        assert code == 1000  # the session was closed: a normal close, not a dropped socket
        assert 1.4 <= closed_after < 6
        assert await srv.exit_code(within=10) == 0
        assert "closing 1 live session(s)" in srv.lines


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_a_second_signal_closes_live_sessions_at_once(tmp_path: Path) -> None:
    agent = write(tmp_path, AGENT.format(version="hello"))
    async with (
        server(["serve", str(agent), "--drain-timeout", "60"]) as srv,
        aiohttp.ClientSession() as http,
    ):
        ws = await http.ws_connect(f"{srv.base}/ws")
        client = Client(ws)
        await client.start()
        await client.wait_for(greeted("hello"))
        srv.process.send_signal(signal.SIGTERM)
        await srv.wait_line(r"^draining: ")
        started = asyncio.get_running_loop().time()
        srv.process.send_signal(signal.SIGINT)
        assert await client.wait_closed(within=10) == 1000
        assert await srv.exit_code(within=10) == 0
        assert asyncio.get_running_loop().time() - started < 6
        assert "closing 1 live session(s)" in srv.lines


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_dev_serves_the_page_and_reloads_the_agent_file(tmp_path: Path) -> None:
    agent = write(tmp_path, AGENT.format(version="version one"))
    async with server(["dev", str(agent)]) as srv, aiohttp.ClientSession() as http:
        await srv.wait_line(r"^  reloading .*agent\.py when it changes")
        async with http.get(f"{srv.base}/") as response:
            assert response.status == 200
            assert response.content_type == "text/html"
            page = await response.text()
            assert "<html" in page and "rejoinder" in page
        async with http.get(f"{srv.base}/page.js") as response:
            assert response.status == 200

        async with http.ws_connect(f"{srv.base}/ws") as ws:
            client = Client(ws)
            await client.start()
            await client.wait_for(greeted("version one"))

            # Edit the file: new connections get the new entry point, this one keeps its.
            stat = agent.stat()
            agent.write_text(AGENT.format(version="version two"))
            os.utime(agent, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
            await srv.wait_line(r"^reloaded ")
            async with http.ws_connect(f"{srv.base}/ws") as ws2:
                second = Client(ws2)
                await second.start()
                await second.wait_for(greeted("version two"))
            await ws.send_str(json.dumps({"type": "text", "text": "hi"}))
            await client.wait_for(greeted("Hello."))

            # A broken edit is reported; the previous version keeps serving.
            agent.write_text("async def entrypoint(conn):\n    return (\n")
            os.utime(agent, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
            line = await srv.wait_line(r"^reload failed")
            assert "syntax error" in line
            async with http.ws_connect(f"{srv.base}/ws") as ws3:
                third = Client(ws3)
                await third.start()
                await third.wait_for(greeted("version two"))
        srv.process.send_signal(signal.SIGINT)
        assert await srv.exit_code(within=10) == 0


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_serve_reports_a_bad_agent_file_and_exits_2(tmp_path: Path) -> None:
    agent = write(tmp_path, "x = 1\n")
    process = await asyncio.create_subprocess_exec(
        *REJOINDER,
        "serve",
        str(agent),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 2
    assert out == b""
    text = err.decode()
    assert text.startswith("rejoinder serve: error: ")
    assert "defines no 'entrypoint'" in text and "async def entrypoint(conn" in text


def make_demo_command(*variables: str) -> tuple[list[str], list[str]]:
    """What ``make demo`` prints and the command it runs, from ``make -n demo`` (a dry
    run: nothing is executed, not even the bootstrap)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    dry = subprocess.run(
        ["make", "-n", "demo", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    script = dry.stdout.replace("\\\n", " ")
    echoed = [shlex.split(line)[1] for line in script.splitlines() if line.startswith("echo ")]
    runs = [line for line in script.splitlines() if "rejoinder dev" in line]
    assert len(runs) == 1, script
    return echoed, shlex.split(runs[0])


@pytest.mark.looptime(False)
@pytest.mark.timeout(60)
async def test_make_demo_command_serves_the_offline_voice_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``make demo``'s command (on a free port): the page, and the offline voice agent
    greeting a WebSocket client with Piper's voice."""
    echoed, command = make_demo_command()
    assert "For the text console instead: .venv/bin/rejoinder console" in echoed
    assert command == [".venv/bin/rejoinder", "dev", "examples/voice_agent.py"]
    if not (ROOT / command[0]).exists():
        command[0] = str(Path(sys.executable).with_name("rejoinder"))
    # make demo exports when it began; the server says how long it took to the page
    monkeypatch.setenv("REJOINDER_DEMO_STARTED_AT", str(time.time() - 1.0))
    # The demo loads its models before it listens: on a loaded machine (the suite's other
    # workers beside it) that took more than the usual 15 s; its own bound below is 60 s.
    demo = server(command[1:], command=command[:1], startup_timeout=45)
    async with demo as srv, aiohttp.ClientSession() as http:
        assert srv.lines[0] == "rejoinder dev: examples/voice_agent.py"
        [up] = [line for line in srv.lines if "after make demo began" in line]
        seconds = re.fullmatch(r"  the page is up (\d+\.\d) s after make demo began", up)
        assert seconds is not None and 1.0 <= float(seconds.group(1)) < 60, up
        assert f"  open http://127.0.0.1:{srv.port}/ in a browser" in srv.lines
        async with http.get(f"{srv.base}/healthz") as response:
            assert (await response.json())["status"] == "ok"
        async with http.get(f"{srv.base}/") as response:
            assert response.status == 200
        async with http.ws_connect(f"{srv.base}/ws") as ws:
            client = Client(ws)
            ready = await client.start()
            assert ready["sample_rate"] == 22050  # Piper's joe voice, sent as it is made
            greeting = await client.wait_for(
                lambda m: m["type"] == "transcript" and m["role"] == "agent" and m["final"], 40
            )
            assert greeting["text"].startswith("Hi! I'm the rejoinder voice demo.")
            assert client.samples > 22050  # more than a second of speech
        srv.process.send_signal(signal.SIGINT)
        assert await srv.exit_code(within=15) == 0


def test_make_demo_passes_a_model_and_options_through() -> None:
    _, command = make_demo_command(
        "LLM=llama3.2", "BASE_URL=http://localhost:11434/v1", "ARGS=--port 8080"
    )
    assert command == [
        "REJOINDER_LLM=llama3.2",
        "OPENAI_BASE_URL=http://localhost:11434/v1",
        ".venv/bin/rejoinder",
        "dev",
        "examples/voice_agent.py",
        "--port",
        "8080",
    ]


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_serve_telephony_twilio_answers_a_checked_webhook_and_a_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rejoinder.io.telephony.twilio_webhook import TOKEN_PARAMETER, twilio_signature
    from rejoinder.testing import FakePhoneCall

    agent = write(tmp_path, AGENT.format(version="Hello caller."))
    argv = ["serve", str(agent), "--telephony", "twilio"]
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "secret-token")  # the subprocess inherits it
    async with server(argv) as srv, aiohttp.ClientSession() as http:
        phone = await srv.wait_line(r"phone: +Twilio voice webhook")
        assert f"POST {srv.base}/twilio/twiml (signature checked)" in phone
        url = f"{srv.base}/twilio/twiml"
        form = {"CallSid": "CA42", "From": "+15550001", "To": "+15550002"}
        forged = await http.post(url, data=form, headers={"X-Twilio-Signature": "bad"})
        assert forged.status == 403
        signature = twilio_signature("secret-token", url, form)
        answer = await http.post(url, data=form, headers={"X-Twilio-Signature": signature})
        assert answer.status == 200
        twiml = await answer.text()
        stream = re.search(r'<Stream url="([^"]+)"', twiml)
        token = re.search(rf'name="{TOKEN_PARAMETER}" value="([^"]+)"', twiml)
        assert stream is not None and token is not None, twiml
        assert stream.group(1) == f"ws://127.0.0.1:{srv.port}/twilio"
        async with FakePhoneCall.connect(
            stream.group(1), call_sid="CA42", parameters={TOKEN_PARAMETER: token.group(1)}
        ) as call:
            # The greeting (said from on_enter) is heard over the phone line.
            await call.until(lambda: call.heard_seconds() >= 0.12, 10)
            await call.hang_up()


def test_server_log_lines_name_the_session_and_agent() -> None:
    import io
    import logging

    from rejoinder.cli import _configure_server_logging

    logger = logging.getLogger("rejoinder")
    before, level = list(logger.handlers), logger.level
    _configure_server_logging(verbose=False)
    try:
        (handler,) = [h for h in logger.handlers if h not in before]
        assert isinstance(handler, logging.StreamHandler)
        out = io.StringIO()
        handler.setStream(out)
        logging.getLogger("rejoinder.io").warning("outside a session")
        assert out.getvalue() == "WARNING rejoinder.io [- -]: outside a session\n"
    finally:
        for h in list(logger.handlers):
            if h not in before:
                logger.removeHandler(h)
        logger.setLevel(level)


# ------------------------------------------------- what dev and serve log

LOGGED_AGENT = """
import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD


class Greeter(rj.Agent):
    instructions = "test"

    async def on_enter(self) -> None:
        self.session.say("Welcome.")


async def entrypoint(conn):
    session = rj.AgentSession(
        llm=ScriptedLLM([["Hello."], ["Still here."]]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(["Hi there."]),
        tts=ScriptedTTS(seconds_per_char=0.01),
        user_away_timeout=None,
    )
    await conn.serve(session, Greeter())
"""

SESSION_LINE = re.compile(r"^\d\d:\d\d:\d\d (session_\w+) (.*)$")


async def one_spoken_and_one_typed_turn(base: str) -> None:
    """A client that says "Hi there." (a tone the scripted recognizer hears as that),
    then types "still there?", each answered, then leaves."""
    import rejoinder.client
    from rejoinder.io.protocol import TranscriptMessage
    from rejoinder.testing import speech_frame

    def answered(text: str) -> Any:
        return lambda m: (
            isinstance(m, TranscriptMessage) and m.role == "agent" and m.final and m.text == text
        )

    url = base.replace("http", "ws", 1) + "/ws"
    async with rejoinder.client.connect(url, sample_rate=16000, jitter=0.02) as conn:
        await conn.wait_for(answered("Welcome."), within=10)
        await conn.wait_for_state("listening", within=10)
        await conn.send_audio(speech_frame(0.4, 16000).to_pcm())  # then silence: paced
        await conn.wait_for(answered("Hello."), within=10)
        await conn.wait_for_state("listening", within=10)
        mark = len(conn.log)
        await conn.send_text("still there?")
        await conn.wait_for(answered("Still here."), within=10)
        await conn.wait_for_state("listening", within=10, since=mark)


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_dev_prints_a_line_per_session_and_per_turn(tmp_path: Path) -> None:
    agent = write(tmp_path, LOGGED_AGENT)
    async with server(["dev", str(agent), "--no-reload"], with_stderr=True) as srv:
        await one_spoken_and_one_typed_turn(srv.base)
        ended = await srv.wait_line(r"^\d\d:\d\d:\d\d session_\w+ ended after ")
        srv.process.send_signal(signal.SIGINT)
        assert await srv.exit_code(within=10) == 0
    lines = [m.groups() for m in map(SESSION_LINE.match, srv.lines) if m is not None]
    assert len({session for session, _ in lines}) == 1, srv.lines  # one session, named
    said = [text for _, text in lines]
    assert said[0] == "started: websocket from 127.0.0.1, agent Greeter"
    greeting = re.fullmatch(
        r"greeting: first audio heard (\d+\.\d\d) s after the session began", said[1]
    )
    assert greeting is not None, said
    assert 0.0 < float(greeting.group(1)) < 2.0
    del said[1]
    spoken = re.fullmatch(
        r'turn: heard "Hi there\.", first audio (\d+\.\d\d) s after the speech ended', said[1]
    )
    assert spoken is not None, said
    # The scripted recognizer waits 0.3 s of quiet; the rest is the reply being made and
    # the client's jitter buffer (the speaker reports what it played).
    assert 0.0 < float(spoken.group(1)) < 2.0
    typed = re.fullmatch(
        r'turn: typed "still there\?", answer began (\d+\.\d\d) s after the message', said[2]
    )
    assert typed is not None, said
    assert re.fullmatch(r"ended after \d+\.\d s \(client left\), 2 turns", said[3]), said
    assert said[3] in ended
    assert len(said) == 4
    # No warning or error came with them (the default: warnings only).
    assert not [line for line in srv.lines if line.startswith(("WARNING", "ERROR"))]


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
async def test_serve_logs_json_lines_with_the_session_and_agent(tmp_path: Path) -> None:
    agent = write(tmp_path, LOGGED_AGENT)
    argv = ["serve", str(agent), "--log-format", "json"]
    async with server(argv, with_stderr=True) as srv:
        await one_spoken_and_one_typed_turn(srv.base)
        await srv.wait_line(r'"event": "session_ended"')
        srv.process.send_signal(signal.SIGTERM)
        assert await srv.exit_code(within=10) == 0
    records = [json.loads(line) for line in srv.lines if line.startswith("{")]
    assert records and all({"session_id", "agent_id", "time", "level"} <= set(r) for r in records)
    by_event = {r.get("event"): r for r in records}
    started, ended = by_event["session_started"], by_event["session_ended"]
    turns = [r for r in records if r.get("event") == "turn"]
    session_id = started["session_id"]
    assert session_id.startswith("session_")
    assert {r["session_id"] for r in [started, ended, *turns]} == {session_id}
    assert {r["agent_id"] for r in [started, ended, *turns]} == {"Greeter"}
    assert started["transport"] == "websocket"
    assert ended["reason"] == "client left" and ended["turns"] == 2 and ended["duration"] > 0
    assert [(t["input"], t["words"], t["latency_from"]) for t in turns] == [
        ("heard", 2, "end_of_speech"),
        ("typed", 2, "message"),
    ]
    assert all(0 < t["latency"] < 2 for t in turns)
    assert 0 < by_event["greeting"]["latency"] < 2
    assert by_event["greeting"]["session_id"] == session_id
    # serve keeps what people said out of its log unless --log-transcripts
    assert not any("text" in t for t in turns)
    assert "Hi there" not in "\n".join(srv.lines)
    # Nothing was logged as text (the banner on stdout is the only text).
    assert not [line for line in srv.lines if SESSION_LINE.match(line)]
    assert not [line for line in srv.lines if line.startswith(("WARNING", "ERROR", "INFO"))]


def test_json_log_lines_of_the_runtime_carry_null_ids_outside_a_session() -> None:
    import logging

    from rejoinder.server_log import JsonLogFormatter

    record = logging.LogRecord("rejoinder.io", logging.WARNING, __file__, 1, "x %s", ("y",), None)
    record.session_id, record.agent_id = "-", "-"
    line = json.loads(JsonLogFormatter().format(record))
    assert line["message"] == "x y" and line["level"] == "warning"
    assert line["session_id"] is None and line["agent_id"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])


@pytest.mark.looptime(False)
@pytest.mark.timeout(40)
@pytest.mark.skipif(not webrtc_available(), reason="the webrtc extra is not installed")
async def test_ice_flags_reach_the_page_with_fresh_turn_credentials(tmp_path: Path) -> None:
    """``--ice-server`` and ``--turn-secret`` (from the environment, so it is not on the
    command line): ``GET /api/ice`` hands each client TURN credentials minted for it, and
    the banner names the servers but never the secret."""
    agent = write(tmp_path, LOGGED_AGENT)
    turn = "turn:127.0.0.1:3478?transport=udp"
    argv = ["serve", str(agent), "--ice-server", "stun:127.0.0.1:3478", "--ice-server", turn]
    os.environ["REJOINDER_TURN_SECRET"] = "n0t-on-the-command-line"
    try:
        async with server(argv) as srv, aiohttp.ClientSession() as http:
            [ice_line] = [line for line in srv.lines if line.startswith("  ICE:")]
            assert turn in ice_line and "minted per client" in ice_line
            assert "n0t-on-the-command-line" not in "\n".join(srv.lines)
            answers = []
            for _ in range(2):
                async with http.get(f"{srv.base}/api/ice") as response:
                    assert response.status == 200
                    assert response.headers["Cache-Control"] == "no-store"
                    answers.append(await response.json())
    finally:
        del os.environ["REJOINDER_TURN_SECRET"]
    for answer in answers:
        stun, relay = answer["ice_servers"]
        assert stun["urls"] == ["stun:127.0.0.1:3478"] and "credential" not in stun
        assert relay["urls"] == [turn]
        assert re.fullmatch(r"\d+:\S+", relay["username"]) and relay["credential"]
    assert answers[0]["ice_servers"][1] != answers[1]["ice_servers"][1]  # per client


def test_a_bad_ice_server_is_a_usage_error(tmp_path: Path) -> None:
    agent = write(tmp_path, LOGGED_AGENT)
    done = subprocess.run(
        [*REJOINDER, "serve", str(agent), "--ice-server", "http://example.com"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "error" in done.stderr and "http://example.com" in done.stderr
