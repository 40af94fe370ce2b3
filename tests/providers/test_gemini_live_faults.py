"""google.Live against a loopback server that misbehaves: garbage, a wrong key, refusals,
an internal error or a stall during the setup, nothing listening, a fatal or an error
close mid-turn; and closing, bounded and leaving nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from rejoinder.models.realtime import (
    BackendResponseEnded,
    BackendResponseStarted,
    ConnectionLost,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    Reconnected,
    Transcript,
)
from rejoinder.providers.google.live import Live
from rejoinder.testing import advance, now
from rejoinder.testing.gemini_live_server import GeminiLiveServer

from ._servers import serving, unused_port
from .test_gemini_live import Connect, connecting, live_tasks, output, tone

pytestmark = pytest.mark.looptime(noop_cycles=2000)


server = serving(GeminiLiveServer)
connect = connecting()


# -- a server that misbehaves ---------------------------------------------------------------


async def test_garbage_is_reported_and_the_session_goes_on(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.send_raw("this is not JSON")
    await server.send_binary(b"\xff\xfe")
    await server.send_raw("[1, 2, 3]")
    await server.send_raw('{"serverContent": ' + "[" * 10_000 + "]" * 10_000 + "}")
    await server.send({"serverContent": {"modelTurn": {"parts": "not a list"}}})
    await server.send({"toolCall": {"functionCalls": [{"name": "get_weather"}]}})
    bad_audio = {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": "%%%"}}
    await server.send({"serverContent": {"modelTurn": {"parts": [bad_audio]}}})
    await server.send({"somethingNew": {"x": 1}})
    await server.answer("Still here.", seconds=0.1)
    await recorder.wait_for(BackendResponseEnded)
    errors = recorder.of(ProviderError)
    assert len(errors) == 7
    assert not any(error.error.fatal for error in errors)
    texts = [str(error.error) for error in errors]
    assert "not JSON" in texts[0] and "not JSON" in texts[1] and "not a JSON object" in texts[2]
    assert "nested too deeply" in texts[3] and all(len(t) < 400 for t in texts)
    assert "parts" in texts[4] and "without an id" in texts[5] and "base64" in texts[6]
    assert recorder.of(Transcript) == [Transcript("assistant", "Still here.")]
    assert len(server.connections) == 1


async def test_a_wrong_key_fails_start_at_once() -> None:
    async with GeminiLiveServer(api_key="right") as server:
        session = Live(api_key="wrong", base_url=server.base_url).session()
        with pytest.raises(RealtimeError, match="API key not valid") as caught:
            await session.start(RealtimeConfig("x"))
        assert caught.value.fatal and caught.value.code == "ws_1008"
        assert len(server.connections) == 1  # not retried
        assert session.connect_retries == 0


async def test_http_refusals_are_retried_before_anything_was_said(
    server: GeminiLiveServer, connect: Connect
) -> None:
    server.refuse(503, times=2)
    session, _ = await connect(retry_backoff=0.1)
    assert session.connect_retries == 2 and server.refused == 2
    assert len(server.connections) == 1


async def test_an_internal_error_during_setup_is_retried_an_invalid_setup_is_not(
    server: GeminiLiveServer,
) -> None:
    server.setup_error = (1011, "Internal error encountered.")
    session = Live(
        api_key="k", base_url=server.base_url, max_retries=2, retry_backoff=0.1
    ).session()
    with pytest.raises(RealtimeError, match="Internal error") as caught:
        await session.start(RealtimeConfig("x"))
    assert not caught.value.fatal and len(server.connections) == 3
    server.setup_error = (1007, "Request contains an invalid argument.")
    session = Live(api_key="k", base_url=server.base_url).session()
    with pytest.raises(RealtimeError, match="invalid argument") as caught:
        await session.start(RealtimeConfig("x"))
    assert caught.value.fatal and len(server.connections) == 4


async def test_a_stalled_setup_is_bounded_by_connect_timeout(server: GeminiLiveServer) -> None:
    server.answer_setup = False
    session = Live(api_key="k", base_url=server.base_url, connect_timeout=3.0).session()
    started = now()
    with pytest.raises(RealtimeError, match=r"within 3\.0s") as caught:
        await session.start(RealtimeConfig("x"))
    assert not caught.value.fatal
    assert 3.0 <= now() - started < 4.0
    assert "key=k" not in str(caught.value)  # never the key


async def test_nothing_listening_is_a_transient_start_error() -> None:
    port = unused_port()
    model = Live(api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(RealtimeError, match="cannot connect") as caught:
        await model.session().start(RealtimeConfig("x"))
    assert not caught.value.fatal and "key=…" in str(caught.value)


async def test_a_fatal_close_ends_the_session(server: GeminiLiveServer, connect: Connect) -> None:
    _, recorder = await connect()
    await server.audio(0.1)
    await server.close(1011, "You exceeded your current quota.")
    await recorder.wait_ended()
    assert recorder.kinds() == [
        "BackendResponseStarted",
        "AgentAudioStarted",
        "AgentAudio",
        "AgentAudioEnded",  # what was said still happened
        "ProviderError",
        "ConnectionLost",
    ]
    error = recorder.of(ProviderError)[0].error
    assert error.fatal and "quota" in str(error)
    assert recorder.of(ConnectionLost) == [ConnectionLost(str(error), reconnecting=False)]
    await advance(5.0)
    assert len(server.connections) == 1


async def test_an_error_close_mid_turn_is_a_lost_connection_that_resumes(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.input_transcript("Weather?")
    await server.audio(0.1)
    await server.close(1011, "Internal error encountered.")
    lost = await recorder.wait_for(ConnectionLost)
    assert lost.reconnecting and "1011" in lost.reason
    await recorder.wait_for(Reconnected)
    assert session.reconnects == 1 and session.recycles == 0
    second = server.connections[1]
    assert second.resumed_from == server.handles[0]  # the conversation is the server's
    assert server.kinds(2) == ["setup"]  # so nothing is replayed
    assert recorder.kinds()[:6] == [
        "UserSpeechStarted",
        "Transcript",
        "UserTurnEnded",
        "BackendResponseStarted",
        "AgentAudioStarted",
        "AgentAudio",
    ]
    assert recorder.kinds()[6:] == ["AgentAudioEnded", "ConnectionLost", "Reconnected"]
    await server.answer("Sunny.", seconds=0.1)  # the new connection works
    assert (await recorder.wait_for(BackendResponseStarted, count=2)).response_id == "turn_2_1"


async def test_aclose_is_bounded_idempotent_and_leaves_nothing(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.audio(0.2)
    started = now()
    await session.aclose()
    await session.aclose()
    assert now() - started < 3.0
    await recorder.wait_ended()
    assert recorder.of(ConnectionLost) == []
    assert live_tasks() == []
    await server.wait_closed(1)
    session.push_audio(tone(0.2, 16000))  # ignored, not an error
    assert session.submit_tool_output(output("c9"), reply_required=True) == "silent"


async def test_aclose_while_connecting_fails_start(server: GeminiLiveServer) -> None:
    server.answer_setup = False
    session = Live(api_key="k", base_url=server.base_url).session()
    start = asyncio.create_task(session.start(RealtimeConfig("x")))
    await server.wait_connected()
    await session.aclose()
    with pytest.raises((RealtimeError, asyncio.CancelledError)):
        await start
    assert live_tasks() == []


async def test_with_reconnects_off_a_drop_ends_the_session_once(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(max_reconnect_attempts=0)
    await server.audio(0.2)
    await server.drop()
    await recorder.wait_ended()
    assert recorder.kinds()[-3:] == ["AgentAudioEnded", "ProviderError", "ConnectionLost"]
    assert recorder.of(ConnectionLost)[0].reconnecting is False
    assert "reconnecting is disabled" in str(recorder.of(ProviderError)[0].error)
    assert len(server.connections) == 1
