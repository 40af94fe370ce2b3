"""``collapse_repeats``: a greedy decoder's loop at the end of a transcript, or a whole
sentence decoded twice, is said once (no model needed)."""

from __future__ import annotations

import pytest

from rejoinder.providers.local.whisper import collapse_repeats


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "Merci beaucoup pour votre appel, ou vous m'a m'a m'a m'a m",
            "Merci beaucoup pour votre appel, ou vous m'a",
        ),
        ("go go go go", "go"),
        ("and then a b a b a b a b", "and then a b"),
        ("so thank you thank you thank you thank you", "so thank you"),
        # speech that repeats a little is left alone
        ("I said no no no", "I said no no no"),
        ("Hello hello there.", "Hello hello there."),
        ("no no no no maybe", "no no no no maybe"),
        ("a b a b a b a", "a b a b a b a"),
        ("", ""),
        # a whole request decoded twice (Whisper tiny.en on the phone band)
        (
            "What's on my calendar for Friday? What's on my calendar for Friday?",
            "What's on my calendar for Friday?",
        ),
        ("Stop, stop.", "Stop, stop."),
        ("no wait no wait", "no wait no wait"),  # two words: a person may say that
    ],
)
def test_a_loop_at_the_end_is_said_once(text: str, said: str) -> None:
    assert collapse_repeats(text) == said
