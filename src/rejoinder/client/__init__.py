"""A Python client of the rejoinder client protocol (``docs/protocol.md``), on aiohttp.

For server-to-server use (a bot that calls an agent, a load generator, a relay) and for
tests. It speaks protocol v1 over ``GET /ws`` as a browser page does: it streams the
microphone, plays the agent's audio on a simulated speaker in real time and reports
what was played (playback truth), answers ``clear``, and keeps what the server says::

    import rejoinder.client

    async with rejoinder.client.connect("ws://127.0.0.1:8000/ws", sample_rate=16000) as conn:
        print(conn.ready.sample_rate)               # the agent audio's rate
        await conn.send_text("What's the weather in Oslo?")
        await conn.wait_for_state("speaking", within=10)
        await conn.wait_for_state("listening", within=30)
        print(conn.transcripts[-1].text)            # what the listener heard
        await conn.send_audio(pcm16)                # speak: sent in real time
        conn.mute(True)
        conn.interrupt()
        async for event in conn.events():           # typed rejoinder.io.protocol messages
            ...

A close by the server raises ``ConnectionClosed`` (its ``code``, and the ``error``
message it sent) from whatever waits on the connection; ``connect`` raises it when the
server refuses the session (e.g. 4003 for another protocol version).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping
from types import TracebackType
from typing import Any

import aiohttp
from pydantic import ValidationError

from ..io.protocol import PROTOCOL_VERSION, Start
from ._connection import ClientConnection, Received
from ._errors import ClientError, ConnectionClosed, ReadyTimeout, UpgradeRefused
from ._speaker import PlayedReport, Speaker
from ._view import AgentState, Turn, UserState

__all__ = [
    "AgentState",
    "ClientConnection",
    "ClientError",
    "Connecting",
    "ConnectionClosed",
    "PlayedReport",
    "ReadyTimeout",
    "Received",
    "Speaker",
    "Turn",
    "UpgradeRefused",
    "UserState",
    "connect",
]

MAX_FRAME_BYTES = 4 * 1024 * 1024
"""Largest frame accepted from the server (its own limit is 256 KiB each way)."""


def connect(
    url: str,
    *,
    sample_rate: int,
    timeline: bool = False,
    protocol: int | None = PROTOCOL_VERSION,
    resume: str | None = None,
    jitter: float = 0.1,
    keep_audio: bool = False,
    pace_audio: bool = True,
    ready_timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
    http: aiohttp.ClientSession | None = None,
) -> Connecting:
    """Connect to a rejoinder server's WebSocket (``ws://HOST:PORT/ws``, query parameters
    go to the agent's entry point) and start a session: ``async with connect(...) as
    conn`` (closed on exit) or ``conn = await connect(...)`` (then ``await conn.close()``).

    Args:
        url: The server's ``/ws`` URL.
        sample_rate: Hz of the microphone audio this client will send (8000–96000).
        timeline: Ask for ``timeline`` messages (the floor's entries).
        protocol: The protocol version to ask for; ``None`` takes the server's. A server
            that speaks another refuses: ``ConnectionClosed`` with code 4003.
        resume: A ``ready.resume_token`` of an earlier connection, to continue its session.
        jitter: Seconds the speaker buffers agent audio before it plays.
        keep_audio: Keep the agent audio played (``conn.speaker.heard()``).
        pace_audio: The client is the microphone's clock (see ``send_audio``).
        ready_timeout: Seconds to wait for ``ready`` (else ``ReadyTimeout``).
        headers: Extra HTTP headers for the upgrade request (authentication...).
        http: An aiohttp session to connect with (default: one of its own, closed with
            the connection).

    Raises (when awaited): ``UpgradeRefused`` (HTTP 503: the server is full or
    draining), ``ConnectionClosed`` (the server refused the session), ``ReadyTimeout``,
    ``aiohttp.ClientConnectionError`` (nothing listens there), ``ValueError`` (bad
    arguments, raised at once).
    """
    try:
        start = Start(sample_rate=sample_rate, timeline=timeline, protocol=protocol, resume=resume)
    except ValidationError as exc:
        problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"invalid connect arguments: {problems}") from None
    if not (math.isfinite(ready_timeout) and ready_timeout > 0):
        raise ValueError(f"ready_timeout is a number of seconds > 0, not {ready_timeout!r}")
    speaker = Speaker(jitter=jitter, keep_audio=keep_audio)
    return Connecting(url, start, speaker, pace_audio, ready_timeout, headers, http)


class Connecting:
    """What ``connect`` returns: await it, or use it with ``async with``."""

    def __init__(
        self,
        url: str,
        start: Start,
        speaker: Speaker,
        pace_audio: bool,
        ready_timeout: float,
        headers: Mapping[str, str] | None,
        http: aiohttp.ClientSession | None,
    ) -> None:
        self._url = url
        self._start = start
        self._speaker = speaker
        self._pace_audio = pace_audio
        self._ready_timeout = ready_timeout
        self._headers = dict(headers or {})
        self._http = http
        self._conn: ClientConnection | None = None

    def __await__(self) -> Generator[Any, None, ClientConnection]:
        return self._open().__await__()

    async def __aenter__(self) -> ClientConnection:
        self._conn = await self._open()
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def _open(self) -> ClientConnection:
        owned = aiohttp.ClientSession() if self._http is None else None
        http = self._http or owned
        assert http is not None
        try:
            try:
                ws = await http.ws_connect(
                    self._url,
                    headers=self._headers,
                    max_msg_size=MAX_FRAME_BYTES,
                    autoping=True,  # the server pings every 5 s; aiohttp answers
                )
            except aiohttp.WSServerHandshakeError as exc:
                raise UpgradeRefused(exc.status, exc.message) from None
        except BaseException:
            if owned is not None:
                await owned.close()
            raise
        conn = ClientConnection(
            ws,
            sample_rate=self._start.sample_rate,
            speaker=self._speaker,
            pace_audio=self._pace_audio,
            owned_http=owned,
        )
        await conn._open(self._start, self._ready_timeout)  # closes itself when it fails
        return conn
