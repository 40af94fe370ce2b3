"""The panel's data: voices and utterances of the tuning and the held-out half.

Written for this benchmark, not taken from any corpus. Each half has:

- ``command``: commands and statements, the kind Whisper tends to leave unpunctuated;
- ``question``: questions;
- ``pause``: one request with a silence in it, the first part ending where a speaker
  plainly is not done (a filler, a conjunction, a preposition, an article); said in one
  breath and the silence opened between the parts' words, so that the first part keeps
  the pitch of a sentence that goes on (``bench/_conversation_breath.py``); an agent that
  answers before the second part cut the user off;
- ``interrupt``: said over the agent while it talks, meaning "stop";
- ``backchannel``, ``cough``, ``laugh``: said (or made) over the agent while it talks,
  meaning "go on": an agent that stops or even pauses for them was interrupted falsely.

The barge-in kinds (the last four) start with ``lead``, a request the user makes first so
that the agent has something to say; the clip starts ``offset`` seconds after the
client began playing the agent's answer. Voices are assigned to utterances in rotation
(``bench/_conversation_audio.py``), so each voice says a mix of every kind.

Nobody may tune defaults on the held-out half (see the package's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

BARGE_IN_KINDS = ("interrupt", "backchannel", "cough", "laugh")
KINDS = ("command", "question", "pause", *BARGE_IN_KINDS)


@dataclass(frozen=True)
class Voice:
    id: str
    engine: str  # "piper", "espeak" or "flite"
    name: str  # the engine's voice name ("" for Piper's only voice)


@dataclass(frozen=True)
class Item:
    id: str
    kind: str
    parts: tuple[str, ...] = ()
    """What is said; two parts for ``pause`` (``()`` for a cough)."""
    pause: float = 0.0
    """Seconds of silence between the two parts of a ``pause`` item."""
    lead: str = ""
    offset: float = 0.0
    cough: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)
    """A synthesized cough: (burst seconds, low Hz, high Hz, seed); two bursts when the
    seed is odd (a double cough)."""

    @property
    def reference(self) -> str:
        """The words a recognizer should hear (empty for sounds without words)."""
        if self.kind in ("cough", "laugh"):
            return ""
        return " ".join(self.parts)


@dataclass(frozen=True)
class Half:
    name: str
    voices: tuple[Voice, ...]
    items: tuple[Item, ...]


def _simple(prefix: str, kind: str, texts: tuple[str, ...]) -> list[Item]:
    return [Item(f"{prefix}-{kind}-{i + 1}", kind, (t,)) for i, t in enumerate(texts)]


def _pauses(prefix: str, rows: tuple[tuple[str, float, str], ...]) -> list[Item]:
    return [
        Item(f"{prefix}-pause-{i + 1}", "pause", (a, b), pause=p)
        for i, (a, p, b) in enumerate(rows)
    ]


def _over(
    prefix: str, kind: str, leads: tuple[str, ...], rows: tuple[tuple[str, float], ...]
) -> list[Item]:
    return [
        Item(f"{prefix}-{kind}-{i + 1}", kind, (t,), lead=leads[i % len(leads)], offset=o)
        for i, (t, o) in enumerate(rows)
    ]


def _coughs(
    prefix: str, leads: tuple[str, ...], rows: tuple[tuple[float, float, float, int, float], ...]
) -> list[Item]:
    return [
        Item(f"{prefix}-cough-{i + 1}", "cough", lead=leads[-1 - i], offset=o, cough=(d, lo, hi, s))
        for i, (d, lo, hi, s, o) in enumerate(rows)
    ]


# ------------------------------------------------------------------ tuning half

_T_LEADS = (
    "tell me about your opening hours",
    "what can you do for me",
    "explain how the booking works",
    "give me the news for today",
    "what are the plans for the weekend",
)

TUNING = Half(
    "tuning",
    voices=(
        Voice("piper-joe", "piper", ""),
        Voice("espeak-en-us", "espeak", "en-us"),
        Voice("espeak-en+f3", "espeak", "en+f3"),
        Voice("flite-slt", "flite", "slt"),
    ),
    items=tuple(
        _simple(
            "t",
            "command",
            (
                "set a timer for five seconds",
                "I need to change my booking",
                "turn off the lights in the kitchen",
                "add bread and butter to my shopping list",
                "call the dentist and move my appointment to Thursday",
                "play the next episode of my podcast",
            ),
        )
        + _simple(
            "t",
            "question",
            (
                "what time does the bakery open on Sunday?",
                "how far is the train station from here?",
                "can you read me my last message?",
                "is there a pharmacy near the hotel?",
                "who is playing at the concert hall tonight?",
                "how much is a return ticket to Boston?",
            ),
        )
        + _pauses(
            "t",
            (
                ("I'd like to book, um,", 0.8, "a table for two"),
                ("can you tell me the weather in", 1.0, "Paris tomorrow"),
                ("send a message to my sister and", 0.9, "tell her I'm running late"),
                ("I want to order a pizza with", 0.7, "mushrooms and olives"),
                ("remind me to pick up the", 1.1, "dry cleaning after work"),
                ("what's the fastest way to get to, uh,", 0.8, "the airport from downtown"),
                ("please move my meeting to", 1.2, "three in the afternoon"),
                ("I'm looking for a hotel near the", 0.6, "conference center"),
            ),
        )
        + _over(
            "t",
            "interrupt",
            _T_LEADS,
            (
                ("wait, stop", 1.5),
                ("no, Wednesday", 1.2),
                ("hold on a second", 2.0),
                ("actually I meant Tuesday", 1.6),
                ("sorry, that's not what I asked", 1.0),
            ),
        )
        + _over(
            "t",
            "backchannel",
            _T_LEADS,
            (("uh-huh", 1.4), ("yeah", 1.8), ("right", 1.1), ("okay", 2.2), ("mm-hmm", 1.6)),
        )
        + _coughs("t", _T_LEADS, ((0.2, 400.0, 3000.0, 2, 1.5), (0.16, 300.0, 2500.0, 5, 2.0)))
        + _over("t", "laugh", _T_LEADS, (("ha ha", 1.3), ("ha ha ha", 1.9)))
    ),
)

# ---------------------------------------------------------------- held-out half

_H_LEADS = (
    "how does the loyalty program work",
    "tell me what the weather will do this week",
    "what should I pack for a trip to the mountains",
    "describe the menu for tonight",
    "walk me through the checkout",
)

HELD_OUT = Half(
    "held-out",
    voices=(
        Voice("espeak-en-us+m7", "espeak", "en-us+m7"),
        Voice("espeak-en-gb-scotland", "espeak", "en-gb-scotland"),
        Voice("flite-awb", "flite", "awb"),
        Voice("flite-rms", "flite", "rms"),
    ),
    items=tuple(
        _simple(
            "h",
            "command",
            (
                "turn the heating up by two degrees",
                "cancel my reservation for tonight",
                "open the garage door",
                "text Mark that the meeting has moved",
                "book a taxi to the airport for six in the morning",
                "dim the lights in the living room",
            ),
        )
        + _simple(
            "h",
            "question",
            (
                "when does the last bus leave tonight?",
                "what's on my calendar for Friday?",
                "do you know a good Italian restaurant nearby?",
                "how long will the package take to arrive?",
                "which platform does the Chicago train leave from?",
                "could you check if my flight is on time?",
            ),
        )
        + _pauses(
            "h",
            (
                ("I want to cancel, er,", 0.9, "my subscription to the magazine"),
                ("what's the traffic like on the", 1.0, "highway to Denver"),
                ("play some music by", 0.8, "the Beatles in the kitchen"),
                ("can you find me a flight to", 1.1, "London next Monday"),
                ("I need to pay my electricity bill but", 0.7, "I lost the account number"),
                ("schedule a call with, um,", 1.2, "the accountant on Friday"),
                ("turn on the fan in the", 0.6, "bedroom upstairs"),
                ("how much does it cost to rent a", 0.9, "car for the weekend"),
            ),
        )
        + _over(
            "h",
            "interrupt",
            _H_LEADS,
            (
                ("stop, stop", 1.3),
                ("no, I said Friday", 1.7),
                ("hang on", 1.1),
                ("wait, that's wrong", 2.1),
                ("actually make it four people", 1.5),
            ),
        )
        + _over(
            "h",
            "backchannel",
            _H_LEADS,
            (("I see", 1.5), ("sure", 1.2), ("alright", 2.0), ("yep", 1.7), ("oh really", 1.3)),
        )
        + _coughs("h", _H_LEADS, ((0.25, 350.0, 2800.0, 4, 1.7), (0.18, 500.0, 3500.0, 7, 1.2)))
        + _over("h", "laugh", _H_LEADS, (("hahaha", 1.6), ("heh heh", 1.4)))
    ),
)

HALVES = {h.name: h for h in (TUNING, HELD_OUT)}
