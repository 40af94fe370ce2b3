"""The browser tests' shared fixtures (tests/io/_browser.py), found by pytest here for every
module below: ``chromium``, ``new_page``, ``serve_app``, ``page_bundle``, ``sdk_bundle`` and
``mic_wav``. A module binds ``serve`` and ``open_page`` itself, to the page's or the SDK's
(``serve = _browser.serve_page``), since the two kinds of test mean different things by
them. Importing this costs nothing: Playwright is imported when a browser is first asked for.
"""

from __future__ import annotations

from . import _browser

chromium = _browser.chromium
new_page = _browser.new_page
serve_app = _browser.serve_app
page_bundle = _browser.page_bundle
sdk_bundle = _browser.sdk_bundle
mic_wav = _browser.mic_wav
