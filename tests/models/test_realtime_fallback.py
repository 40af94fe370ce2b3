"""FallbackRealtime over real GPT-Live clients and loopback servers: a model that cannot
start is skipped, probed in the background, and used again by new sessions once it
works; a session already on a backup stays there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import rejoinder as rj
from rejoinder.models.realtime import (
    ConnectionLost,
    RealtimeConfig,
    RealtimeEvent,
    RealtimeSession,
    Reconnected,
)
from rejoinder.providers.openai import GPTLive
from rejoinder.testing import GPTLiveServer, advance

pytestmark = pytest.mark.looptime(noop_cycles=2000)

CONFIG = RealtimeConfig(instructions="You are a phone assistant.")


@pytest.fixture
async def servers() -> AsyncIterator[tuple[GPTLiveServer, GPTLiveServer]]:
    async with GPTLiveServer() as primary, GPTLiveServer() as backup:
        yield primary, backup


def live(server: GPTLiveServer, **options: int) -> GPTLive:
    return GPTLive(api_key="k", base_url=server.base_url, **options)


def started_with(server: GPTLiveServer, connection: int) -> str:
    start = server.received_on(connection)[0]
    assert start["type"] == "session.start"
    return str(start["session"]["instructions"])


def assert_no_probe_task() -> None:
    """The loopback servers keep their own tasks: look for probes by name."""
    probes = [t for t in asyncio.all_tasks() if t.get_name().startswith("rejoinder: probe")]
    assert probes == []


async def test_a_refusing_primary_is_probed_and_new_sessions_go_back_to_it(
    servers: tuple[GPTLiveServer, GPTLiveServer],
) -> None:
    primary, backup = servers
    primary.refuse_connections = True
    first, second = live(primary), live(backup)
    model = rj.FallbackRealtime([first, second], probe_interval=5.0)

    s1 = model.session()
    await s1.start(CONFIG)
    assert s1.active_model is second
    assert started_with(backup, 1) == "You are a phone assistant."
    assert model.probing(first) and not model.available(first)

    await advance(5.5)  # the first probe: still refused
    assert primary.connections == 0
    assert model.probing(first)
    s2 = model.session()
    await s2.start(CONFIG)
    assert s2.active_model is second  # not tried: its probe decides

    primary.refuse_connections = False
    await advance(10.0)  # backed off: the next probe is 10 s after the failed one
    assert primary.connections == 1
    assert started_with(primary, 1) == "probe"
    assert primary.received_types(1) == ["session.start", "session.close"]  # closed at once
    assert model.available(first) and not model.probing(first)

    s3 = model.session()
    await s3.start(CONFIG)
    assert s3.active_model is first  # new sessions start on the first available model
    assert started_with(primary, 2) == "You are a phone assistant."
    # Sessions already on the backup stay there: a swap would be audible.
    assert s1.active_model is second and s2.active_model is second
    assert backup.connections == 2

    for session in (s1, s2, s3):
        await session.aclose()
    await model.aclose()
    assert_no_probe_task()


async def test_a_connection_lost_for_good_moves_on_and_the_session_does_not_swap_back(
    servers: tuple[GPTLiveServer, GPTLiveServer],
) -> None:
    primary, backup = servers
    first, second = live(primary, max_reconnect_attempts=0), live(backup)
    model = rj.FallbackRealtime([first, second], probe_interval=5.0)
    session = model.session()
    await session.start(CONFIG)
    assert session.active_model is first
    seen: list[RealtimeEvent] = []

    async def read(session: RealtimeSession) -> None:
        async for event in session.events():
            seen.append(event)

    reader = asyncio.create_task(read(session))
    await advance(0.1)
    await primary.drop()
    await backup.wait_connected(1)
    await advance(0.1)
    assert session.active_model is second
    assert [type(e) for e in seen if isinstance(e, ConnectionLost | Reconnected)] == [
        ConnectionLost,
        Reconnected,
    ]
    assert model.probing(first)

    await advance(5.0)  # the primary still serves: its probe succeeds
    assert primary.connections == 2 and started_with(primary, 2) == "probe"
    assert model.available(first)
    assert session.active_model is second  # no swap back mid-conversation
    fresh = model.session()
    await fresh.start(CONFIG)
    assert fresh.active_model is first

    await fresh.aclose()
    await session.aclose()
    await reader
    await model.aclose()
    assert_no_probe_task()


async def test_every_model_down_is_one_clear_error_and_both_are_probed(
    servers: tuple[GPTLiveServer, GPTLiveServer],
) -> None:
    primary, backup = servers
    primary.refuse_connections = backup.refuse_connections = True
    first, second = live(primary), live(backup)
    model = rj.FallbackRealtime([first, second], probe_interval=5.0)
    session = model.session()
    with pytest.raises(rj.RealtimeError, match=r"no realtime model could start: .*503") as info:
        await session.start(CONFIG)
    assert info.value.fatal
    assert model.probing(first) and model.probing(second)
    await session.aclose()

    backup.refuse_connections = False
    await advance(5.5)
    assert model.available(second) and not model.available(first)
    again = model.session()
    await again.start(CONFIG)
    assert again.active_model is second
    await again.aclose()
    await model.aclose()
    assert_no_probe_task()


async def test_a_server_gone_for_good_is_probed_until_aclose(
    servers: tuple[GPTLiveServer, GPTLiveServer],
) -> None:
    primary, backup = servers
    first, second = live(primary), live(backup)
    await primary.aclose()  # the port now refuses connections
    model = rj.FallbackRealtime([first, second], retry_after=5.0)
    session = model.session()
    await session.start(CONFIG)
    assert session.active_model is second
    await advance(200.0)  # probes at 5, 15, 35, 75, 115, 155, 195 s: all refused
    assert model.probing(first)
    await session.aclose()
    await model.aclose()
    assert_no_probe_task()
    assert not model.probing(first)


async def test_with_probing_off_a_failed_model_is_retried_by_a_later_start(
    servers: tuple[GPTLiveServer, GPTLiveServer],
) -> None:
    primary, backup = servers
    primary.refuse_connections = True
    first, second = live(primary), live(backup)
    model = rj.FallbackRealtime([first, second], retry_after=10.0, probe=False)
    s1 = model.session()
    await s1.start(CONFIG)
    assert s1.active_model is second and not model.probing(first)
    assert_no_probe_task()
    primary.refuse_connections = False
    # A hair past retry_after: the failure's time carries the retries' random jitter, and
    # time + 10.0 can round a last bit above the loop time 10 s later.
    await advance(10.001)
    assert primary.connections == 0  # nothing ran in the background
    assert model.available(first)  # half-open: the next start tries it
    s2 = model.session()
    await s2.start(CONFIG)
    assert s2.active_model is first
    await s1.aclose()
    await s2.aclose()
    await model.aclose()


async def test_the_realtime_probe_closes_its_session_even_when_start_fails() -> None:
    closed: list[str] = []

    class Refusing(RealtimeSession):
        def __init__(self, name: str) -> None:
            self.name = name

        async def start(self, config: RealtimeConfig) -> None:
            raise rj.RealtimeError(f"{self.name} refused")

        async def events(self) -> AsyncIterator[RealtimeEvent]:
            return
            yield

        def push_audio(self, frame: rj.AudioFrame) -> None: ...
        def submit_tool_output(self, output, *, reply_required):  # type: ignore[no-untyped-def]
            return "silent"

        def add_context(self, text: str) -> None: ...
        def update_instructions(self, instructions: str) -> None: ...
        def update_tools(self, tools) -> None: ...  # type: ignore[no-untyped-def]
        def generate_reply(self, instructions: str | None = None) -> None: ...
        def send_user_text(self, text: str) -> None: ...

        async def aclose(self) -> None:
            closed.append(self.name)

    class Down(rj.RealtimeModel):
        def __init__(self, name: str) -> None:
            self.name = name

        def session(self) -> RealtimeSession:
            return Refusing(self.name)

    a, b = Down("a"), Down("b")
    model = rj.FallbackRealtime([a, b], probe_interval=1.0)
    with pytest.raises(rj.RealtimeError, match=r"a refused; .*b refused"):
        await model.session().start(CONFIG)
    assert closed == ["a", "b"]
    await advance(1.1)
    assert sorted(closed) == ["a", "a", "b", "b"]  # each probe closed what it opened
    await model.aclose()
    assert_no_probe_task()
