"""google.Live passes the realtime conformance suite over the loopback Gemini Live server."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models.realtime import RealtimeSession, ResponseUsage
from rejoinder.providers import google
from rejoinder.providers.google._live_session import GeminiLiveSession
from rejoinder.testing.conformance import RealtimeConformance, RealtimeHarness
from rejoinder.testing.gemini_live_server import GeminiLiveServer


class GeminiLiveHarness(RealtimeHarness):
    stall_timeout = 3.0
    retries = 2

    def __init__(self, server: GeminiLiveServer) -> None:
        self.server = server
        self._ids = itertools.count(1)

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> google.Live:
        return google.Live(
            api_key="gemini-test-key",
            base_url=self.server.base_url,
            connect_timeout=self.stall_timeout,
            max_retries=self.retries,
            retry_backoff=0.01,
            reconnect_backoff=0.1,
        )

    def attempts(self) -> int:
        return self.server.refused + len(self.server.connections)

    def retries_of(self, session: RealtimeSession) -> int:
        assert isinstance(session, GeminiLiveSession)
        return session.connect_retries

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        self.server.refuse(503 if transient else 401, times=times)
        return "503" if transient else "401"

    def stall_setup(self) -> None:
        self.server.answer_setup = False

    async def cut_stalled_setup(self) -> None:
        await self.server.wait_connected()
        await self.server.drop()
        self.server.answer_setup = True

    async def reply(self, text: str, *, usage: ResponseUsage | None = None) -> None:
        await self.server.output_transcript(text)
        await self.server.audio(0.3)
        await self.server.generation_complete()
        if usage is None:
            await self.server.turn_complete()
            return
        counts = {"promptTokenCount": usage.input_tokens, "responseTokenCount": usage.output_tokens}
        await self.server.turn_complete(usage=counts)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> None:
        await self.server.tool_call((f"call_{next(self._ids)}", name, arguments))

    async def drop_mid_reply(self, text: str) -> None:
        await self.server.output_transcript(text)
        await self.server.audio(0.2)
        await self.server.drop()

    async def garbage(self) -> None:
        await self.server.send_binary(b"{not json")  # the service's frames are binary JSON


class TestGoogleLive(RealtimeConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[GeminiLiveHarness]:
        async with GeminiLiveServer() as server:
            yield GeminiLiveHarness(server)
