"""Microphone hand-overs on the loop's shared clock (virtual time): pushed audio reaches
a waiting reader at the next tick, every input's in the same tick; never later than one
interval, at once with interval 0, and the end of a microphone is not held back."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rejoinder.io.connection import PushAudioInput
from rejoinder.io.mic_clock import MicClock, mic_clock
from rejoinder.models.audio import AudioFrame


def frame(value: int = 0) -> AudioFrame:
    return AudioFrame(np.full(320, value, np.int16), 16000)


async def read(mic: PushAudioInput, into: list[tuple[float, int]]) -> None:
    loop = asyncio.get_running_loop()
    async for f in mic:
        into.append((loop.time(), int(f.data[0])))


async def test_audio_pushed_at_different_moments_is_handed_over_in_one_tick() -> None:
    loop = asyncio.get_running_loop()
    mics = [PushAudioInput(16000, batch_interval=0.02) for _ in range(3)]
    heard: list[list[tuple[float, int]]] = [[], [], []]
    readers = [asyncio.create_task(read(m, h)) for m, h in zip(mics, heard, strict=True)]
    await asyncio.sleep(1.003)  # off the grid
    for i, mic in enumerate(mics):
        assert mic.push(frame(i))
        await asyncio.sleep(0.004)
    await asyncio.sleep(0.05)
    times = [h[0][0] for h in heard]
    assert [h[0][1] for h in heard] == [0, 1, 2]
    assert times[0] == times[1] == times[2]  # one tick for all of them
    assert 1.003 < times[0] <= 1.003 + 0.02 + 1e-9  # within one interval of the first push
    assert round(times[0] / 0.02, 6) == round(times[0] / 0.02)  # on the grid
    for mic in mics:
        mic.close()
    await asyncio.wait_for(asyncio.gather(*readers), 1)
    assert loop.time() < 1.2


async def test_a_busy_reader_finds_everything_queued_in_order() -> None:
    mic = PushAudioInput(16000)
    for i in range(5):
        mic.push(frame(i))
    mic.close()
    heard: list[tuple[float, int]] = []
    await asyncio.wait_for(read(mic, heard), 1)
    assert [v for _, v in heard] == [0, 1, 2, 3, 4]


async def test_interval_zero_hands_each_frame_over_at_once() -> None:
    loop = asyncio.get_running_loop()
    mic = PushAudioInput(16000, batch_interval=0)
    heard: list[tuple[float, int]] = []
    reader = asyncio.create_task(read(mic, heard))
    await asyncio.sleep(0.013)
    mic.push(frame(7))
    pushed = loop.time()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert heard == [(pushed, 7)]
    mic.close()
    await asyncio.wait_for(reader, 1)


async def test_the_end_of_the_microphone_is_not_held_for_a_tick() -> None:
    loop = asyncio.get_running_loop()
    mic = PushAudioInput(16000, batch_interval=0.5)
    heard: list[tuple[float, int]] = []
    reader = asyncio.create_task(read(mic, heard))
    await asyncio.sleep(0.01)
    closed = loop.time()
    mic.close()
    await asyncio.wait_for(reader, 1)
    assert loop.time() == closed and heard == []
    assert not mic.push(frame())


async def test_a_cancelled_reader_leaves_no_waiter_behind() -> None:
    mic = PushAudioInput(16000)
    reader = asyncio.create_task(read(mic, []))
    await asyncio.sleep(0.01)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert mic._readers == []
    mic.push(frame(3))  # nobody waits: nothing to wake
    heard: list[tuple[float, int]] = []
    mic.close()
    await asyncio.wait_for(read(mic, heard), 1)
    assert [v for _, v in heard] == [3]


async def test_a_callback_given_during_a_tick_runs_in_that_tick() -> None:
    loop = asyncio.get_running_loop()
    clock = mic_clock(0.02)
    assert mic_clock(0.02) is clock and isinstance(clock, MicClock)
    ran: list[tuple[str, float]] = []

    def second() -> None:
        ran.append(("second", loop.time()))

    def first() -> None:
        ran.append(("first", loop.time()))
        clock.call_at_tick(second)

    def failing() -> None:
        raise RuntimeError("a bug")

    clock.call_at_tick(failing)  # logged; the others still run
    clock.call_at_tick(first)
    await asyncio.sleep(0.05)
    assert [name for name, _ in ran] == ["first", "second"]
    assert ran[0][1] == ran[1][1]
