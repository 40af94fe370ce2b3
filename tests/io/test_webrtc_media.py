"""The agent's WebRTC track on its own (virtual time): framing, pacing, clear, and the map
from the client's played track samples to agent samples."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")

from rejoinder.io.webrtc.media import CODEC_DELAY, FRAME_SAMPLES, AgentTrack, silence_packet
from rejoinder.models.audio import AudioFrame


def agent(samples: int, rate: int = 48000) -> AudioFrame:
    return AudioFrame(np.full(samples, 1000, np.int16), rate)


async def test_frames_carry_queued_audio_then_silence_and_the_map_counts_only_agent_audio() -> None:
    track = AgentTrack()
    _, n = track.next_frame()  # one frame of silence first: position 960
    assert n == 0 and track.position == FRAME_SAMPLES
    track.push(agent(1500))
    pcm, n = track.next_frame()
    assert n == FRAME_SAMPLES and (pcm == 1000).all()
    pcm, n = track.next_frame()
    assert n == 540 and (pcm[:540] == 1000).all() and (pcm[540:] == 0).all()
    assert track.agent_sent == 1500 and track.queued == 0
    # played counts track samples; the agent audio began at 960 (+ the codec's delay)
    assert track.agent_played(960 + CODEC_DELAY) == 0
    assert track.agent_played(960 + CODEC_DELAY + 100) == 100
    assert track.agent_played(1920 + CODEC_DELAY + 600) == 1500
    assert track.agent_played(10_000) == 1500
    track.stop()


async def test_a_clear_drops_what_did_not_go_out_and_it_is_never_counted() -> None:
    track = AgentTrack()
    track.push(agent(4800))
    track.next_frame()
    assert track.clear() == FRAME_SAMPLES  # the agent samples that went out
    assert track.queued == 0
    _, n = track.next_frame()
    assert n == 0
    track.push(agent(960))
    track.next_frame()
    # after the clear the next audio follows on at 960 agent samples, as a WebSocket
    # client's count would (it never played the dropped 3840)
    assert track.agent_played(2 * FRAME_SAMPLES + CODEC_DELAY) == FRAME_SAMPLES
    assert track.agent_played(3 * FRAME_SAMPLES + CODEC_DELAY) == 2 * FRAME_SAMPLES
    track.stop()


async def test_audio_at_another_rate_is_resampled_to_48k() -> None:
    track = AgentTrack()
    for _ in range(10):
        track.push(agent(480, 24000))
    assert 9600 - 1500 <= track.queued <= 9600  # soxr holds back about 30 ms at first
    track.stop()


async def test_the_producer_waits_while_too_much_is_queued() -> None:
    track = AgentTrack(max_queued=0.1)
    track.push(agent(4800))
    waiter = asyncio.ensure_future(track.wait_room())
    await asyncio.sleep(0)
    assert not waiter.done()
    track.next_frame()
    await asyncio.sleep(0)
    assert waiter.done()
    track.push(agent(4800))
    waiter = asyncio.ensure_future(track.wait_room())
    track.stop()  # a stopped track releases its producer
    await asyncio.sleep(0)
    assert waiter.done()


@pytest.mark.looptime
async def test_recv_paces_20_ms_packets_and_sends_the_prepared_silence_when_idle() -> None:
    loop = asyncio.get_running_loop()
    track = AgentTrack()
    start = loop.time()
    packets = [await track.recv() for _ in range(50)]
    assert loop.time() - start == pytest.approx(0.98, abs=1e-6)
    assert [p.pts for p in packets] == [i * FRAME_SAMPLES for i in range(50)]
    assert all(bytes(p) == silence_packet() for p in packets)
    track.push(agent(FRAME_SAMPLES * 2))
    spoken = [bytes(await track.recv()) for _ in range(6)]
    # two frames of audio and the encoder's tail, then the prepared silence again
    assert all(p != silence_packet() for p in spoken[:2])
    assert spoken[5] == silence_packet()
    track.stop()
