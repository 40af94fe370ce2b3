"""Fixtures for the realtime scenario tests: loopback servers and the rigs to close."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rejoinder.testing import GPTLiveServer, OpenAIRealtimeServer

from .realtime_rig import Rig


@pytest.fixture
async def server() -> AsyncIterator[GPTLiveServer]:
    async with GPTLiveServer() as srv:
        yield srv


@pytest.fixture
async def oai() -> AsyncIterator[OpenAIRealtimeServer]:
    async with OpenAIRealtimeServer() as srv:
        yield srv


@pytest.fixture
async def rigs() -> AsyncIterator[list[Rig]]:
    """Rigs a test started; each is closed after the test."""
    made: list[Rig] = []
    yield made
    for rig in made:
        await rig.aclose()
