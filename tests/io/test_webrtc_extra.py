"""Without the ``webrtc`` extra: importing the package works, and the first use of a name
that needs aiortc says which extra to install."""

from __future__ import annotations

import sys

import pytest

import rejoinder.io.webrtc as webrtc
from rejoinder.io.webrtc import _deps


def test_a_missing_extra_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiortc", None)
    for name in ("signalling", "peer", "media", "datachannel"):
        monkeypatch.delitem(sys.modules, f"rejoinder.io.webrtc.{name}", raising=False)
    monkeypatch.delattr(webrtc, "signalling", raising=False)
    assert not webrtc.available()
    with pytest.raises(_deps.WebRTCUnavailable, match=r"pip install 'rejoinder\[webrtc\]'"):
        _ = webrtc.WebRTCServer
    # the options need no extra
    assert webrtc.WebRTCOptions().ice_servers == ()
