"""Turn latency: time from ``generate_reply`` to the first output (a text delta at the
sink, or with ``--audio`` the first audio frame at the output), and to the awaited handle
resolving, for one session on the real clock. Also CPU milliseconds per measured turn.

    python bench/turn_latency.py [--turns 300] [--warmup 30] [--audio]
    python bench/turn_latency.py --voice [--turns 24] [--warmup 2]

With ``--audio`` a zero-latency TTS returns 0.5 s of 24 kHz audio per sentence as 20 ms
frames (the reply is two sentences: 1 s, 50 frames) into an output that accepts frames
instantly.

With ``--voice`` the user speaks: the offline stack with its shipped defaults (Silero
VAD, Whisper tiny.en, Piper) hears requests spoken by Piper from a microphone paced on
the real clock, the zero-latency model answers, and the time runs from the end of the
user's speech to the first agent audio frame at an output that accepts frames instantly
(in process; ``bench/voice_latency_ws.py`` measures the same through the WebSocket
transport). Reports every step from the end of speech and the word error of the
transcripts.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from typing import Any

import rejoinder as rj
from _fakes import (
    InstantLLM,
    InstantSink,
    InstantTTS,
    clear_context,
    instant_audio_output,
    summary_ms,
)


async def bench(turns: int, warmup: int, audio: bool) -> dict[str, object]:
    tts = InstantTTS() if audio else None
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=InstantLLM(), tts=tts, user_away_timeout=None
    )
    sink = InstantSink()
    session.output.transcription = None if audio else sink
    output = instant_audio_output() if audio else None
    session.output.audio = output
    await session.start(rj.Agent(instructions="You are a helpful assistant."))
    first_output: list[float] = []
    turn_done: list[float] = []
    cpu = 0.0
    try:
        for i in range(warmup + turns):
            # Outside the timed region: empty the agent's context and the session history,
            # so turn 330 sees the same context size as turn 1 (otherwise the context, and
            # the copy of it each reply builds, would grow without bound and skew results).
            clear_context(session)
            sink.reset()
            if output is not None:
                output.first_frame_at = None  # type: ignore[attr-defined]
            c0 = time.process_time()
            t0 = time.perf_counter()
            handle = session.generate_reply(user_input="hi")
            await handle
            t1 = time.perf_counter()
            c1 = time.process_time()
            first = (
                output.first_frame_at  # type: ignore[attr-defined]
                if output is not None
                else sink.first_delta_at
            )
            if first is None:
                raise RuntimeError(f"turn {i} produced no output")
            if i >= warmup:
                first_output.append(first - t0)
                turn_done.append(t1 - t0)
                cpu += c1 - c0
    finally:
        await session.aclose()
    return {
        "bench": "turn_latency_audio" if audio else "turn_latency",
        "turns": turns,
        "cpu_ms_per_turn": round(cpu / turns * 1000, 4),
        "first_output_ms": summary_ms(first_output),
        "turn_done_ms": summary_ms(turn_done),
    }


async def bench_voice(turns: int, warmup: int, overrides: dict[str, Any]) -> dict[str, object]:
    from _voice import (
        InstantOutput,
        LoopLag,
        PacedMic,
        Probe,
        TimedSTT,
        TimedTTS,
        clips,
        offline_stack,
        summary,
    )

    spoken = await clips()
    stack = await offline_stack(overrides.pop("vad_silence", None))
    probe = Probe()
    mic = PacedMic()
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=InstantLLM(),
        vad=stack.vad,
        stt=TimedSTT(stack.stt, probe),
        tts=TimedTTS(stack.tts, probe),
        user_away_timeout=None,
        **overrides,
    )
    session.input.audio = mic
    session.output.audio = InstantOutput(probe, stack.tts.sample_rate)
    probe.attach(session)
    await session.start(rj.Agent(instructions="You are a helpful assistant."))
    measured = []
    lag = LoopLag()
    lag.start()
    try:
        await asyncio.sleep(1.0)
        for i in range(warmup + turns):
            clip = spoken[i % len(spoken)]
            clear_context(session)
            turn = probe.start(clip.text)
            turn.speech_end = await mic.play(clip)
            await asyncio.wait_for(probe.finished.wait(), 20)
            await asyncio.sleep(1.0)  # silence between requests
            if i >= warmup:
                measured.append(turn)
    finally:
        mic.close()
        await session.aclose()
    return {
        "bench": "turn_latency_voice",
        **summary(measured, "server_audio"),
        "event_loop_lag_ms": lag.stop(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--audio", action="store_true", help="speak through a TTS")
    parser.add_argument("--voice", action="store_true", help="the user speaks (offline stack)")
    if "--voice" in sys.argv:
        from _voice import add_what_if_options

        add_what_if_options(parser)
    args = parser.parse_args()
    gc.collect()
    if args.voice:
        turns = args.turns if args.turns != 300 else len(__import__("_voice").REQUESTS)
        warmup = args.warmup if args.warmup != 30 else 2
        from _voice import what_if

        result = asyncio.run(bench_voice(turns, warmup, what_if(args)))
    else:
        result = asyncio.run(bench(args.turns, args.warmup, args.audio))
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
