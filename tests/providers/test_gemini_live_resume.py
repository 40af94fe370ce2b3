"""google.Live replacing its connection: a GoAway, ``recycle_after``, a new agent's setup
or a drop lead to a new connection that resumes the newest handle at a quiet moment (no
``ConnectionLost``: nothing was lost), or, if no quiet moment comes before the GoAway's
deadline, just before it (reported lost). Reconnects are bounded. On virtual time, over
the loopback server, with short server-side limits."""

from __future__ import annotations

import pytest

from rejoinder.models import ChatContext
from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import (
    AgentAudio,
    BackendResponseEnded,
    BackendResponseStarted,
    ConnectionLost,
    ProviderError,
    RealtimeConfig,
    Reconnected,
)
from rejoinder.testing import advance, now
from rejoinder.testing.gemini_live_server import GeminiLiveServer

from ._servers import serving
from .test_gemini_live import NOTE, WEATHER, Connect, connecting

pytestmark = pytest.mark.looptime(noop_cycles=2000)


server = serving(GeminiLiveServer)
connect = connecting()


def history() -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="user", content="What's the weather in Paris?")
    ctx.add_message(role="assistant", content="Sunny, 18 degrees.")
    return ctx


def config() -> RealtimeConfig:
    return RealtimeConfig(instructions="Be brief.", tools=[WEATHER], history=history)


async def test_a_go_away_at_a_quiet_moment_resumes_the_newest_handle(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(config())
    await server.answer("Hello.", seconds=0.2)
    await recorder.wait_for(BackendResponseEnded)
    newest = server.handles[-1]
    await server.go_away(30.0)
    await recorder.wait_for(Reconnected)
    assert len(server.connections) == 2 and server.connections[0].closed
    second = server.connections[1]
    assert second.resumed_from == newest
    assert second.setup["sessionResumption"] == {"handle": newest}
    assert server.kinds(2) == ["setup"]  # resumed: the history stays on the server
    assert server.kinds(1) == ["setup", "clientContent"]  # seeded once, at the start
    assert recorder.of(ConnectionLost) == []
    assert session.recycles == 1 and session.reconnects == 0
    await server.answer("Still here.", seconds=0.1)
    assert (await recorder.wait_for(BackendResponseStarted, count=2)).response_id == "turn_2_1"


async def test_a_go_away_waits_for_the_turn_to_end(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.output_transcript("Here is a long story.")
    await server.audio(0.5)
    await server.go_away(40.0)
    await advance(5.0)
    assert len(server.connections) == 1  # the model speaks: not now
    t_done = now()
    await server.generation_complete()
    await server.turn_complete()  # and a fresh handle after it
    await recorder.wait_for(Reconnected)
    assert now() - t_done < 0.5  # the first quiet moment
    assert recorder.of(ConnectionLost) == []


async def test_a_handle_older_than_the_last_turn_is_not_resumed(
    server: GeminiLiveServer, connect: Connect
) -> None:
    server.resumption_updates = False
    _, recorder = await connect()
    first = await server.resumption_update()
    await server.answer("Hello.", seconds=0.1)  # after it: the handle misses this turn
    await server.go_away(40.0)
    await advance(3.0)
    assert len(server.connections) == 1
    fresh = await server.resumption_update()
    await recorder.wait_for(Reconnected)
    assert server.connections[1].resumed_from == fresh != first


async def test_with_no_quiet_moment_the_switch_comes_just_before_the_deadline(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    started = now()
    await server.audio(0.3)  # a turn that never completes
    await server.go_away(6.0, close_after=True)
    lost = await recorder.wait_for(ConnectionLost, within=10)
    assert 3.9 <= now() - started <= 4.3  # 2 s before the deadline
    assert lost.reconnecting
    await recorder.wait_for(Reconnected)
    assert recorder.kinds()[-3:] == ["AgentAudioEnded", "ConnectionLost", "Reconnected"]
    assert server.connections[1].resumed_from is not None
    assert session.reconnects == 1


async def test_recycle_after_replaces_an_old_connection_without_a_go_away(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(recycle_after=30.0)
    await advance(29.5)
    assert len(server.connections) == 1
    await advance(1.0)
    await recorder.wait_for(Reconnected)
    await advance(31.0)  # and again, 30 s after the new one went live
    await recorder.wait_for(Reconnected, count=2)
    assert session.recycles == 2 and len(server.connections) == 3
    assert recorder.of(ConnectionLost) == []


async def test_a_short_connection_limit_is_met_by_switching_before_it(
    server: GeminiLiveServer, connect: Connect
) -> None:
    server.max_connection_seconds = 8.0
    server.go_away_notice = 3.0
    session, recorder = await connect()
    await advance(28.0)
    # Each replaced at its GoAway (5 s in), before the limit: at 5, 10, 15, 20 and 25 s.
    assert len(server.connections) == 6
    assert recorder.of(ConnectionLost) == [] and recorder.of(ProviderError) == []
    assert session.recycles == 5
    assert all(c.close_code is None for c in server.connections)  # never closed by it
    assert all(c.resumed_from is not None for c in server.connections[1:])


async def test_a_drop_at_a_quiet_moment_loses_nothing(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await advance(10.0)
    await server.drop()
    await recorder.wait_for(Reconnected)
    assert recorder.of(ConnectionLost) == []
    assert session.recycles == 1 and server.connections[1].resumed_from is not None


async def test_a_refused_handle_starts_a_new_session_seeded_with_the_history(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(config())
    await server.wait_for("clientContent")  # the first session was seeded
    await server.audio(0.2)
    newest = server.handles[-1]
    server.handles.clear()  # the service forgot the session
    await server.drop()
    await recorder.wait_for(Reconnected)
    assert [c.resumed_from for c in server.connections] == [None, None, None]
    refused, fresh = server.connections[1], server.connections[2]
    assert refused.setup["sessionResumption"]["handle"] == newest
    assert refused.close_code == 1007
    assert fresh.setup["sessionResumption"] == {}
    await server.wait_for("clientContent", count=2)  # the first session's, then this one's
    assert server.client_texts(3)[0] == ("user", "What's the weather in Paris?", False)
    assert len(recorder.of(ConnectionLost)) == 1


async def test_connections_that_keep_dying_end_the_session_without_a_storm(
    server: GeminiLiveServer, connect: Connect
) -> None:
    server.max_connection_seconds = 0.5
    server.go_away_notice = 0.0
    started = now()
    _, recorder = await connect(max_reconnect_attempts=3, reconnect_backoff=0.5)
    await recorder.wait_ended(within=30)
    assert len(server.connections) == 4  # the first, and 3 tries with backoff
    assert 4.0 <= now() - started <= 8.0  # 0.5 + 1 + 2 s of backoff, and 4 x 0.5 s
    assert recorder.kinds()[-2:] == ["ProviderError", "ConnectionLost"]
    assert recorder.of(ProviderError)[-1].error.fatal
    assert not recorder.of(ConnectionLost)[-1].reconnecting


async def test_a_new_agent_is_set_up_by_resuming_at_a_quiet_moment(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.audio(0.3)  # the model speaks while the agent changes
    await recorder.wait_for(AgentAudio, count=3)
    session.update_instructions("You book tables.")
    session.update_tools([NOTE])
    await server.wait_for("clientContent")
    (note,) = server.client_texts()
    assert note[0] == "user" and note[1].endswith("You book tables.") and note[2] is False
    await advance(3.0)
    assert len(server.connections) == 1  # not while the model speaks
    await server.generation_complete()
    await server.turn_complete()
    await recorder.wait_for(Reconnected)
    setup = server.setups[1]
    assert setup["systemInstruction"] == {"parts": [{"text": "You book tables."}]}
    assert [d["name"] for d in setup["tools"][0]["functionDeclarations"]] == ["take_note"]
    assert setup["sessionResumption"]["handle"] == server.handles[-2]
    assert recorder.of(ConnectionLost) == []
    session.update_instructions("You book tables.")  # the same: nothing to change
    await advance(5.0)
    assert len(server.connections) == 2


async def test_audio_during_a_switch_reaches_the_new_connection(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    server.answer_setup = False
    await server.go_away(30.0)
    await server.wait_connected(2)
    for _ in range(10):  # 1 s of audio while the new connection sets up
        session.push_audio(AudioFrame.silence(0.1, 16000))
        await advance(0.1)
    await server.setup_complete()
    await recorder.wait_for(Reconnected)
    await server.wait_for("realtimeInput.audio", count=10)
    assert len(server.of_kind("realtimeInput.audio", connection=2)) == 10
    assert session.dropped_audio_chunks == 0


async def test_a_switch_that_cannot_connect_is_reported_as_lost(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(max_reconnect_attempts=2, reconnect_backoff=0.5)
    server.refuse(503, times=10)
    await server.go_away(30.0)
    await recorder.wait_ended(within=10)
    lost = recorder.of(ConnectionLost)
    assert [event.reconnecting for event in lost] == [True, False]
    assert recorder.of(ProviderError)[-1].error.fatal
    assert "503" in str(recorder.of(ProviderError)[-1].error)


async def test_quick_agent_changes_are_no_storm(server: GeminiLiveServer, connect: Connect) -> None:
    session, recorder = await connect(max_reconnect_attempts=2)
    started = now()
    for change in range(1, 6):  # five agents in a row, each set up within a second
        session.update_instructions(f"Rules number {change}.")
        await recorder.wait_for(Reconnected, count=change)
    assert now() - started < 2.0  # no backoff: our own reason says nothing of the service
    assert session.recycles == 5 and recorder.of(ProviderError) == []
    assert server.setups[-1]["systemInstruction"] == {"parts": [{"text": "Rules number 5."}]}
