"""Whole SIP calls on 127.0.0.1, in real time, with the real RTP half (``RtpCall``) and
a session on the test kit's scripted models: baresip as the caller (headless: a WAV file
is its microphone, its ``sndfile`` module records what it hears) and SIPp for the
signalling with ``rtp_stream``.

With baresip the audio goes both ways: the caller's tone reaches the session (its VAD
hears it, the scripted STT turns it into the user's message), the agent's answer comes
back as RTP (recorded by baresip, about as long as the scripted TTS made it), and the
agent then hangs up (``session.shutdown``): our BYE ends baresip's call."""

from __future__ import annotations

import asyncio
import shutil
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.io.admission import SessionGate
from rejoinder.io.connection import Connection
from rejoinder.io.sip import SipEndpoint, SipOptions
from rejoinder.testing import ScriptedTTS, speech_frame

from .._client import scripted_session
from ._sip_support import SIPP, free_udp_port, run_sipp

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

BARESIP = shutil.which("baresip")
REPLY = "It is noon in Paris."
SECONDS_PER_CHAR = 0.05


class Agent:
    """The entry point: a scripted session that answers once, then hangs up."""

    def __init__(self, transcripts: list[str]) -> None:
        self.make = scripted_session(
            [[REPLY]], transcripts, lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR)
        )
        self.sessions: list[rj.AgentSession[Any]] = []
        self.conns: list[Connection] = []
        self.closes: list[str] = []

    async def __call__(self, conn: Connection) -> None:
        session = self.make()
        spoke: list[str] = []

        def changed(event: Any) -> None:
            spoke.append(event.new_state)
            if event.new_state == "listening" and "speaking" in spoke:
                session.shutdown(reason="agent hung up")  # the answer was heard: goodbye

        session.on("agent_state_changed", changed)
        session.on("close", lambda e: self.closes.append(e.reason))
        self.sessions.append(session)
        self.conns.append(conn)
        await conn.serve(session, rj.Agent(instructions="test"))


def write_wav(path: Path, pcm: np.ndarray[Any, np.dtype[np.int16]]) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(pcm.astype(np.int16).tobytes())


def read_wav(path: Path) -> np.ndarray[Any, np.dtype[np.int16]]:
    with wave.open(str(path), "rb") as source:
        return np.frombuffer(source.readframes(source.getnframes()), dtype=np.int16)


def heard_audio(folder: Path) -> np.ndarray[Any, np.dtype[np.int16]]:
    """What baresip's ``sndfile`` recorded of the audio it decoded (what it heard)."""
    (heard_file,) = folder.glob("dump-*-dec.wav")
    return read_wav(heard_file)


def baresip_config(folder: Path, sip_port: int, rtp_port: int) -> None:
    (folder / "config").write_text(
        "\n".join(
            [
                "poll_method epoll",
                f"sip_listen 127.0.0.1:{sip_port}",
                "sip_transports udp",
                f"audio_source aufile,{folder / 'say.wav'}",
                f"audio_alert aufile,{folder / 'say.wav'}",
                "audio_player aubridge,nowhere",  # no sound card: sndfile records instead
                "ausrc_srate 8000",
                "auplay_srate 8000",
                "audio_channels 1",
                # baresip's jitter buffer releases a packet as the next arrives: with its
                # default depth (5-10) the last 100 ms of an answer wait there for the next
                # one, as RtpCall sends nothing between replies (silence suppression).
                "jitter_buffer_delay 2-4",
                f"rtp_ports {rtp_port}-{rtp_port + 10}",
                "module_path /usr/lib/baresip/modules",
                "module g711.so",
                "module aufile.so",
                "module aubridge.so",
                "module sndfile.so",
                "module_app account.so",
                "module_app menu.so",
                f"snd_path {folder}",
                "",
            ]
        )
    )
    (folder / "accounts").write_text("<sip:caller@127.0.0.1>;regint=0;audio_codecs=PCMU\n")


@pytest.mark.skipif(BARESIP is None, reason="baresip not installed (apt-get install baresip)")
async def test_a_baresip_call_audio_both_ways_then_the_agent_hangs_up(tmp_path: Path) -> None:
    agent = Agent(["What time is it in Paris?"])
    # One second of the caller's voice, then quiet for the rest of the call.
    voice = speech_frame(1.0, 8000).data
    write_wav(tmp_path / "say.wav", np.concatenate([voice, np.zeros(8000 * 8, np.int16)]))
    endpoint = SipEndpoint(agent, gate=SessionGate(), options=SipOptions(port=0))
    _, port = await endpoint.start()
    try:
        baresip_config(tmp_path, free_udp_port(), free_udp_port() & ~1)
        process = await asyncio.create_subprocess_exec(
            str(BARESIP), "-f", str(tmp_path), "-t", "8",
            "-e", f"/dial sip:+15559998888@127.0.0.1:{port}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output_task = asyncio.ensure_future(process.communicate())
        async with asyncio.timeout(8):
            while not agent.closes or endpoint.connections:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # until the agent hung up and the BYE went
        await asyncio.sleep(0.3)  # baresip takes the BYE
        if process.returncode is None:
            process.terminate()  # baresip quits cleanly on SIGTERM (its files closed)
        output, _ = await asyncio.wait_for(output_task, 5)
    finally:
        await endpoint.aclose()
    log = output.decode(errors="replace")
    assert "Call established" in log, log[-2000:]
    # The agent hung up: our BYE ended baresip's call (a BYE received is, in baresip's
    # words, the session "closed: Connection reset by peer"; its own quit says otherwise).
    assert agent.closes == ["agent hung up"]
    assert "Connection reset by peer" in log, log[-2000:]
    (session,) = agent.sessions
    users = [m for m in session.history.items if isinstance(m, rj.ChatMessage) and m.role == "user"]
    assert [m.content for m in users] == ["What time is it in Paris?"]  # the caller was heard
    heard = heard_audio(tmp_path)
    loud = np.flatnonzero(np.abs(heard) > 300)
    assert loud.size, "baresip heard nothing"
    span = (loud[-1] - loud[0]) / 8000
    # The whole answer arrived, as long as the scripted TTS made it (G.711, 20 ms packets).
    assert span == pytest.approx(len(REPLY) * SECONDS_PER_CHAR, abs=0.06)  # 2 held: 0.96 s
    conn = agent.conns[0]
    assert conn.transport == "sip" and conn.call is not None
    assert conn.call.from_number == "caller" and conn.call.to_number == "+15559998888"


@pytest.mark.skipif(SIPP is None, reason="SIPp not installed (apt-get install sip-tester)")
async def test_sipp_calls_with_the_real_rtp_reach_a_session_and_end_on_bye() -> None:
    agent = Agent(["Hello?"])
    endpoint = SipEndpoint(agent, gate=SessionGate(), options=SipOptions(port=0))
    _, port = await endpoint.start()
    try:
        result = await run_sipp("basic.xml", port, calls=3, rate=5, limit=3)
        for _ in range(100):  # the sessions close just after SIPp's BYEs
            if len(agent.closes) == 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await endpoint.aclose()
    assert result.returncode == 0, result.errors
    assert result.stats["SuccessfulCall(C)"] == "3"
    assert agent.closes == ["call ended"] * 3
    assert all(c.call is not None and c.call.codec == "mulaw" for c in agent.conns)


@pytest.mark.skipif(SIPP is None, reason="SIPp not installed (apt-get install sip-tester)")
async def test_conn_transfer_goes_through_the_sip_line() -> None:
    agent = Agent(["Hello?"])
    outcomes: list[str] = []

    async def entrypoint(conn: Connection) -> None:
        async def transfer_once_serving() -> None:
            while conn.session is None:  # noqa: ASYNC110 - serve sets it as it starts
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            await conn.transfer("+15551234567")  # a number: to the caller's trunk
            outcomes.append("returned")

        transfer = asyncio.ensure_future(transfer_once_serving())
        try:
            await agent(conn)
        finally:
            await asyncio.wait_for(transfer, 2)

    endpoint = SipEndpoint(entrypoint, gate=SessionGate(), options=SipOptions(port=0))
    _, port = await endpoint.start()
    try:
        result = await run_sipp("transfer_ok.xml", port)
    finally:
        await endpoint.aclose()
    assert result.returncode == 0, result.errors
    assert outcomes == ["returned"]
    assert agent.closes == ["transferred"]
