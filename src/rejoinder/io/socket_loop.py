"""The aiohttp side every WebSocket transport shares: pump frames into a framework-free
peer, its ``Outbox`` out, and bound every wait.

Both the client protocol (``websocket.py``) and the phone media streams
(``telephony/routes.py``) run one ``serve_socket`` per connection; each gives it its
peer's entry points and what to do when the client never starts or leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType, web

from .connection import Connection
from .outbox import Outbox, bounded, write_outbox

__all__ = ["serve_socket"]

logger = logging.getLogger("rejoinder.io")


async def serve_socket(
    ws: web.WebSocketResponse,
    outbox: Outbox,
    *,
    receive_text: Callable[[str], Connection | None],
    receive_bytes: Callable[[bytes], None],
    run_agent: Callable[[Connection], Awaitable[None]],
    no_start: Callable[[], None],
    left: Callable[[], None],
    start_timeout: float,
    close_timeout: float,
    name: str,
) -> None:
    """Read ``ws`` until it closes: text and binary frames go to the peer; the
    ``Connection`` a text frame returns (the client's start) gets ``run_agent``. Without
    one within ``start_timeout`` seconds, ``no_start()``. When the socket is done,
    ``left()``, then the agent gets ``close_timeout`` seconds to finish and the writer
    five, and the socket is closed."""
    writer = asyncio.create_task(write_outbox(ws, outbox), name=f"rejoinder-{name}-writer")
    agent: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    start_deadline = loop.call_later(start_timeout, no_start)

    async def run(conn: Connection) -> None:
        await run_agent(conn)

    try:
        # The writer's close (after a refusal, or once the agent is done) wakes this
        # loop with CLOSING; aiohttp itself closes with 1009 on an oversize frame.
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                conn = receive_text(msg.data)
                if conn is not None and agent is None:
                    start_deadline.cancel()
                    agent = asyncio.create_task(run(conn), name=f"rejoinder-{name}")
            elif msg.type == WSMsgType.BINARY:
                receive_bytes(msg.data)
            elif msg.type == WSMsgType.ERROR:
                logger.info("%s socket: %r", name, ws.exception())
                break
    finally:
        start_deadline.cancel()
        left()
        if agent is not None:
            await bounded(agent, close_timeout, "the entry point")
        await bounded(writer, 5.0, "the socket writer")
        if not ws.closed:
            with contextlib.suppress(Exception):
                await ws.close()
