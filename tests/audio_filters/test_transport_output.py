"""``EchoTap`` around the output every server transport uses (``ReportedPlayback``: the
WebSocket, WebRTC, phone media streams and SIP all build on it): calls and reports pass
through unchanged, and the far end follows what the client reports hearing."""

from __future__ import annotations

import numpy as np

from rejoinder.audio_filters import EchoReference, EchoTap
from rejoinder.io.playback import ReportedPlayback
from rejoinder.models.audio import AudioFrame, PlaybackFinished


def ramp(samples: int, start: int = 1) -> AudioFrame:
    return AudioFrame(((np.arange(samples) + start) % 30000).astype(np.int16), 16000)


async def test_the_far_end_follows_a_client_that_buffers_and_reports_late() -> None:
    sent: list[AudioFrame] = []
    cleared: list[bool] = []

    async def send_audio(frame: AudioFrame) -> None:
        sent.append(frame)

    playback = ReportedPlayback(16000, send_audio, lambda: cleared.append(True))
    reference = EchoReference(lead=0.1, max_ahead=0.3)
    tap = EchoTap(playback, reference)
    started: list[bool] = []
    finished: list[PlaybackFinished] = []
    tap.set_listener(lambda: started.append(True), finished.append)

    for i in range(50):  # one second, sent at once (the server sends ahead)
        await tap.capture_frame(ramp(320, start=1 + 320 * i))
    tap.flush()
    assert len(sent) == 50  # the transport got every frame, unchanged
    assert sent[0] is not None and sent[7].data[0] == 1 + 320 * 7

    heard = reference.take(8000, 16000)  # half a second of microphone goes by
    assert heard is not None and heard[0] == 1
    playback.on_played(320)  # only now does the client say it started playing
    assert started == [True]  # the session's listener got the report
    assert reference.realigned == 1
    far = reference.take(160, 16000)
    assert far is not None and far[0] == 1601  # back to 0.1 s into the reply

    tap.clear_buffer()  # the user interrupted
    assert cleared == [True]
    assert finished and finished[-1].interrupted
    assert reference.take(160, 16000) is None


async def test_a_client_that_plays_at_once_keeps_the_playhead() -> None:
    async def send_audio(frame: AudioFrame) -> None:
        return None

    playback = ReportedPlayback(16000, send_audio, lambda: None)
    reference = EchoReference(lead=0.1, max_ahead=0.3)
    tap = EchoTap(playback, reference)
    finished: list[PlaybackFinished] = []
    tap.set_listener(None, finished.append)
    for i in range(25):
        await tap.capture_frame(ramp(320, start=1 + 320 * i))
    tap.flush()
    reference.take(1600, 16000)
    playback.on_played(1600)  # a timely report: 0.1 s in
    assert reference.realigned == 0
    far = reference.take(160, 16000)
    assert far is not None and far[0] == 1601
    playback.on_played(8000)  # played out
    assert finished and not finished[-1].interrupted
    assert reference.take(160, 16000) is None
