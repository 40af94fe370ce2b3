"""The suites' own machinery: the leak checks see a task or a connection left behind, and
a scenario a harness cannot stage is a skip that names the harness and the reason."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from rejoinder.testing.conformance import NotSupported
from rejoinder.testing.conformance._common import Snapshot, open_connections, stage, within

pytestmark = pytest.mark.looptime(noop_cycles=2000)


class Quiet(asyncio.Protocol):
    """A server side that starts no task: only the socket stays open."""


async def listening() -> tuple[asyncio.Server, int]:
    server = await asyncio.get_running_loop().create_server(Quiet, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def test_open_connections_counts_the_clients_sockets_to_a_port() -> None:
    server, port = await listening()
    try:
        assert open_connections(port) == 0
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert open_connections(port) == 1
        writer.close()
        await writer.wait_closed()
        assert open_connections(port) == 0
    finally:
        server.close()
        await server.wait_closed()


async def test_a_connection_left_open_fails_the_check() -> None:
    server, port = await listening()
    snapshot = Snapshot(port)
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        with pytest.raises(
            AssertionError, match=rf"left 1 connection\(s\) to the server \(port {port}\)"
        ):
            await snapshot.assert_released("the client")
    finally:
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
    await snapshot.assert_released("the client, closed")


async def test_a_task_left_running_fails_the_check_and_is_named() -> None:
    snapshot = Snapshot()
    left = asyncio.create_task(asyncio.sleep(3600), name="forgotten")
    try:
        with pytest.raises(AssertionError, match=r"the model left tasks running: forgotten"):
            await snapshot.assert_released("the model")
    finally:
        left.cancel()
    await snapshot.assert_released("the model, once its task is cancelled")


async def test_a_bound_that_passes_fails_instead_of_hanging() -> None:
    with pytest.raises(AssertionError, match="a stall did not finish within 5 s"):
        await within(5.0, asyncio.sleep(3600), "a stall")


class HalfHarness:
    def garbage(self, text: str) -> None:
        raise NotSupported("the server cannot send malformed frames")


def test_a_scenario_the_harness_cannot_stage_is_a_skip_with_its_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"HalfHarness\.garbage: the server cannot"):
        stage(HalfHarness(), "garbage", "Hello")


def test_importing_the_package_needs_no_pytest_until_a_suite_is_used() -> None:
    code = (
        "import sys\n"
        "import rejoinder.testing.conformance as conformance\n"
        "assert 'pytest' not in sys.modules, 'the package imported pytest'\n"
        "conformance.NotSupported\n"
        "assert 'pytest' not in sys.modules, 'NotSupported imported pytest'\n"
        "conformance.LLMConformance\n"
        "assert 'pytest' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
