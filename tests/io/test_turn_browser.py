"""The page in headless Chromium through a real TURN relay (coturn on 127.0.0.1), and its
fallback to the WebSocket when WebRTC cannot connect.

The server asks for relay-only ICE (``IceConfig(transport_policy="relay")``) with a TURN
REST secret, so the page's peer connection has no path but coturn's relay: with the right
secret the conversation goes through it (coturn counts the packets it relayed both ways);
with credentials coturn refuses the browser gathers no candidate and the server refuses
the offer; with a coturn that will not relay to loopback peers (its default) the
allocation succeeds, the permission to reach us does not, and ICE fails. In the last
two the page must say that WebRTC failed, talk over the WebSocket instead, and be
answered.

Chromium, the microphone's WAVs, the agent and the page are tests/io/_browser.py's; coturn
is tests/io/_turn_server.py's. Skipped without chromium, the webrtc extra or coturn.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rejoinder.io import create_app
from rejoinder.io.app import WEBRTC
from rejoinder.io.static import page_routes

from . import _browser
from ._browser import (
    ANSWER,
    ONE_LOOP,
    QUESTION,
    SHOWED_ANSWER,
    MicWav,
    ServeApp,
    has_route,
    in_order,
    needs_chromium,
    page_state,
    screenshot,
    scripted_entrypoint,
)
from ._turn_server import Coturn, coturn, needs_coturn

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")

from rejoinder.io.webrtc import ICE_PATH, IceConfig, WebRTCOptions

pytestmark = [
    ONE_LOOP,
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),  # the first test may build the SDK (npm ci: ~10 s)
    needs_chromium,
    needs_coturn,
    pytest.mark.usefixtures("page_bundle"),
]

open_page = _browser.open_page
SECRET = "north-wind-and-sun"
QUESTION_MIC = (0.6, QUESTION, 15.0)
FELL_BACK = "() => window.rejoinder.fallback !== null"


async def serve_relayed(serve_app: ServeApp, turn: Coturn, secret: str) -> str:
    """The page and an agent whose clients must reach it through ``turn``'s relay."""
    ice = IceConfig(urls=(turn.url("udp"),), secret=secret, transport_policy="relay")
    options = WebRTCOptions(host_addresses=["127.0.0.1"], ice=ice)
    app = create_app(scripted_entrypoint([[ANSWER]], [QUESTION]), webrtc=options)
    if not has_route(app, "GET", ICE_PATH):  # until create_app mounts it itself
        app.router.add_get(ICE_PATH, app[WEBRTC].handle_ice)
    if not has_route(app, "GET", "/"):
        app.add_routes(page_routes())
    return await serve_app(app)


async def talk(page: Any) -> dict[str, Any]:
    await page.click("#t-webrtc")
    await page.click("#connect")
    await page.wait_for_function(SHOWED_ANSWER, timeout=20000)
    return await page_state(page)


def check_answered(seen: dict[str, Any]) -> None:
    agent = [state for state, _ in seen["agent"]]
    assert in_order(agent, ["listening", "thinking", "speaking", "listening"]), agent
    assert ["msg user", QUESTION] in seen["bubbles"], seen["bubbles"]
    assert ["msg agent", ANSWER] in seen["bubbles"], seen["bubbles"]
    assert not seen["errors"]


async def test_the_page_talks_through_a_turn_relay_only(
    serve_app: ServeApp, open_page: Any, mic_wav: MicWav, tmp_path: Path
) -> None:
    async with coturn(tmp_path, secret=SECRET) as turn:
        url = await serve_relayed(serve_app, turn, SECRET)
        page = await open_page(url, mic_wav(*QUESTION_MIC))
        seen = await talk(page)
        await screenshot(page, tmp_path, "turn-relay")
        check_answered(seen)
        assert await page.evaluate("window.rejoinder.fallback") is None
        assert await page.evaluate("window.rejoinder.transport") == "webrtc"
        assert seen["audio"]["rate"] == 48000 and seen["audio"]["energy"] > 0
        await page.click("#connect")  # hang up: coturn closes the allocations and counts
        # seconds of the browser's microphone and of the answer, 50 packets a second each
        relayed = await turn.until_relayed(50, 10)
        [username] = [name for name, (got, _) in relayed.items() if got > 50]
        expires, user = username.split(":")
        assert user.startswith("client_")  # minted by GET /api/ice, for an hour
        assert abs(int(expires) - (time.time() + 3600)) < 60
        assert not page.errors


@pytest.mark.parametrize("why", ["credentials coturn refuses", "a relay that cannot reach us"])
async def test_when_webrtc_cannot_connect_the_page_says_so_and_talks_over_websocket(
    serve_app: ServeApp, open_page: Any, mic_wav: MicWav, tmp_path: Path, why: str
) -> None:
    refuses = why == "credentials coturn refuses"
    async with coturn(tmp_path, secret=SECRET, loopback_peers=refuses) as turn:
        url = await serve_relayed(serve_app, turn, "a guess" if refuses else SECRET)
        page = await open_page(url, mic_wav(*QUESTION_MIC))
        started = time.monotonic()
        await page.click("#t-webrtc")
        await page.click("#connect")
        await page.wait_for_function(FELL_BACK, timeout=15000)
        fell_back_after = time.monotonic() - started
        await page.wait_for_function(SHOWED_ANSWER, timeout=20000)
        seen = await page_state(page)
        await screenshot(page, tmp_path, "fallback-" + why.split()[0])
        fallback = await page.evaluate("window.rejoinder.fallback")
        if refuses:
            # no relay candidate, no offer the server can answer; coturn said why
            assert fallback["code"] == "offer_refused", fallback
            assert "no ICE candidate" in fallback["reason"]
            await turn.wait_for(r"user <\d+:client_\w+>: .* error 401", 2)
            assert fell_back_after < 6
        else:
            # relayed allocations, but coturn refuses the permission to send to 127.0.0.1
            # (403): every candidate pair fails, and the browser says so at once (a path
            # that stays silent instead is cut by the page's 8 s bound: the SDK's tests)
            assert fallback["code"] == "connect_failed", fallback
            assert "the peer connection failed" in fallback["reason"]
            await turn.wait_for(r"error 403", 2)
            assert fell_back_after < 6
        check_answered(seen)
        assert fallback["to"] == "websocket"
        assert await page.evaluate("window.rejoinder.transport") == "websocket"
        notice = [text for cls, text in await _sys_bubbles(page) if "notice" in cls]
        assert len(notice) == 1 and notice[0].startswith("WebRTC could not connect ("), notice
        assert notice[0].endswith("): talking over WebSocket instead")
        assert await page.text_content("#s-transport") == "WebSocket (WebRTC failed)"
        assert await page.get_attribute("#t-websocket", "aria-pressed") == "true"
        assert seen["audio"]["rate"] == 22050  # eSpeak NG's voice, as the WebSocket sends it
        assert seen["audio"]["played"] > 0.5 * 22050
        assert not page.errors


async def _sys_bubbles(page: Any) -> list[tuple[str, str]]:
    found: list[list[str]] = await page.evaluate(
        "() => [...document.querySelectorAll('.sys')].map((el) => [el.className, el.textContent])"
    )
    return [(cls, text) for cls, text in found]
