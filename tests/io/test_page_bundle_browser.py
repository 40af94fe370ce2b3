"""The page's files: they ship inside the package, the SDK bundle beside them is served
as JavaScript, and without it (never built) the server says so in its log and the page
says so on screen, instead of a blank page (the latter in headless Chromium:
tests/io/_browser.py).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rejoinder.io import static
from rejoinder.io.static import BUNDLE_MISSING, page_routes

from . import _browser
from ._browser import ONE_LOOP, STATIC, MicWav, needs_chromium, screenshot, scripted_entrypoint

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(60)]

# which serve and open_page these tests use (the others: tests/io/conftest.py)
serve = _browser.serve_page
open_page = _browser.open_page

SILENCE = (15.0,)

PAGE_ROUTES = {
    "/", "/page.css", "/page.js", "/strips.js", "/metrics.js", "/favicon.svg", "/favicon.ico",
    "/rejoinder-client.js",
}  # fmt: skip


def test_page_files_are_package_data(page_bundle: Path) -> None:
    """The page and its scripts ship inside the package, the SDK bundle beside them once
    built; nothing is loaded from the network."""
    assert {route.path for route in page_routes()} == PAGE_ROUTES
    for name in ("index.html", "page.css", "page.js", "strips.js", "metrics.js", "favicon.svg"):
        # (an XML namespace is a name, not a download)
        text = (STATIC / name).read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "http://" not in text and "https://" not in text  # nothing from the network
    bundle = page_bundle.read_text()
    assert "http://" not in bundle and "https://" not in bundle
    assert "audio-worklet.js" not in (STATIC / "page.js").read_text()  # the SDK embeds its own


async def _get(app: web.Application, path: str) -> tuple[int, str, str]:
    import aiohttp

    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.get(server.make_url(path)) as response:
            return response.status, response.content_type, await response.text()
    finally:
        await server.close()


async def test_the_bundle_is_served_as_javascript_or_said_missing(
    page_bundle: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = web.Application()
    app.add_routes(page_routes())
    status, content_type, body = await _get(app, "/rejoinder-client.js")
    assert (status, content_type) == (200, "text/javascript")
    assert body == await asyncio.to_thread(page_bundle.read_text)

    monkeypatch.setattr(static, "CLIENT_BUNDLE", "not-built.js")
    app = web.Application()
    with caplog.at_level(logging.WARNING, logger="rejoinder.io.static"):
        app.add_routes(page_routes())
    said = [r.getMessage() for r in caplog.records if r.name == "rejoinder.io.static"]
    assert len(said) == 1 and said[0].startswith(BUNDLE_MISSING), said
    assert await _get(app, "/rejoinder-client.js") == (404, "text/plain", BUNDLE_MISSING + "\n")
    status, content_type, page = await _get(app, "/")
    assert (status, content_type) == (200, "text/html")  # the page itself is still there
    assert 'src="page.js"' in page


@needs_chromium
@ONE_LOOP  # Chromium is the module's, on its loop
async def test_a_missing_bundle_is_said_on_the_page(
    serve: Any,
    open_page: Any,
    mic_wav: MicWav,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(static, "CLIENT_BUNDLE", "not-built.js")
    url, _ = await serve(scripted_entrypoint([], []))
    page = await open_page(url, mic_wav(*SILENCE))
    await page.wait_for_selector("#banner.show", timeout=5000)
    await screenshot(page, tmp_path, "missing_bundle")
    assert await page.text_content("#banner") == BUNDLE_MISSING
    assert await page.evaluate("() => window.rejoinder.errors") == [BUNDLE_MISSING]
    assert await page.is_disabled("#connect")  # nothing to connect with
    assert await page.is_visible("#agent-state")  # the page is drawn, not blank
    assert not page.errors
