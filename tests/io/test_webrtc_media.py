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


def opus_packets(n: int) -> list[bytes]:
    from rejoinder.io.webrtc.media import _encode, _opus_encoder

    codec = _opus_encoder()
    tone = (np.sin(np.arange(FRAME_SAMPLES * n) * 0.05) * 8000).astype(np.int16)
    packets: list[bytes] = []
    for i in range(n):
        packets += _encode(codec, tone[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
    return packets


async def test_the_microphone_is_decoded_on_the_loop_at_the_next_hand_over() -> None:
    import threading

    from aiortc.jitterbuffer import JitterFrame
    from aiortc.rtcrtpparameters import RTCRtpCodecParameters

    from rejoinder.io.connection import PushAudioInput
    from rejoinder.io.webrtc.media import MicrophoneDecoder

    loop = asyncio.get_running_loop()
    opus = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2)
    mic = PushAudioInput(16000, batch_interval=0.02)
    decoder = MicrophoneDecoder(mic)
    heard: list[tuple[float, AudioFrame]] = []

    async def read() -> None:
        async for f in mic:
            heard.append((loop.time(), f))

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.005)
    packets = opus_packets(10)
    for i, packet in enumerate(packets[:5]):
        decoder.put((opus, JitterFrame(data=packet, timestamp=i * FRAME_SAMPLES)))
    put_at = loop.time()
    assert heard == [] and decoder.last_frame == put_at
    await asyncio.sleep(0.03)
    ticks = {t for t, _ in heard}
    assert len(ticks) == 1 and put_at < min(ticks) <= put_at + 0.02  # all five, at the tick
    assert all(f.sample_rate == 16000 and f.num_channels == 1 for _, f in heard)
    before = len(heard)
    for i, packet in enumerate(packets[5:], 5):
        decoder.put((opus, JitterFrame(data=packet, timestamp=i * FRAME_SAMPLES)))
    # the receiver stops: what was pending is heard, and aiortc's idle thread returns
    thread = threading.Thread(target=decoder.get)
    thread.start()
    decoder.put(None)
    thread.join(1)
    assert not thread.is_alive()
    mic.close()
    await asyncio.wait_for(reader, 1)
    assert len(heard) > before
    samples = sum(f.samples_per_channel for _, f in heard)
    assert 10 * 320 - 600 <= samples <= 10 * 320  # soxr holds a little back


async def test_the_watch_ends_when_the_track_ends_or_stays_idle() -> None:
    from aiortc.mediastreams import MediaStreamError

    from rejoinder.io.connection import PushAudioInput
    from rejoinder.io.webrtc.media import MicrophoneDecoder, watch_microphone

    loop = asyncio.get_running_loop()

    class Track:
        def __init__(self) -> None:
            self.end = asyncio.Event()

        async def recv(self) -> None:
            await self.end.wait()
            raise MediaStreamError

    decoder = MicrophoneDecoder(PushAudioInput(16000))
    track = Track()
    start = loop.time()
    watch = asyncio.create_task(watch_microphone(track, decoder, idle_timeout=1.0))  # type: ignore[arg-type]
    await asyncio.sleep(0.7)
    decoder.last_frame = loop.time()  # a frame came: idle counts from it
    await asyncio.wait_for(watch, 5)
    assert loop.time() - start == pytest.approx(1.7, abs=1e-6)
    ended = asyncio.create_task(watch_microphone(track, decoder, idle_timeout=None))  # type: ignore[arg-type]
    await asyncio.sleep(3)
    assert not ended.done()
    track.end.set()
    await asyncio.wait_for(ended, 1)
