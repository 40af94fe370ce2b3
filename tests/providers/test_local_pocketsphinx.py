"""PocketSphinxSTT (offline, streaming, the en-US model inside the wheel) on Piper speech.

PocketSphinx is far less accurate than Whisper (it heard the sentence as "... of the
offline boys agent"), so these tests look for one of two words it gets right.

One ``PocketSphinxSTT`` serves the module, so the decoder loads once; the decoder's
cepstral mean adapts from utterance to utterance, so transcripts can differ between tests.
``push`` decodes inline (no threads, no awaits); one-go ``recognize`` runs in
``asyncio.to_thread``, which looptime waits for in real time (see ``test_local_piper``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections.abc import Sequence

import numpy as np
import pytest

from rejoinder.models.audio import AudioFrame
from rejoinder.models.stt import StreamingSTT, STTError
from rejoinder.providers.local.pocketsphinx_stt import PocketSphinxSTT

pytest.importorskip("pocketsphinx", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("piper", reason="the speech comes from PiperTTS (rejoinder[local])")

from .test_local_piper import sentence_audio

TIMEOUT = 60.0


def words(text: str) -> set[str]:
    return set(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def heard_the_sentence(text: str) -> bool:
    return bool(words(text) & {"hello", "test"})


@pytest.fixture(scope="module")
def stt() -> PocketSphinxSTT:
    return PocketSphinxSTT()


async def recognize(stt: PocketSphinxSTT, frames: Sequence[AudioFrame]) -> str:
    return await asyncio.wait_for(stt.recognize(frames), TIMEOUT)


async def test_recognizes_a_whole_utterance_in_one_go(stt: PocketSphinxSTT) -> None:
    frames = await sentence_audio()
    started = time.perf_counter()
    await asyncio.wait_for(stt.load(), TIMEOUT)
    loaded = time.perf_counter()
    text = await recognize(stt, frames)
    done = time.perf_counter()
    seconds = sum(f.duration for f in frames)
    print(
        f"\npocketsphinx: load {loaded - started:.2f} s, one-go {seconds:.2f} s of audio in "
        f"{done - loaded:.2f} s (RTF {(done - loaded) / seconds:.3f}): {text!r}"
    )
    assert isinstance(stt, StreamingSTT)
    assert heard_the_sentence(text), text


async def test_pushed_frames_give_interims_and_a_final_transcript(stt: PocketSphinxSTT) -> None:
    frames = await sentence_audio()  # 22050 Hz 20 ms frames: pushes resample them
    interims: list[str] = []
    cpu = time.process_time()
    for frame in frames:
        stt.push(frame, interims.append)
    cpu = time.process_time() - cpu
    print(f"\npocketsphinx push: {cpu / len(frames) * 1e6:.0f} µs CPU per 20 ms frame")
    final = await recognize(stt, frames)
    assert heard_the_sentence(final), final
    assert len(interims) >= 2, interims  # the hypothesis grew while the audio came in
    assert all(a != b for a, b in itertools.pairwise(interims))  # only changes
    # Throttled: at most one look per interim_interval (0.2 s) of audio.
    assert len(interims) <= sum(f.duration for f in frames) / 0.2 + 1
    assert heard_the_sentence(" ".join(interims)), interims


async def test_reset_drops_the_utterance_in_progress(stt: PocketSphinxSTT) -> None:
    frames = await sentence_audio()
    interims: list[str] = []
    for frame in frames[: len(frames) // 2]:
        stt.push(frame, interims.append)
    stt.reset()
    stt.reset()  # idempotent
    # Nothing is streaming any more, so recognize decodes the frames it is given.
    silence = [AudioFrame.silence(0.02, 16000) for _ in range(25)]
    assert len(words(await recognize(stt, silence))) <= 1


async def test_stereo_frames_are_mixed_down(stt: PocketSphinxSTT) -> None:
    pcm = np.concatenate([f.data for f in await sentence_audio()])
    stereo = np.repeat(pcm, 2)
    frames = [AudioFrame(stereo[i : i + 882], 22050, 2) for i in range(0, stereo.size, 882)]
    interims: list[str] = []
    for frame in frames:
        stt.push(frame, interims.append)
    assert heard_the_sentence(await recognize(stt, frames))
    assert await recognize(stt, []) == ""


async def test_a_failing_decoder_never_raises_from_push_but_from_recognize(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = PocketSphinxSTT(decoder_options={"hmm": "/nonexistent/acoustic-model"})
    frame = AudioFrame.silence(0.02, 16000)
    interims: list[str] = []
    with caplog.at_level(logging.WARNING, logger="rejoinder.providers.local"):
        broken.push(frame, interims.append)
        broken.push(frame, interims.append)  # the utterance is dropped: no second attempt
    assert interims == []
    assert len([r for r in caplog.records if "PocketSphinx" in r.getMessage()]) == 1
    with pytest.raises(STTError, match="could not load the PocketSphinx decoder"):
        await recognize(broken, [frame, frame])
    # The failure was reported; the next utterance tries again (and fails again).
    with pytest.raises(STTError, match="could not load the PocketSphinx decoder"):
        await recognize(broken, [frame])
