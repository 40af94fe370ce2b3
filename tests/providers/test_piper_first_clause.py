"""PiperTTS speaks the first sentence's opening clause on its own, so the first audio of a
reply comes after a short clause's synthesis, not a whole sentence's.

Piper synthesizes a sentence whole before any of it can play: "Sure, I can help you with
that." took 121 ms to its first audio on a 2-core machine, "Sure," 38 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from rejoinder.providers.local.piper_tts import split_opening_clause

from .test_local_piper import SYNTHESIS_TIMEOUT, shared_tts


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            "Sure, I can help you with that. Anything else?",
            ("Sure,", "I can help you with that. Anything else?"),
        ),
        (
            "Of course, the next train to Boston leaves at five.",
            ("Of course,", "the next train to Boston leaves at five."),
        ),
        ("Yes; the shop opens at nine tomorrow.", ("Yes;", "the shop opens at nine tomorrow.")),
        ("Well - I think we should go now.", ("Well -", "I think we should go now.")),
        ("It costs 3,000 dollars, or so they say.", ("It costs 3,000 dollars,", "or so they say.")),
        # too little after the boundary to gain anything: whole
        ("Sure, thanks.", ("Sure, thanks.",)),
        ("Sure, no problem. I will book it now.", ("Sure, no problem. I will book it now.",)),
        # no boundary in the first sentence (a number's comma is none)
        ("It costs 3,000 dollars.", ("It costs 3,000 dollars.",)),
        ("Okay. Sure, I can help you with that.", ("Okay. Sure, I can help you with that.",)),
        ("Hello there", ("Hello there",)),
        ("", ("",)),
    ],
)
def test_the_first_sentence_is_split_at_its_opening_clause(
    text: str, parts: tuple[str, ...]
) -> None:
    assert split_opening_clause(text) == parts


async def _first_audio_seconds(text: str, first_clause: bool) -> float:
    tts = shared_tts()
    await tts.load()
    tts.first_clause = first_clause
    try:
        began = time.perf_counter()
        stream = tts.synthesize(text)
        try:
            await anext(stream)  # type: ignore[arg-type]
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return time.perf_counter() - began
    finally:
        tts.first_clause = True


async def test_a_reply_starting_with_a_short_clause_is_heard_sooner() -> None:
    text = "Of course, the next train to Boston leaves at five from platform two."
    whole, split = [], []
    for _ in range(3):  # interleaved, so a busy machine slows both alike
        whole.append(await asyncio.wait_for(_first_audio_seconds(text, False), SYNTHESIS_TIMEOUT))
        split.append(await asyncio.wait_for(_first_audio_seconds(text, True), SYNTHESIS_TIMEOUT))
    # "Of course," alone: about a quarter of the whole sentence's synthesis
    assert statistics.median(split) < 0.7 * statistics.median(whole)
