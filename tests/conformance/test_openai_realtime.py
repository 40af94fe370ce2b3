"""openai.Realtime passes the realtime conformance suite over the loopback Realtime server."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models.realtime import RealtimeSession, ResponseUsage
from rejoinder.providers.openai.realtime import OpenAIRealtimeSession, Realtime
from rejoinder.testing.conformance import RealtimeConformance, RealtimeHarness
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer


class OpenAIRealtimeHarness(RealtimeHarness):
    stall_timeout = 3.0
    retries = 2

    def __init__(self, server: OpenAIRealtimeServer, silent: OpenAIRealtimeServer) -> None:
        self.server = server
        self.silent = silent
        """Accepts connections and never sends session.created: for stall_setup."""
        self._url = server.base_url
        self._ids = itertools.count(1)

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> Realtime:
        return Realtime(
            api_key="sk-test",
            base_url=self._url,
            connect_timeout=self.stall_timeout,
            max_retries=self.retries,
            retry_backoff=0.01,
            reconnect_backoff=0.1,
        )

    def attempts(self) -> int:
        servers = (self.server, self.silent)
        return sum(server.refused + len(server.connections) for server in servers)

    def retries_of(self, session: RealtimeSession) -> int:
        assert isinstance(session, OpenAIRealtimeSession)
        return session.connect_retries

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        self.server.refuse(503 if transient else 401, times=times)
        return "503" if transient else "401"

    def stall_setup(self) -> None:
        self._url = self.silent.base_url

    async def cut_stalled_setup(self) -> None:
        await self.silent.wait_connected(len(self.silent.connections) + 1)
        await self.silent.drop()
        # The silent server never sends session.created by itself: send it to the retry.
        retry = await self.silent.wait_connected(len(self.silent.connections) + 1)
        created = {"id": retry.session_id, "object": "realtime.session", "type": "realtime"}
        await self.silent.send({"type": "session.created", "session": created})

    async def reply(self, text: str, *, usage: ResponseUsage | None = None) -> None:
        number = next(self._ids)
        response, item = f"resp_{number}", f"item_{number}"
        await self.server.response_created(response)
        await self.server.audio(response, item, seconds=0.3)
        await self.server.transcript(response, item, text)
        await self.server.audio_done(response, item)
        if usage is None:
            await self.server.response_done(response)
            return
        await self.server.send(
            {
                "type": "response.done",
                "response": {
                    "id": response,
                    "object": "realtime.response",
                    "status": "completed",
                    "status_details": None,
                    "output": [],
                    "usage": {
                        "total_tokens": usage.input_tokens + usage.output_tokens,
                        "input_tokens": usage.input_tokens,
                        "output_tokens": usage.output_tokens,
                    },
                },
            }
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> None:
        number = next(self._ids)
        response = f"resp_{number}"
        await self.server.response_created(response)
        await self.server.function_call(response, f"call_{number}", name, json.dumps(arguments))
        await self.server.response_done(response)

    async def drop_mid_reply(self, text: str) -> None:
        number = next(self._ids)
        await self.server.response_created(f"resp_{number}")
        await self.server.audio(f"resp_{number}", f"item_{number}", seconds=0.2)
        await self.server.drop()

    async def garbage(self) -> None:
        await self.server.send_raw("this is not JSON")


class TestOpenAIRealtime(RealtimeConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[OpenAIRealtimeHarness]:
        async with (
            OpenAIRealtimeServer() as server,
            OpenAIRealtimeServer(session_created=False) as silent,
        ):
            yield OpenAIRealtimeHarness(server, silent)
