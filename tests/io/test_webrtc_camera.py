"""The camera over WebRTC: a client shares a video track, and each user turn carries one
still of it, scaled down, to the model. Real peer connections on 127.0.0.1, in real time
(the sampler's own parts on virtual time)."""

from __future__ import annotations

import asyncio
import fractions
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.io.protocol import TranscriptMessage
from rejoinder.io.webrtc import WebRTCOptions, add_webrtc_routes
from rejoinder.io.webrtc.video import CameraSampler, encode_jpeg, still_size
from rejoinder.testing import (
    MemoryAudioInput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    speech_frame,
)

from ._webrtc_client import RATE, WebRTCClient

RED, BLUE = (220, 20, 20), (20, 20, 220)


def picture(color: tuple[int, int, int], width: int = 1280, height: int = 720) -> av.VideoFrame:
    pixels = np.empty((height, width, 3), np.uint8)
    pixels[:] = color
    return av.VideoFrame.from_ndarray(pixels, format="rgb24")


def decoded(jpeg: bytes) -> np.ndarray[Any, Any]:
    """The RGB pixels of a JPEG (decoded with PyAV, as a model's server would)."""
    codec = av.CodecContext.create("mjpeg", "r")
    frames = codec.decode(av.Packet(jpeg))
    return frames[0].to_ndarray(format="rgb24")


class Camera(MediaStreamTrack):
    """A camera at ``fps`` frames a second showing ``color`` (changeable)."""

    kind = "video"

    def __init__(self, color: tuple[int, int, int], fps: int = 10) -> None:
        super().__init__()
        self.color = color
        self._fps = fps
        self._count = 0
        self._start: float | None = None

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        if self._start is None:
            self._start = loop.time()
        due = self._start + self._count / self._fps
        await asyncio.sleep(max(0.0, due - loop.time()))
        frame = picture(self.color, 640, 480)
        frame.pts, frame.time_base = self._count * 9000, fractions.Fraction(1, 90000)
        self._count += 1
        return frame


# ----------------------------------------------------------------- the still


def test_a_still_is_scaled_to_the_longer_side_in_even_pixels() -> None:
    assert still_size(1280, 720, 768) == (768, 432)
    assert still_size(720, 1280, 768) == (432, 768)
    assert still_size(640, 480, 768) == (640, 480)  # never scaled up
    assert still_size(1001, 3, 100) == (100, 2)
    with pytest.raises(ValueError, match="at least 16"):
        WebRTCOptions(video_max_side=8)


def test_the_still_is_a_jpeg_of_the_frame() -> None:
    jpeg = encode_jpeg(picture(RED), 768)
    image = rj.ImageContent.from_bytes(jpeg)
    assert image.mime_type == "image/jpeg"
    pixels = decoded(jpeg)
    assert pixels.shape == (432, 768, 3)
    assert np.abs(pixels.mean(axis=(0, 1)) - RED).max() < 12


class FrameQueue(MediaStreamTrack):
    kind = "video"

    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue[av.VideoFrame | None] = asyncio.Queue()

    async def recv(self) -> av.VideoFrame:
        frame = await self.queue.get()
        if frame is None:
            raise MediaStreamError
        return frame


async def test_each_turn_carries_the_still_of_when_its_speech_ended() -> None:
    """A cough, then words: the turn carries one still, the latest; the next turn its own."""

    def sees(ctx: rj.ChatContext) -> list[str]:
        return [f"{len(ctx.messages()[-1].images)} image(s)"]

    llm = ScriptedLLM(sees)
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm,
        stt=ScriptedSTT(["", "What colour is this?", "And now?"]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        user_away_timeout=None,
        min_endpointing_delay=0.2,
    )
    session.input.audio = mic
    track = FrameQueue()
    sampler = CameraSampler(track, max_side=64)
    sampler.attach(session)
    assert sampler.show() is None  # no session running, no frame
    await session.start(rj.Agent(instructions="x"))
    reading = asyncio.create_task(sampler.run())
    assert sampler.show() is None  # no frame yet

    async def utterance(color: tuple[int, int, int], seconds: float) -> None:
        await track.queue.put(picture(color))
        await mic.push(speech_frame(seconds))
        await mic.push_silence(2.5)

    await utterance(RED, 0.3)  # a cough: no words, no turn
    await utterance(BLUE, 0.8)  # the question
    assert sampler.stills == 2 and sampler.frames == 2
    (still,) = llm.calls[0].chat_ctx.messages()[-1].images
    assert still.data is not None and decoded(still.data).shape == (36, 64, 3)
    assert np.abs(decoded(still.data).mean(axis=(0, 1)) - BLUE).max() < 12
    await utterance(RED, 0.8)
    (still,) = llm.calls[1].chat_ctx.messages()[-1].images
    assert still.data is not None
    assert np.abs(decoded(still.data).mean(axis=(0, 1)) - RED).max() < 12
    assert [m.content for m in session.history.messages() if m.role == "assistant"] == [
        "1 image(s)",
        "1 image(s)",
    ]
    await track.queue.put(None)
    await reading  # the track ended: the reader returns
    await session.aclose()
    assert sampler.show() is None  # the session is gone


# ------------------------------------------------------------ over WebRTC


@pytest.fixture
async def camera_server() -> AsyncIterator[tuple[str, list[ScriptedLLM]]]:
    llms: list[ScriptedLLM] = []

    def answer(ctx: rj.ChatContext) -> list[str]:
        images = ctx.messages()[-1].images
        if not images or images[0].data is None:
            return ["I see nothing."]
        red, _, blue = decoded(images[0].data).mean(axis=(0, 1))
        return ["I see red." if red > blue else "I see blue."]

    async def entrypoint(conn: Connection) -> None:
        llm = ScriptedLLM(answer)
        llms.append(llm)
        tts = ScriptedTTS()
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=llm,
            vad=ScriptedVAD(),
            stt=ScriptedSTT(["What do you see?", "And now?"]),
            tts=tts,
            user_away_timeout=None,
            min_endpointing_delay=0.1,
        )
        await conn.serve(session, rj.Agent(instructions="You can see."))

    app = web.Application()
    webrtc = add_webrtc_routes(app, entrypoint, WebRTCOptions(host_addresses=["127.0.0.1"]))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/api/offer")), llms
    await webrtc.aclose()
    await server.close()


def agent_finals(client: WebRTCClient) -> list[TranscriptMessage]:
    return [m for m in client.of_type(TranscriptMessage) if m.role == "agent" and m.final]


def tone(seconds: float) -> np.ndarray[Any, Any]:
    t = np.arange(round(seconds * RATE)) / RATE
    return (np.sin(2 * np.pi * 220 * t) * 6000).astype(np.int16)


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_shared_camera_is_seen_by_the_model_each_turn(
    camera_server: tuple[str, list[ScriptedLLM]],
) -> None:
    url, llms = camera_server
    camera = Camera(RED)
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(url, camera=camera)
        await client.connect(http)

        async def turn(color: tuple[int, int, int]) -> str:
            camera.color = color
            await asyncio.sleep(0.4)  # a few frames of the new colour
            replies = len(agent_finals(client))
            client.mic.say(tone(0.6))
            await client.until(lambda: len(agent_finals(client)) > replies, 10)
            await client.until(lambda: client.states()[-1][1] == "listening", 5)
            return agent_finals(client)[-1].text

        assert await turn(RED) == "I see red."
        assert await turn(BLUE) == "I see blue."
        await client.close()
    (llm,) = llms
    stills = [call.chat_ctx.messages()[-1].images for call in llm.calls]
    assert [len(images) for images in stills] == [1, 1]
    # 640x480 is under the 768 px bound: sent at its own size.
    assert all(decoded(images[0].data).shape == (480, 640, 3) for images in stills)  # type: ignore[arg-type]
