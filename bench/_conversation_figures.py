"""The conversation benchmark's figures: what one utterance's event log says happened
(``judge_*``), word error, and the tables.

Times are the client's ``time.perf_counter()``. The user's times are known from the clip
(its first sample's capture time plus the onset and end measured on the clean clip); the
agent's are when the client saw them: ``play_start`` is the first agent sample played
(the speaker starts at once), ``clear`` is when playback stopped.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from _conversation_client import Event
from _words import edit_distance, normalize

MISS_AFTER = 5.0
"""An answer that has not started playing this long after the end of speech was missed."""

SPEECH_KINDS = ("command", "question", "pause")
WER_KINDS = ("command", "question", "pause", "interrupt")
NOT_INTERRUPTIONS = ("backchannel", "cough", "laugh")


@dataclass
class Outcome:
    half: str
    condition: str
    voice: str
    item: str
    kind: str
    reference: str
    valid: bool = True
    note: str = ""
    transcript: str = ""
    latency: float | None = None
    missed: bool | None = None
    early: bool | None = None
    """The agent turned ``thinking`` or played before the end of speech."""
    false_cut: bool | None = None
    stop: float | None = None
    not_stopped: bool | None = None
    false_interruption: bool | None = None
    replies: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ word error

# ---------------------------------------------------------------------- judging


def _user_finals(events: Iterable[Event], before: float = float("inf")) -> str:
    texts = [
        e.data["text"]
        for e in events
        if e.kind == "transcript"
        and e.data.get("role") == "user"
        and e.data.get("final")
        and e.t < before
    ]
    return " ".join(t for t in texts if t).strip()


def playing_at(events: Iterable[Event], t: float, playing: bool = False) -> bool:
    """Whether the speaker was playing agent audio at ``t``, from the log (``playing``:
    its state where the log starts)."""
    for e in events:
        if e.t > t:
            break
        if e.kind == "play_start":
            playing = True
        elif e.kind in ("drained", "clear"):
            playing = False
    return playing


def judge_speech(
    out: Outcome, events: list[Event], end: float, second_onset: float | None = None
) -> None:
    """A command, question or two-part utterance whose speech ended at ``end``
    (``second_onset``: where a two-part utterance's second part starts)."""
    out.transcript = _user_finals(events)
    out.replies = sum(e.kind == "play_start" for e in events)
    thinking = [e.t for e in events if e.kind == "agent_state" and e.data["state"] == "thinking"]
    starts = [e.t for e in events if e.kind == "play_start"]
    out.early = any(t < end for t in thinking + starts)
    if playing_at(events, end):
        out.latency, out.missed = None, None  # answering something said before
    else:
        after = [t - end for t in starts if t >= end]
        out.latency = after[0] if after and after[0] <= MISS_AFTER else None
        out.missed = out.latency is None
    if out.kind == "pause" and second_onset is not None:
        out.false_cut = out.early or _answered_before_hearing(events, thinking, second_onset)


def _answered_before_hearing(events: list[Event], thinking: list[float], second: float) -> bool:
    """The agent took its turn with no transcript of anything said after the pause: a
    reply to the first part alone, even if it started after the second part ended.

    (Not a comparison of words: a second part misheard, "mushrooms and olives" heard
    "Mushroom and our lives.", is the word error's column, not a cut-off.)"""
    if not thinking:
        return False
    return not any(
        e.kind == "transcript"
        and e.data.get("role") == "user"
        and e.data.get("final")
        and second < e.t <= thinking[0] + 1e-6
        for e in events
    )


def judge_barge_in(out: Outcome, events: list[Event], onset: float, end: float) -> None:
    """A clip said over the agent, starting where ``events`` start (the agent playing)."""
    out.transcript = _user_finals(events)
    out.replies = sum(e.kind == "play_start" for e in events)
    clears = [e.t for e in events if e.kind == "clear"]
    if out.kind == "interrupt":
        out.stop = clears[0] - onset if clears else None
        out.not_stopped = not clears
        return
    drained = [e.t for e in events if e.kind == "drained"]
    reply_end = drained[0] if drained else float("inf")
    reasons: list[str] = []
    if clears:
        reasons.append(f"clear {clears[0] - onset:+.2f}s")
    for e in events:
        if e.kind != "agent_state":
            continue
        if e.t < reply_end:
            reasons.append(f"agent {e.data['state']} {e.t - onset:+.2f}s while speaking")
        elif e.data["state"] == "thinking":
            reasons.append(f"answered it as a turn {e.t - onset:+.2f}s")
    out.false_interruption = bool(reasons)
    out.note = "; ".join(reasons)


def event_dicts(events: list[Event], origin: float) -> list[dict[str, Any]]:
    """The log for the JSON, times relative to ``origin`` (the clip's first sample)."""
    out: list[dict[str, Any]] = []
    for e in events:
        row: dict[str, Any] = {"t": round(e.t - origin, 3), "kind": e.kind}
        if e.kind == "metrics":  # the server's own view of the steps, for diagnosis
            m = e.data.get("metrics", {})
            row["metrics"] = {k: v for k, v in m.items() if isinstance(v, (int, float, str))}
            out.append(row)
            continue
        for key in ("state", "role", "text", "final", "interrupted", "code"):
            if key in e.data:
                row[key] = e.data[key]
        out.append(row)
    return out


# ---------------------------------------------------------------------- summary


def _pct(ordered: Sequence[float], q: float) -> float:
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _ms(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(v * 1000 for v in values)
    return round(statistics.median(ordered), 1), round(_pct(ordered, 90), 1)


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    valid = [o for o in outcomes if o.valid]
    speech = [o for o in valid if o.kind in SPEECH_KINDS]
    pauses = [o for o in valid if o.kind == "pause"]
    stops = [o for o in valid if o.kind == "interrupt"]
    others = [o for o in valid if o.kind in NOT_INTERRUPTIONS]
    lat50, lat90 = _ms([o.latency for o in speech if o.latency is not None])
    stop50, stop90 = _ms([o.stop for o in stops if o.stop is not None])
    errors = words = 0
    for o in valid:
        if o.kind in WER_KINDS:
            ref = normalize(o.reference)
            errors += edit_distance(ref, normalize(o.transcript))
            words += len(ref)
    return {
        "utterances": len(outcomes),
        "invalid": len(outcomes) - len(valid),
        "latency_ms_p50": lat50,
        "latency_ms_p90": lat90,
        "missed": sum(bool(o.missed) for o in speech),
        "answerable": sum(o.missed is not None for o in speech),
        "false_cut": sum(bool(o.false_cut) for o in pauses),
        "pauses": len(pauses),
        "stop_ms_p50": stop50,
        "stop_ms_p90": stop90,
        "not_stopped": sum(bool(o.not_stopped) for o in stops),
        "interruptions": len(stops),
        "false_interruptions": sum(bool(o.false_interruption) for o in others),
        "non_interruptions": len(others),
        "wer": round(errors / words, 3) if words else None,
    }


COLUMNS = (
    ("n", 4),
    ("lat p50", 8),
    ("lat p90", 8),
    ("missed", 7),
    ("cut", 6),
    ("stop p50", 9),
    ("stop p90", 9),
    ("kept on", 8),
    ("false int", 10),
    ("WER", 6),
    ("CPU/turn", 9),
)


def row(label: str, width: int, s: dict[str, Any], cpu: float | None) -> str:
    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    cells = (
        str(s["utterances"] - s["invalid"]),
        num(s["latency_ms_p50"]),
        num(s["latency_ms_p90"]),
        f"{s['missed']}/{s['answerable']}",
        f"{s['false_cut']}/{s['pauses']}",
        num(s["stop_ms_p50"]),
        num(s["stop_ms_p90"]),
        f"{s['not_stopped']}/{s['interruptions']}",
        f"{s['false_interruptions']}/{s['non_interruptions']}",
        "-" if s["wer"] is None else f"{s['wer']:.3f}",
        "-" if cpu is None else f"{cpu:.2f}",
    )
    return label.ljust(width) + "".join(
        c.rjust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True)
    )


def header(label: str, width: int) -> str:
    return label.ljust(width) + "".join(name.rjust(w) for name, w in COLUMNS)


LEGEND = (
    "lat: end of user speech -> first agent sample played (ms); missed: no answer within "
    f"{MISS_AFTER:.0f} s; cut: two-part utterances answered before their second part ended "
    "(or on the first part alone); stop: speech onset of an interruption -> clear (ms); "
    "kept on: interruptions the agent talked through; false int: backchannels, coughs and "
    "laughs that paused, stopped or were answered; WER: word error of the final user "
    "transcripts (commands, questions, two-part utterances, interruptions); CPU/turn: "
    "server CPU seconds per answer played."
)
