"""GPTLive passes the realtime conformance suite over the loopback GPT-Live server."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models.realtime import RealtimeSession, ResponseUsage
from rejoinder.providers.openai.gpt_live import GPTLive, GPTLiveSession
from rejoinder.testing.conformance import NotSupported, RealtimeConformance, RealtimeHarness
from rejoinder.testing.gpt_live_server import GPTLiveServer


class GPTLiveHarness(RealtimeHarness):
    stall_timeout = 3.0
    retries = 2

    def __init__(self, server: GPTLiveServer) -> None:
        self.server = server
        self._ids = itertools.count(1)

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> GPTLive:
        return GPTLive(
            api_key="sk-test",
            base_url=self.server.base_url,
            connect_timeout=self.stall_timeout,
            close_timeout=2.0,
            max_retries=self.retries,
            retry_backoff=0.01,
            reconnect_backoff=0.1,
        )

    def attempts(self) -> int:
        return self.server.refused + self.server.connections

    def retries_of(self, session: RealtimeSession) -> int:
        assert isinstance(session, GPTLiveSession)
        return session.connect_retries

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        self.server.refuse(503 if transient else 401, times=times)
        return "503" if transient else "401"

    def stall_setup(self) -> None:
        self.server.answer_start = False

    async def cut_stalled_setup(self) -> None:
        await self.server.wait_connected()
        await self.server.drop()
        self.server.answer_start = True

    async def reply(self, text: str, *, usage: ResponseUsage | None = None) -> None:
        if usage is not None:
            raise NotSupported(
                "GPT-Live reports billed seconds (session.usage.updated), not the tokens of "
                "a response"
            )
        # The voice model's speech: its transcript, then audio and the silence that ends
        # the burst (GPT-Live has no event for the end of the agent's speech).
        await self.server.output_transcript(text)
        await self.server.speech(0.3, then_silence=1.0)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> None:
        number = next(self._ids)
        delegation, response = f"dlg_{number}", f"resp_{number}"
        await self.server.delegation(delegation)
        await self.server.response_created(delegation, response)
        await self.server.function_call(delegation, f"call_{number}", name, arguments)
        await self.server.response_completed(delegation, response)

    async def drop_mid_reply(self, text: str) -> None:
        await self.server.output_transcript(text)
        await self.server.speech(0.2, then_silence=0.0)
        await self.server.drop()

    async def garbage(self) -> None:
        await self.server.send_raw("{not json")


class TestGPTLive(RealtimeConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[GPTLiveHarness]:
        async with GPTLiveServer() as server:
            yield GPTLiveHarness(server)
