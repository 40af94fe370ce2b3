"""openai.Realtime and GPTLive try their first connection again when it is cut (no closing
handshake) during the set-up, as they do a cut before the upgrade: "connection cut" is a
transient failure in their retry policy. Over real sockets, on virtual time."""

from __future__ import annotations

import asyncio

import pytest

from rejoinder.models.realtime import RealtimeConfig, RealtimeError
from rejoinder.providers.openai.gpt_live import GPTLive
from rejoinder.providers.openai.realtime import Realtime
from rejoinder.testing.gpt_live_server import GPTLiveServer
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer

pytestmark = pytest.mark.looptime(noop_cycles=2000)


async def test_realtime_retries_a_connection_cut_before_session_created() -> None:
    async with OpenAIRealtimeServer(session_created=False) as server:
        session = Realtime(api_key="k", base_url=server.base_url, retry_backoff=0.01).session()
        starting = asyncio.create_task(session.start(RealtimeConfig("x")))
        try:
            await server.wait_connected(1)
            await server.drop()
            second = await server.wait_connected(2)
            await server.send({"type": "session.created", "session": {"id": second.session_id}})
            await starting
            assert session.connect_retries == 1
            assert [c.closed for c in server.connections] == [True, False]
        finally:
            await session.aclose()


async def test_realtime_gives_up_on_cut_set_ups_with_a_non_fatal_error() -> None:
    async with OpenAIRealtimeServer(session_created=False) as server:
        model = Realtime(api_key="k", base_url=server.base_url, max_retries=1, retry_backoff=0.01)
        session = model.session()
        starting = asyncio.create_task(session.start(RealtimeConfig("x")))
        for count in (1, 2):
            await server.wait_connected(count)
            await server.drop()
        with pytest.raises(RealtimeError, match=r"lost before session\.created") as caught:
            await starting
        assert not caught.value.fatal
        assert session.connect_retries == 1


async def test_gpt_live_retries_a_connection_cut_before_session_started() -> None:
    async with GPTLiveServer(answer_start=False) as server:
        session = GPTLive(api_key="k", base_url=server.base_url, retry_backoff=0.01).session()
        starting = asyncio.create_task(session.start(RealtimeConfig("x")))
        try:
            await server.wait_connected(1)
            await server.drop()
            server.answer_start = True
            await starting
            assert session.connect_retries == 1
            assert session.session_id == "session_2"
        finally:
            await session.aclose()
