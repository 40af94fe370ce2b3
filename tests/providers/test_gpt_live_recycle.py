"""GPT-Live connection recycling (gpt-live §4.8): ``recycle_after`` replaces the connection
at the first quiet moment after it, seamlessly — ``session.close``, a new connection with
the history re-seeded and the mute re-applied, the user's audio in between held for it,
and no ``ConnectionLost`` (nothing was lost). An ``expired`` close at a quiet moment is the
same. On virtual time, over the loopback server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rejoinder.models import ChatContext
from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import (
    ConnectionLost,
    DelegationRequested,
    RealtimeConfig,
    Reconnected,
)
from rejoinder.providers.openai import GPTLive
from rejoinder.testing import GPTLiveServer, advance, now

from ._live import Recorder
from ._servers import serving
from .test_gpt_live import WEATHER, Connect

pytestmark = pytest.mark.looptime(noop_cycles=2000)


server = serving(GPTLiveServer)


@pytest.fixture
async def connect(server: GPTLiveServer) -> AsyncIterator[Connect]:
    """As in test_gpt_live: a session on the server, closed after the test."""
    opened: list[tuple[Any, Recorder]] = []

    async def factory(cfg: RealtimeConfig, **options: Any) -> tuple[Any, Recorder]:
        session = GPTLive(api_key="sk-test", base_url=server.base_url, **options).session()
        recorder = Recorder(session)
        opened.append((session, recorder))
        await session.start(cfg)
        return session, recorder

    yield factory
    for session, recorder in opened:
        await session.aclose()
        await recorder.wait_ended()


def history() -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="user", content="What's the weather in Paris?")
    ctx.add_message(role="assistant", content="Sunny, 18 degrees.")
    return ctx


def config() -> RealtimeConfig:
    return RealtimeConfig(instructions="Be brief.", tools=[WEATHER], history=history)


def closes_on(server: GPTLiveServer, connection: int) -> list[dict[str, object]]:
    return [e for e in server.received_on(connection) if e.get("type") == "session.close"]


async def test_a_quiet_connection_is_replaced_after_recycle_after(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(config(), recycle_after=30.0)
    session.set_input_muted(True)
    await advance(29.5)
    assert server.connections == 1 and not closes_on(server, 1)
    await advance(1.0)
    await recorder.wait_for(Reconnected)
    assert len(closes_on(server, 1)) == 1  # asked, not dropped
    assert server.connections == 2 and session.session_id == "session_2"
    assert session.recycles == 1
    assert recorder.of(ConnectionLost) == []  # nothing was lost
    second = server.session_starts[1]
    assert "Sunny, 18 degrees." in str(second["input"])  # the history, re-seeded
    types = [e["type"] for e in server.received_on(2)]
    assert types[:2] == ["session.start", "session.input_audio.mute"]
    # and again, 30 s after the new connection went live
    await advance(31.0)
    await recorder.wait_for(Reconnected, count=2)
    assert session.recycles == 2 and server.connections == 3


async def test_a_due_recycle_waits_for_the_backend_to_finish(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(config(), recycle_after=10.0)
    await advance(5.0)
    await server.response_created("dlg_1", "resp_1")
    await advance(10.0)  # due at 10 s, but a response runs
    assert server.connections == 1 and not closes_on(server, 1)
    t_done = now()
    await server.response_completed("dlg_1", "resp_1")
    await recorder.wait_for(Reconnected)
    assert now() - t_done < 0.5  # the first quiet moment
    assert recorder.of(ConnectionLost) == []


async def test_an_unanswered_client_delegation_holds_the_recycle(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(
        RealtimeConfig(instructions="Be brief."), recycle_after=5.0, delegation="client"
    )
    await server.delegation("dlg_1", "client")
    await recorder.wait_for(DelegationRequested)
    await advance(10.0)
    assert server.connections == 1
    session.answer_delegation("dlg_1", "It is sunny.")
    await recorder.wait_for(Reconnected)
    commentary = [e for e in server.received_on(1) if e.get("type") == "session.commentary.append"]
    assert [e["delegation_id"] for e in commentary] == ["dlg_1"]  # on the old connection


async def test_audio_during_the_switch_reaches_the_new_connection(
    server: GPTLiveServer, connect: Connect
) -> None:
    server.answer_close = False  # the service never confirms: we close after close_timeout
    session, recorder = await connect(config(), recycle_after=5.0, close_timeout=1.0)
    await advance(5.1)
    assert len(closes_on(server, 1)) == 1
    for _ in range(10):  # 1 s of audio while the old connection is closing
        session.push_audio(AudioFrame.silence(0.1, 24000))
        await advance(0.1)
    await recorder.wait_for(Reconnected)
    assert session.dropped_audio_chunks == 0
    held = [e for e in server.received_on(2) if e.get("type") == "session.input_audio.append"]
    assert len(held) >= 5  # what came while switching was held, then sent
    assert recorder.of(ConnectionLost) == []


async def test_an_expired_close_at_a_quiet_moment_is_a_recycle(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(config())
    await server.usage(3.5)
    await server.session_closed("expired", seconds=4.0)
    await recorder.wait_for(Reconnected)
    assert recorder.of(ConnectionLost) == []
    assert session.recycles == 1
    await server.usage(1.0)
    await advance(0.5)
    assert session.usage_seconds == 5.0


async def test_a_failed_recycle_is_reported_as_a_lost_connection(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(
        config(), recycle_after=5.0, max_reconnect_attempts=2, reconnect_backoff=0.5
    )
    server.refuse_connections = True
    await advance(6.0)
    await recorder.wait_ended(within=10)
    lost = recorder.of(ConnectionLost)
    assert [event.reconnecting for event in lost] == [True, False]


def test_recycle_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="recycle_after"):
        GPTLive(api_key="k", recycle_after=0)
