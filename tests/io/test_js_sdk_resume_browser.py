"""The JavaScript SDK (clients/js) in headless Chromium, when its connection drops: a
dropped WebSocket reconnected and the conversation going on, and a drop in the middle of a
reply over each transport, resumed (tests/io/_browser.py: the page, Chromium, the builds).

"Resuming a session" in docs/protocol.md is what the server promises: the same session, no
close, the reply cut where the client's last ``played`` report left it, the agent
``thinking`` (never ``listening``) while it owes the rest, and the unheard rest said on
resume. The network is cut under both sides, so that neither says goodbye: a TCP relay
reset (``_Proxy``) for the WebSocket, and for WebRTC a UDP relay (``_UdpRelay``) that drops
every datagram, both ways, the page's first offer and the server's answer rewritten so that
their ICE candidates point at it.

Skipped, saying why, without Debian's ``chromium``, without Playwright, or without npm
when the bundle must be built; the WebRTC ones without the webrtc extra.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from . import _browser
from ._browser import (
    ONE_LOOP,
    SDK_ANSWERED,
    in_order,
    logged,
    needs_chromium,
    scripted_entrypoint,
    send_text,
)

pytestmark = [
    ONE_LOOP,
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),  # the first test may build the SDK (npm ci: ~10 s)
    needs_chromium,
]

# which serve and open_page these tests use (the others: tests/io/conftest.py)
serve = _browser.serve_sdk_page
open_page = _browser.open_sdk_page

SILENCE = (15.0,)
TURN_S = 15_000  # ms: each conversation must be over well within this


class _Proxy:
    """A TCP relay to the app that the test can cut, as a network drop would."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_dropped_websocket_is_reconnected(serve: Any, open_page: Any, mic_wav: Any) -> None:
    """The connection cut under the client: it reconnects (with the resume token when the
    server gave one), and the conversation goes on over the new connection."""
    url, _ = await serve(scripted_entrypoint([["Hello there."], ["Welcome back."]], []))
    proxy = _Proxy(int(url.rsplit(":", 1)[1].strip("/")))
    try:
        proxied = f"http://127.0.0.1:{await proxy.start()}/"
        page = await open_page(proxied, mic_wav(*SILENCE))
        first = await page.evaluate("(o) => window.run(o)", {"transport": "websocket"})
        await send_text(page, "Hello")
        await page.wait_for_function(SDK_ANSWERED, arg="Hello there.", timeout=TURN_S)
        proxy.cut()
        await page.wait_for_function(
            "() => window.log.filter((e) => e.name === 'ready').length === 2", timeout=5000
        )
        reconnecting = await logged(page, "reconnecting")
        assert reconnecting[0]["error"]["code"] == "connection_lost", reconnecting
        second = (await logged(page, "ready"))[1]
        restarted = [e["error"]["code"] for e in await logged(page, "sessionRestarted")]
        if reconnecting[0]["resuming"]:  # the server gave a resume token: it resumes
            assert second["resumed"] is True and restarted == [], (second, restarted)
            assert second["sessionId"] == first["sessionId"]
        else:  # it keeps no session to resume: a new one, and the client says why
            assert second["resumed"] is False and restarted == ["resume_unavailable"]
        await page.wait_for_function("() => window.client.state === 'connected'")
        await send_text(page, "I am back")
        await page.wait_for_function(
            "() => window.log.some((e) => e.name === 'transcript' && e.role === 'agent' && e.final"
            " && ['Welcome back.', 'Hello there.'].includes(e.text) && e.id > 1)",
            timeout=TURN_S,
        )
        assert await logged(page, "close") == []
        assert page.errors == []
    finally:
        await proxy.close()


CUT_ANSWER = "It is three o'clock in the afternoon."


class _UdpRelay:
    """The network between the browser and the server's WebRTC peer, as two UDP sockets:
    what the browser sends to ``browser_side`` (from the first of its sockets heard from)
    goes out of ``server_side`` to the server's candidate, and the server's answers come
    back the same way. ``cut()`` drops every datagram from then on, both ways: the network
    vanished (no close, no goodbye)."""

    def __init__(self) -> None:
        self.server: tuple[str, int] | None = None
        self.browser: tuple[str, int] | None = None
        self.is_cut = False
        self.sides: list[asyncio.DatagramTransport] = []

    async def start(self) -> tuple[int, int]:
        """Ports of the browser's side and of the server's side."""
        loop = asyncio.get_running_loop()
        relay = self

        class FromBrowser(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                # One way through, for the first of the browser's sockets heard from:
                # the browser checks from each of its sockets (loopback, the host's own
                # address), and answers sent back to whichever spoke last would switch
                # its candidate pair under it.
                relay.browser = relay.browser or addr
                if addr != relay.browser:
                    return
                if not relay.is_cut and relay.server is not None:
                    relay.sides[1].sendto(data, relay.server)

        class FromServer(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                if not relay.is_cut and relay.browser is not None:
                    relay.sides[0].sendto(data, relay.browser)

        for protocol in (FromBrowser, FromServer):
            transport, _ = await loop.create_datagram_endpoint(
                protocol, local_addr=("127.0.0.1", 0)
            )
            self.sides.append(transport)
        ports = [side.get_extra_info("sockname")[1] for side in self.sides]
        return ports[0], ports[1]

    def cut(self) -> None:
        self.is_cut = True

    def close(self) -> None:
        for side in self.sides:
            side.close()


# a=candidate:<foundation> <component> <transport> <priority> <address> <port> typ ...
CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ udp \d+ (\S+) (\d+) typ ", re.M | re.I)


def _through(sdp: str, port: int) -> tuple[str, tuple[str, int] | None]:
    """``sdp`` with its ICE candidates replaced by one at 127.0.0.1:``port``, and the
    first UDP candidate it had (address, port). Both sides' candidates are replaced, so
    that ICE finds no path around the relay."""
    found = CANDIDATE.search(sdp)
    first = (found[1], int(found[2])) if found else None
    lines = [line for line in sdp.split("\r\n") if not line.startswith("a=candidate:")]
    out: list[str] = []
    for line in lines:
        out.append(line)
        if line.startswith("m="):
            out.append(f"a=candidate:1 1 udp 2122260223 127.0.0.1 {port} typ host")
    return "\r\n".join(out), first


async def _relay_first_offer(page: Any, relays: list[_UdpRelay]) -> None:
    """The page's first WebRTC offer (and its answer) is rewritten so that its media and
    data channel go through a ``_UdpRelay``; later offers (the resume) go direct."""

    async def handle(route: Any) -> None:
        if relays:
            await route.continue_()
            return
        relay = _UdpRelay()
        relays.append(relay)
        browser_side, server_side = await relay.start()
        offer = json.loads(route.request.post_data)
        offer["sdp"], _ = _through(offer["sdp"], server_side)
        response = await route.fetch(post_data=json.dumps(offer))
        answer = await response.json()
        answer["sdp"], relay.server = _through(answer["sdp"], browser_side)
        await route.fulfill(response=response, json=answer)

    await page.route("**/api/offer*", handle)


# Resumed, and the agent back to listening after it (the rest said, or not).
AFTER_RESUME = """() => {
  const ready = window.log.filter((e) => e.name === "ready")[1];
  return ready !== undefined && window.log.some((e) => e.t >= ready.t
    && e.name === "agentState" && e.state === "listening");
}"""


# What the client went through, to say when a wait times out.
SEEN = """() => window.log.filter((e) => !["timeline", "metrics", "played"].includes(e.name))
  .map((e) => `${Math.round(e.t)} ${e.name} ${e.state ?? e.text ?? e.code ?? e.error?.code ?? ""}`)
  .concat(`played: ${window.log.filter((e) => e.name === "played").at(-1)?.samples}`)"""


async def _until(page: Any, condition: str, within_ms: int, what: str) -> None:
    """Wait for ``condition`` on the page; a timeout says what the client went through
    (still a timeout: an xfail that counts only assertions does not hide it)."""
    try:
        await page.wait_for_function(condition, timeout=within_ms)
    except _browser.playwright_api.TimeoutError as exc:
        seen = await page.evaluate(SEEN)
        raise TimeoutError(f"{what} within {within_ms} ms; the client saw: {seen}") from exc


async def _drop_mid_reply(page: Any, transport: str, cut: Callable[[], None], **run: Any) -> float:
    """Connect (``run``: more of ``window.run``'s options), ask for ``CUT_ANSWER`` and
    ``cut`` the network once its first words were heard; then wait until the client
    resumed and the agent is listening again. When the network was cut
    (``performance.now()`` on the page)."""
    await page.evaluate("(o) => window.run(o)", {"transport": transport, **run})
    await send_text(page, "Tell me about the afternoon.")
    # speaking, and its first words heard (the interim transcript follows playback)
    await _until(
        page,
        "() => window.client.agentState === 'speaking' && window.log.some((e) =>"
        " e.name === 'transcript' && e.role === 'agent' && !e.final && e.text.includes(' '))",
        TURN_S,
        "no first words heard",
    )
    cut_at: float = await page.evaluate("() => performance.now()")
    cut()
    # WebRTC: Chrome finds the peer disconnected ~6 s after its last packet, and the SDK
    # waits 4 s more before it takes that for a drop
    await _until(page, AFTER_RESUME, 25000, "not resumed and listening")
    return cut_at


async def _check_resumed_and_rest_said(page: Any, cut_at: float) -> None:
    """The same session resumed, nothing closed, the agent never ``listening`` from the
    cut until the rest of the reply was said, and that rest heard on the new connection."""
    log = await page.evaluate("() => window.log")
    first, second = [e for e in log if e["name"] == "ready"]
    assert second["resumed"] is True and second["sessionId"] == first["sessionId"], second
    names = [e["name"] for e in log]
    assert "close" not in names and "sessionRestarted" not in names, names
    reconnecting = [e for e in log if e["name"] == "reconnecting"]
    assert [e["error"]["code"] for e in reconnecting] == ["connection_lost"], reconnecting
    assert reconnecting[0]["resuming"] is True
    # After the cut: thinking (owed, nobody listening), then speaking the rest; the first
    # listening comes after the rest's final transcript.
    after = [e for e in log if e["t"] > cut_at and e["name"] in ("agentState", "transcript")]
    states = [e["state"] for e in after if e["name"] == "agentState"]
    assert states[-1] == "listening" and "listening" not in states[:-1], states
    assert in_order(states, ["thinking", "speaking", "listening"]), states
    finals = [e for e in log if e["name"] == "transcript" and e["role"] == "agent" and e["final"]]
    assert len(finals) == 2, finals
    heard, rest = finals
    assert heard["interrupted"] is True and rest["interrupted"] is False, finals
    assert heard["t"] > cut_at and rest["t"] > second["t"]
    assert heard["text"].split() + rest["text"].split() == CUT_ANSWER.split(), finals
    assert heard["text"].split() != []  # its first words had been heard before the cut
    listening_at = next(e["t"] for e in after if e.get("state") == "listening")
    assert rest["t"] <= listening_at
    # the rest was played by the new connection, counted from its own zero
    played = [e["samples"] for e in log if e["name"] == "played" and e["t"] > second["t"]]
    assert played and played[-1] > 0, played
    assert await logged(page, "error") == []
    assert page.errors == []


async def test_a_websocket_dropped_mid_reply_resumes_and_says_the_unheard_rest(
    serve: Any, open_page: Any, mic_wav: Any
) -> None:
    """The TCP connection is cut (reset) while the agent speaks: the server sees the drop
    at once and cuts the reply where the client's last ``played`` report left it; the
    client reconnects with its token, and hears the rest."""
    url, _ = await serve(scripted_entrypoint([[CUT_ANSWER]], []))
    proxy = _Proxy(int(url.rsplit(":", 1)[1].strip("/")))
    try:
        page = await open_page(f"http://127.0.0.1:{await proxy.start()}/", mic_wav(*SILENCE))
        cut_at = await _drop_mid_reply(page, "websocket", proxy.cut)
        await _check_resumed_and_rest_said(page, cut_at)
    finally:
        await proxy.close()


def _webrtc_options(**options: Any) -> Any:
    webrtc = pytest.importorskip("rejoinder.io.webrtc")
    pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
    # the server's candidate on 127.0.0.1, where the relay is
    return webrtc.WebRTCOptions(host_addresses=["127.0.0.1"], **options)


async def _webrtc_drop_mid_reply(
    serve: Any, open_page: Any, mic_wav: Any, run: dict[str, Any], **options: Any
) -> None:
    """The drop mid-reply over WebRTC, through a relay; ``run``: the client's options,
    ``options``: the server's ``WebRTCOptions``."""
    url, _ = await serve(scripted_entrypoint([[CUT_ANSWER]], []), webrtc=_webrtc_options(**options))
    relays: list[_UdpRelay] = []
    try:
        page = await open_page(url, mic_wav(*SILENCE))
        await _relay_first_offer(page, relays)
        cut_at = await _drop_mid_reply(page, "webrtc", lambda: relays[0].cut(), **run)
        await _check_resumed_and_rest_said(page, cut_at)
    finally:
        for relay in relays:
            relay.close()


async def test_a_webrtc_peer_dropped_mid_reply_resumes_and_says_the_unheard_rest(
    serve: Any, open_page: Any, mic_wav: Any
) -> None:
    """The network between the browser and the server's peer vanishes while the agent
    speaks (a relay drops every packet, both ways: no goodbye on the data channel, no
    DTLS or SCTP close). The server sees no microphone packet for 1 s and detaches the
    session; Chrome finds the peer disconnected (~6 s), the SDK's WebRTC link takes that
    for a drop 4 s later, and sends a new offer with the token, on which the rest of the
    reply is said."""
    # No pings: the drop is found by the WebRTC link itself, not by the heartbeat (whose
    # 10 s timeout would race with it). 1 s: the server sees the drop before it would
    # estimate the reply as played out (see the next test).
    no_pings = {"pingIntervalMs": 0}
    await _webrtc_drop_mid_reply(serve, open_page, mic_wav, no_pings, media_idle_timeout=1.0)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,  # what the bug fails; a timeout or a setup error is no xfail
    reason="server: a drop seen later than STALL_GRACE (1.5 s) past the reply's end (WebRTC:"
    " media_idle_timeout, 3 s by default) finds the reply counted as heard in full by"
    " ReportedPlayback's stall estimate; the resume says nothing again and shows listening",
)
async def test_a_webrtc_drop_seen_late_by_the_server_still_says_the_unheard_rest(
    serve: Any, open_page: Any, mic_wav: Any
) -> None:
    """The same drop with the server's default ``media_idle_timeout`` (3 s): the
    client's reports stopped at the cut, and the reply's rest is shorter than the 1.5 s
    that are left: 1.5 s after its audio would have ended the server estimates it played
    out, records the whole reply as heard and goes back to listening; at 3 s it sees the
    drop, with nothing left to cut. On resume the unheard rest is not said, no final
    transcript ends the reply the page was showing, and the snapshot says ``listening``.
    Everything as shipped: the server's options, and the client's (it finds the drop by
    ICE or by its pings, ~10 s after the cut). A known limit (docs/protocol.md, "Goodbye
    or drop"): the fix needs the estimate to tell a client that does not report from
    one that is gone."""
    await _webrtc_drop_mid_reply(serve, open_page, mic_wav, {})
