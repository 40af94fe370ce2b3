"""A conversation benchmark on material nobody tuned on: the shipped offline voice stack,
in its own server process, talked to over ``/ws`` by a real-time client.

    python bench/conversation.py [--half tuning|held-out|both] [--conditions wideband,phone]
        [--voices piper-joe,flite-awb] [--limit N] [--kinds interrupt,backchannel]
        [--noise-voices 2] [--port P] [--json F]

The panel (``bench/panel/``) has a tuning half and a held-out half, with different
sentences and different voices (nobody may tune defaults on the held-out half). Each
utterance is said by one voice of its half (in rotation, so each voice says a mix of every
kind), synthesized at run time and cached under ``bench/.cache/``. Conditions:

- ``wideband``: 16 kHz, clean;
- ``phone``: resampled to 8 kHz, through G.711 μ-law, streamed at ``sample_rate: 8000``
  (the same stack: each model takes 8 kHz audio as a phone call gives it);
- ``noise-babble``, ``noise-white``, ``noise-pink``: 16 kHz with noise at 10 dB SNR under
  the whole stream, silences included (babble: four talkers saying the half's lead
  requests in its voices). By default only the utterances of the first ``--noise-voices``
  (2) voices of each half run in noise, to keep ``make bench-conversation`` near 40 min;
  the output says so.

The server is ``rejoinder serve bench/conversation_agent.py`` (the session exactly as
``local.voice_session_options`` builds it, the zero-latency fake model answering every
turn with the same ~6 s reply). One connection per half and condition; its first request
warms the session up and is not counted. The client's microphone has no echo of the
agent (a headset). Prints progress to stderr, a table per half and condition and one per
voice; ``--json`` writes every utterance's outcome and event log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np

import _conversation_audio as audio
import _conversation_figures as fig
from _conversation_client import Client
from _conversation_reply import REPLY
from _conversation_run import GAP, LISTEN_AFTER, Server, Spoken, run_item, settle
from panel import HALVES, Half, Item, Voice
from panel.panel import BARGE_IN_KINDS, KINDS

CONDITIONS = ("wideband", "phone", "noise-babble", "noise-white", "noise-pink")
SNR_DB = 10.0
NOISE_SECONDS = 60.0  # the noise loops; a minute hides the seam
LATENCY_GUESS = 0.8  # for the duration estimate only


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------- the plan


def voices_of(half: Half, wanted: set[str] | None) -> list[Voice]:
    out = []
    for voice in half.voices:
        if wanted is not None and voice.id not in wanted:
            continue
        if not audio.voice_available(voice):
            log(f"{voice.id}: {voice.engine} is not installed, skipped")
            continue
        out.append(voice)
    return out


async def plan(
    half: Half, voices: list[Voice], limit: int | None, kinds: set[str] | None = None
) -> tuple[list[audio.Clip], audio.Clip]:
    """The half's clips (who says what: ``kinds`` only picks among them, so each item
    keeps its voice) and the warm-up request."""
    clips = [
        await audio.build_clip(item, voice)
        for item, voice in audio.assign(half, voices, limit)
        if kinds is None or item.kind in kinds
    ]
    # The warm-up says one of the half's lead requests (they are never measured).
    warm = await audio.build_clip(Item("warm-up", "command", (half.items[-1].lead,)), voices[0])
    return clips, warm


def clip_seconds(clip: audio.Clip, reply: float) -> float:
    """Roughly how long an utterance takes in real time (for the estimate)."""
    item = clip.item
    if item.kind not in BARGE_IN_KINDS:
        return clip.seconds + LATENCY_GUESS + reply + GAP + 0.3
    assert clip.lead is not None
    lead = clip.lead.size / audio.RATE + LATENCY_GUESS
    if item.kind == "interrupt":
        return lead + item.offset + clip.seconds + LATENCY_GUESS + reply + GAP + 0.3
    return lead + max(reply, item.offset + clip.seconds + LISTEN_AFTER) + GAP + 0.3


# ------------------------------------------------------------------- the noise


def room_noise(kind: str, half: Half, sources: list[np.ndarray]) -> np.ndarray | None:
    seed = 1 if half.name == "tuning" else 2
    if kind == "noise-babble":
        return audio.at_snr(audio.babble(sources, NOISE_SECONDS, seed), SNR_DB)
    if kind == "noise-white":
        return audio.at_snr(audio.white(NOISE_SECONDS, seed), SNR_DB)
    if kind == "noise-pink":
        return audio.at_snr(audio.pink(NOISE_SECONDS, seed), SNR_DB)
    return None


# ----------------------------------------------------------------------- a run


async def run_condition(
    server: Server,
    half: Half,
    condition: str,
    clips: list[audio.Clip],
    warm: audio.Clip,
    noise: np.ndarray | None,
    progress: Callable[[str], None],
) -> tuple[list[fig.Outcome], float, int]:
    """One connection: the warm-up, then every clip. Returns the outcomes, the server's
    CPU seconds and the answers played after the warm-up."""
    phone = condition == "phone"
    rate = audio.PHONE_RATE if phone else audio.RATE
    convert = audio.narrow if phone else (lambda pcm: pcm)
    outcomes: list[fig.Outcome] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{server.url}/ws") as ws:
        client = Client(ws, rate, noise, audio.ulaw_line if phone else None)
        await client.start()
        try:
            await run_item(
                client, Spoken(warm, convert(warm.pcm), None), _outcome(half, condition, warm)
            )
            await settle(client, time.perf_counter())
            cpu0, mark = server.cpu(), len(client.log)
            for i, clip in enumerate(clips):
                lead = None if clip.lead is None else convert(clip.lead)
                spoken = Spoken(clip, convert(clip.pcm), lead)
                out = await run_item(client, spoken, _outcome(half, condition, clip))
                outcomes.append(out)
                progress(f"[{half.name} {condition} {i + 1}/{len(clips)}] {_brief(out)}")
                if client.closed:
                    raise RuntimeError(f"the server closed the connection: {server.tail()}")
            await settle(client, time.perf_counter())
            cpu = server.cpu() - cpu0
            answers = sum(e.kind == "play_start" for e in client.log[mark:])
        finally:
            await client.stop()
    return outcomes, cpu, answers


def _outcome(half: Half, condition: str, clip: audio.Clip) -> fig.Outcome:
    return fig.Outcome(
        half.name, condition, clip.voice.id, clip.item.id, clip.item.kind, clip.item.reference
    )


def _brief(o: fig.Outcome) -> str:
    bits = [o.voice, o.item]
    if not o.valid:
        bits.append(f"INVALID ({o.note})")
    if o.latency is not None:
        bits.append(f"latency {o.latency * 1000:.0f} ms")
    if o.missed:
        bits.append("MISSED")
    if o.false_cut:
        bits.append("FALSE CUT")
    if o.stop is not None:
        bits.append(f"stop {o.stop * 1000:.0f} ms")
    if o.not_stopped:
        bits.append("NOT STOPPED")
    if o.false_interruption:
        bits.append(f"FALSE INTERRUPTION ({o.note})")
    bits.append(repr(o.transcript))
    return " | ".join(bits)


# --------------------------------------------------------------------- tables


def print_tables(
    outcomes: list[fig.Outcome], cpu: dict[tuple[str, str], tuple[float, int]]
) -> None:
    print(fig.LEGEND)
    print()
    width = 24
    print(fig.header("half / condition", width))
    keys = list(dict.fromkeys((o.half, o.condition) for o in outcomes))
    for key in keys:
        group = [o for o in outcomes if (o.half, o.condition) == key]
        seconds, answers = cpu.get(key, (0.0, 0))
        per_turn = seconds / answers if answers else None
        print(fig.row(" ".join(key), width, fig.summarize(group), per_turn))
    print()
    width = 44
    print(fig.header("half / condition / voice", width))
    for key in keys:
        group = [o for o in outcomes if (o.half, o.condition) == key]
        for voice in dict.fromkeys(o.voice for o in group):
            mine = [o for o in group if o.voice == voice]
            print(fig.row(f"{key[0]} {key[1]} {voice}", width, fig.summarize(mine), None))
    total_cpu = sum(s for s, _ in cpu.values())
    total_answers = sum(n for _, n in cpu.values())
    if total_answers:
        print(
            f"\nserver CPU: {total_cpu:.1f} s for {total_answers} answers played: "
            f"{total_cpu / total_answers:.2f} CPU s per answered turn"
        )


# ----------------------------------------------------------------------- main


Work = tuple[Half, str, list[audio.Clip], audio.Clip, list[np.ndarray]]


async def build_work(
    halves: list[Half],
    wanted: set[str] | None,
    conditions: list[str],
    limit: int | None,
    noise_voices: int,
    reply_s: float,
    say: Callable[[str], None],
    kinds: set[str] | None = None,
) -> tuple[list[Work], float]:
    """Every run (one connection per half and condition) and the estimated seconds."""
    work: list[Work] = []
    estimate = 0.0
    for half in halves:
        voices = voices_of(half, wanted)
        if not voices:
            continue
        clips, warm = await plan(half, voices, limit, kinds)
        sources = [c.lead for c in clips if c.lead is not None]
        noisy = {v.id for v in voices[:noise_voices]}
        for condition in conditions:
            mine = clips
            if condition.startswith("noise-") and len(voices) > noise_voices:
                mine = [c for c in clips if c.voice.id in noisy]
                say(f"{half.name} {condition}: only the voices {', '.join(sorted(noisy))}")
            estimate += sum(clip_seconds(c, reply_s) for c in (warm, *mine)) + 3.0
            work.append((half, condition, mine, warm, sources))
    return work, estimate


async def bench(args: argparse.Namespace) -> tuple[list[fig.Outcome], dict[str, Any]]:
    halves = [HALVES[h] for h in (("tuning", "held-out") if args.half == "both" else (args.half,))]
    wanted = set(args.voices.split(",")) if args.voices else None
    conditions = [c for c in args.conditions.split(",") if c]
    for c in conditions:
        if c not in CONDITIONS:
            raise SystemExit(f"unknown condition {c!r} (one of {', '.join(CONDITIONS)})")
    log("synthesizing the panel (cached under bench/.cache/conversation/) ...")
    reply_s = (await audio.speak(Voice("piper-joe", "piper", ""), REPLY)).size / audio.RATE
    kinds = set(args.kinds.split(",")) if args.kinds else None
    for kind in kinds or ():
        if kind not in KINDS:
            raise SystemExit(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    work, estimate = await build_work(
        halves, wanted, conditions, args.limit, args.noise_voices, reply_s, log, kinds
    )
    _, full = await build_work(
        list(HALVES.values()), None, list(CONDITIONS), None, 2, reply_s, lambda _: None
    )
    await audio.close_voices()
    n = sum(len(w[2]) for w in work)
    log(
        f"{n} utterances in {len(work)} runs: about {estimate / 60:.1f} min in real time "
        f"(the full run, make bench-conversation: about {full / 60:.0f} min)"
    )
    server = Server(args.port)
    outcomes: list[fig.Outcome] = []
    cpu: dict[tuple[str, str], tuple[float, int]] = {}
    started = time.perf_counter()
    try:
        log(f"starting rejoinder serve on 127.0.0.1:{server.port} (loading the models) ...")
        await server.wait_up()
        for half, condition, clips, warm, sources in work:
            noise = room_noise(condition, half, sources)
            result, seconds, answers = await run_condition(
                server, half, condition, clips, warm, noise, log
            )
            outcomes += result
            cpu[(half.name, condition)] = (seconds, answers)
    except Exception:
        log(f"the server's log ends with:\n{server.tail()}")
        raise
    finally:
        server.stop()
    meta = {
        "reply_seconds": round(reply_s, 2),
        "snr_db": SNR_DB,
        "noise_voices": args.noise_voices,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "estimated_seconds": round(estimate, 1),
        "cpu": {f"{h} {c}": {"seconds": s, "answers": a} for (h, c), (s, a) in cpu.items()},
    }
    print_tables(outcomes, cpu)
    return outcomes, meta


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--half", choices=("tuning", "held-out", "both"), default="both")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--voices", help="voice ids, comma-separated (default: all installed)")
    parser.add_argument("--limit", type=int, help="utterances per voice")
    parser.add_argument(
        "--kinds", help=f"only these kinds of utterance, comma-separated ({', '.join(KINDS)})"
    )
    parser.add_argument(
        "--noise-voices", type=int, default=2, help="voices per half that run in noise"
    )
    parser.add_argument("--port", type=int, help="the server's port (default: a free one)")
    parser.add_argument("--json", help="write every outcome here")
    args = parser.parse_args()
    outcomes, meta = asyncio.run(bench(args))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "outcomes": [o.as_json() for o in outcomes]}, f, indent=1)
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
