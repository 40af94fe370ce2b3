"""Audio filters against false interruptions: does cleaning the caller's audio keep the
agent from interrupting itself on its own echo or on a room's babble, and does it still
let a real interruption through?

Each trial is a whole session (``rj.AgentSession``) on a virtual-time loop, with the real
offline VAD (``local.SileroVAD(min_silence_duration=0.2)``, the shipped setting) and the
session's own interruption rule (``--rule duration``: 0.5 s of the user's speech over an
audible reply interrupts it; ``--rule onset``: the shipped ``OnsetInterruptionDetector``
with Whisper tiny.en, whose work runs in a thread while the virtual clock may move on, so
its latencies leave recognition time partly out). The agent greets, and 1 s after its
greeting says one of its lines (synthesized by Piper or eSpeak NG): the line is measured,
mid-conversation. It plays
through ``RoomSpeaker``, a speaker that cannot pause (as every server transport), plays
0-0.5 s after it took the audio (a client's jitter buffer) and reports the start of
playback 0-100 ms after that (a WebSocket client's ``played`` reports); the microphone
(``RoomMicrophone``) hears, at 16 kHz, from the session's start:

- ``echo``: the agent's own voice back through an echo path (30-120 ms, -10 to -25 dB, a
  small speaker's missing bass, a reverberant tail), over a -60 dBFS noise floor. A false
  interruption is the line interrupted (by the duration rule, or by a "turn" the room
  made that ended while it played: the scripted recognizer makes "okay" of anything, as
  Whisper makes words of most sounds); a VAD onset is the user reported ``speaking``
  while the line played;
- ``babble``: four other people talking at once (other sentences, other voices) at -48
  to -36 dBFS (the user's speech is at -23: 13-25 dB below it), no echo;
- ``barge-in+echo`` / ``barge-in+babble``: the same, and the user says an interruption
  ("wait, stop", "no, I said Friday") 1-2 s into the reply: kept is the reply
  interrupted, latency from the user's first sound to the speaker's stop.

Each is run with no filter, with RNNoise, with WebRTC's noise suppressor, with WebRTC's
AEC3, and with AEC3 then RNNoise (``--configs``). Echo reduction: the microphone's energy
before the chain against after it, over the whole trial (in the echo trials that is the
echo). CPU: the filters' own, per second of audio, on the loop's thread.

Two splits, with different agent lines, voices, interruptions, babble, echo paths and
report lags. ``tuning`` is what the filters' settings (the reference's lead, the chain's
order, the resampling quality) were chosen on; ``held-out`` was not looked at until the
settings were fixed, and its figures are the ones to quote.

    .venv/bin/python bench/audio_filters.py [--split held-out|tuning|both] [--rule duration]
        [--configs none,rnnoise,webrtc-ns,aec,aec+rnnoise] [--limit N]

Needs the local extra (Silero, Piper, eSpeak NG), pywebrtc-audio and pyrnnoise. About 5
minutes a split on a 2-core VM (the duration rule).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import rejoinder as rj
from _audio_filters_room import FRAME, RATE, EchoPath, Room, RoomMicrophone, RoomSpeaker
from _conversation_audio import babble, close_voices, normalized, onset_end, speak
from panel import HELD_OUT as PANEL_HELD_OUT
from panel import TUNING as PANEL_TUNING
from panel import Half, Voice
from rejoinder.audio_filters import (
    AudioFilter,
    RNNoiseSuppressor,
    WebRTCEchoCanceller,
    WebRTCNoiseSuppressor,
    filter_audio,
)
from rejoinder.models.audio import PCM16, AudioFrame
from rejoinder.simulate.clock import new_virtual_loop
from rejoinder.testing import ScriptedLLM, ScriptedSTT

GREETING_AT = 0.5  # the agent greets this long into the trial (the room sounds from 0)
GAP = 1.0  # then, this long after its greeting, says the measured line
NOISE_FLOOR_DBFS = -60.0

CONFIGS: dict[str, Callable[[], list[AudioFilter]]] = {
    "none": lambda: [],
    "rnnoise": lambda: [RNNoiseSuppressor()],
    "webrtc-ns": lambda: [WebRTCNoiseSuppressor()],
    "aec": lambda: [WebRTCEchoCanceller()],
    "aec+rnnoise": lambda: [WebRTCEchoCanceller(), RNNoiseSuppressor()],
}


@dataclass(frozen=True)
class Split:
    name: str
    agent_voices: tuple[Voice, ...]
    agent_lines: tuple[str, ...]
    greeting: str  # said first, so that the measured line comes mid-conversation
    user_voices: tuple[Voice, ...]
    panel: Half  # its interruptions, and its commands and questions as babble
    babble_voices: tuple[Voice, ...]
    echoes: tuple[EchoPath, ...]
    babble_dbfs: tuple[float, ...]
    report_lags: tuple[float, ...]
    play_delays: tuple[float, ...]  # a client's jitter buffer: it plays this much later
    seed: int


TUNING = Split(
    "tuning",
    agent_voices=(Voice("piper-joe", "piper", ""), Voice("espeak-en-us", "espeak", "en-us")),
    agent_lines=(
        "Our opening hours are from nine in the morning until six in the evening, every "
        "day except Sunday.",
        "The booking works in three steps: choose a date, pick a table, and confirm with "
        "your email address.",
        "Today will be mostly sunny, with a light breeze from the west and a high of "
        "twenty two degrees.",
        "I can help you with reservations, opening times, directions to the restaurant and "
        "our seasonal menu.",
    ),
    greeting="Hello, thanks for calling the restaurant. How can I help you today?",
    user_voices=(
        Voice("espeak-en+f3", "espeak", "en+f3"),
        Voice("espeak-en-us", "espeak", "en-us"),
    ),
    panel=PANEL_TUNING,
    babble_voices=(
        Voice("espeak-en-us", "espeak", "en-us"),
        Voice("espeak-en+f3", "espeak", "en+f3"),
        Voice("piper-joe", "piper", ""),
    ),
    echoes=(
        EchoPath(30, -10, rt60=0.2, seed=1),
        EchoPath(60, -15, rt60=0.3, seed=2),
        EchoPath(90, -20, rt60=0.25, seed=3),
    ),
    babble_dbfs=(-45.0, -38.0),
    report_lags=(0.0, 0.05),
    play_delays=(0.0, 0.08, 0.3),
    seed=11,
)

HELD_OUT = Split(
    "held-out",
    agent_voices=(Voice("piper-joe", "piper", ""), Voice("espeak-en-us+m7", "espeak", "en-us+m7")),
    agent_lines=(
        "The loyalty program gives you one point for every dollar you spend, and a free "
        "dessert at fifty points.",
        "For the mountains, pack warm layers, a rain jacket, sturdy boots and a water bottle "
        "you can refill.",
        "Tonight's menu starts with a tomato soup, then grilled salmon or a mushroom "
        "risotto, and a lemon tart.",
        "To check out, review your basket, enter your delivery address, choose a payment "
        "method and confirm.",
    ),
    greeting="Good evening, you are through to the shop. What can I do for you?",
    user_voices=(
        Voice("espeak-en-gb-scotland", "espeak", "en-gb-scotland"),
        Voice("espeak-en+f4", "espeak", "en+f4"),
    ),
    panel=PANEL_HELD_OUT,
    babble_voices=(
        Voice("espeak-en-gb-scotland", "espeak", "en-gb-scotland"),
        Voice("espeak-en-us+m7", "espeak", "en-us+m7"),
        Voice("espeak-en+f4", "espeak", "en+f4"),
    ),
    echoes=(
        EchoPath(45, -12, rt60=0.35, seed=21),
        EchoPath(80, -18, rt60=0.2, seed=22),
        EchoPath(120, -25, rt60=0.3, seed=23),
    ),
    babble_dbfs=(-48.0, -42.0, -36.0),
    report_lags=(0.02, 0.08, 0.1),
    play_delays=(0.03, 0.15, 0.5),
    seed=77,
)

SPLITS = {s.name: s for s in (TUNING, HELD_OUT)}


@dataclass
class Trial:
    kind: str  # echo, babble, barge-in+echo, barge-in+babble
    agent: tuple[np.ndarray, np.ndarray]  # the greeting, then the measured line
    echo: EchoPath | None
    babble_dbfs: float | None
    report_lag: float
    play_delay: float
    seed: int
    user: np.ndarray | None = None
    user_at: float = 0.0  # seconds after the agent's start when the user's first sound is
    user_onset: float = 0.0  # seconds into the user's clip of its first sound


@dataclass
class Outcome:
    interrupted: bool
    onsets: int
    latency: float | None
    energy_in: float
    energy_out: float
    cpu: float
    audio: float


@dataclass
class Material:
    agents: list[tuple[np.ndarray, np.ndarray]]  # (greeting, line) in one voice
    users: list[np.ndarray]
    babble_sources: list[np.ndarray]


async def material(split: Split) -> Material:
    agents = [
        (normalized(await speak(voice, split.greeting)), normalized(await speak(voice, line)))
        for voice in split.agent_voices
        for line in split.agent_lines
    ]
    interrupts = [i.parts[0] for i in split.panel.items if i.kind == "interrupt"]
    users = [normalized(await speak(v, text)) for v in split.user_voices for text in interrupts]
    talk = [i.parts[0] for i in split.panel.items if i.kind in ("command", "question")]
    sources = [normalized(await speak(v, text)) for v in split.babble_voices for text in talk]
    return Material(agents, users, sources)


def trials(split: Split, stuff: Material, limit: int | None) -> list[Trial]:
    """Every agent line in every echo path (and every babble level); every interruption
    once over echo and once over babble, over the agent lines in rotation."""
    out: list[Trial] = []
    n = 0
    for a, agent in enumerate(stuff.agents):
        for e, echo in enumerate(split.echoes):
            lag = split.report_lags[(a + e) % len(split.report_lags)]
            buffer = split.play_delays[(a + 2 * e) % len(split.play_delays)]
            out.append(Trial("echo", agent, echo, None, lag, buffer, split.seed + n))
            n += 1
        for b, level in enumerate(split.babble_dbfs):
            lag = split.report_lags[(a + b) % len(split.report_lags)]
            buffer = split.play_delays[(a + 2 * b) % len(split.play_delays)]
            out.append(Trial("babble", agent, None, level, lag, buffer, split.seed + n))
            n += 1
    for u, user in enumerate(stuff.users):
        agent = stuff.agents[u % len(stuff.agents)]
        onset, _ = onset_end(user)
        at = 1.0 + (u % 5) * 0.25
        echo = split.echoes[u % len(split.echoes)]
        level = split.babble_dbfs[u % len(split.babble_dbfs)]
        lag = split.report_lags[u % len(split.report_lags)]
        buffer = split.play_delays[(u // 2) % len(split.play_delays)]
        seed = split.seed + n
        out.append(Trial("barge-in+echo", agent, echo, None, lag, buffer, seed, user, at, onset))
        out.append(
            Trial("barge-in+babble", agent, None, level, lag, buffer, seed + 1, user, at, onset)
        )
        n += 2
    if limit is not None:
        kinds = sorted({t.kind for t in out})
        out = [t for k in kinds for t in [t for t in out if t.kind == k][:limit]]
    return out


class CannedTTS(rj.TTS):
    """Says ``clips[text]`` once; anything else (a reply to a turn the room made up) is
    0.2 s of silence."""

    def __init__(self, clips: dict[str, np.ndarray]) -> None:
        super().__init__(sample_rate=RATE)
        self.clips = dict(clips)

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame]:
        pcm = self.clips.pop(text.strip(), None)
        if pcm is None:
            pcm = np.zeros(RATE // 5, np.int16)
        for i in range(0, pcm.size, FRAME):
            yield AudioFrame(pcm[i : i + FRAME], RATE)


class Meter(AudioFilter):
    """Passes audio on and adds up its energy."""

    def __init__(self) -> None:
        self.energy = 0.0

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        data = frame.data.astype(np.float64)
        self.energy += float(np.sum(data * data))
        return frame


def _scaled(noise: np.ndarray, dbfs: float) -> np.ndarray:
    return noise * 32768 * 10 ** (dbfs / 20) / max(float(np.sqrt(np.mean(noise**2))), 1e-9)


async def run_trial(trial: Trial, config: str, rule: str, stuff: Material) -> Outcome:
    from rejoinder.providers.local import OnsetInterruptionDetector, SileroVAD

    greeting, line = trial.agent
    line_at = GREETING_AT + greeting.size / RATE + GAP
    seconds = line_at + line.size / RATE + 3.0
    loop = asyncio.get_running_loop()
    room = Room(seconds, trial.echo, origin=loop.time())
    rng = np.random.default_rng(trial.seed)
    room.add_near(_scaled(rng.standard_normal(room.near.size), NOISE_FLOOR_DBFS), 0.0)
    if trial.babble_dbfs is not None:
        mix = babble(stuff.babble_sources, seconds + 1, trial.seed)
        room.add_near(_scaled(mix, trial.babble_dbfs), 0.0)
    if trial.user is not None:
        heard_at = line_at + trial.play_delay  # when the listener hears the line begin
        room.add_near(trial.user, heard_at + trial.user_at - trial.user_onset)
    speaker, mic = RoomSpeaker(room, trial.report_lag, trial.play_delay), RoomMicrophone(room)
    options: dict[str, Any] = {}
    if rule == "onset":
        options["interruption_detection"] = OnsetInterruptionDetector()
        options["stt"] = _whisper()
    else:
        options["stt"] = ScriptedSTT(["okay"] * 20)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Okay."]] * 20),
        tts=CannedTTS({"greeting": greeting, "line": line}),
        vad=SileroVAD(min_silence_duration=0.2),
        user_away_timeout=None,
        **options,
    )
    session.input.audio, session.output.audio = mic, speaker
    before, after = Meter(), Meter()
    chain = filter_audio(session, [before, *CONFIGS[config](), after], in_thread=False)
    onsets = 0
    measuring = False

    def user_state(event: Any) -> None:
        nonlocal onsets
        onsets += measuring and event.new_state == "speaking"

    session.on("user_state_changed", user_state)
    await session.start(rj.Agent(instructions="bench"))

    async def until(at: float) -> None:
        await asyncio.sleep(max(0.0, room.origin + at - loop.time()))

    await until(GREETING_AT)
    await _bounded(session.say("greeting"), greeting.size / RATE + 2.0)
    await until(line_at)
    measuring = True
    handle = session.say("line")
    await _bounded(handle, line.size / RATE + 2.0)
    measuring = False
    interrupted = handle.interrupted
    latency = None
    if interrupted and trial.user is not None:
        start = room.origin + line_at + trial.play_delay
        cut = [t for t in speaker.cleared_at if t >= room.origin + line_at]
        if cut:
            latency = cut[0] - (start + trial.user_at)
    await asyncio.sleep(0.3)
    mic.close()
    await session.aclose()
    return Outcome(
        interrupted,
        onsets,
        latency,
        before.energy,
        after.energy,
        chain.cpu_seconds,
        chain.audio_seconds,
    )


async def _bounded(handle: Any, seconds: float) -> None:
    """Wait for a speech handle to be played or interrupted, at most ``seconds``."""

    async def done() -> None:
        await handle

    try:
        await asyncio.wait_for(done(), seconds)
    except TimeoutError:
        return


_stt: Any = None


def _whisper() -> Any:
    global _stt
    if _stt is None:
        from rejoinder.providers.local import WhisperSTT

        _stt = rj.shared(WhisperSTT())
    return _stt


# --------------------------------------------------------------------- reporting


def _db(x: float) -> str:
    return f"{x:5.1f} dB"


Results = dict[tuple[str, str], list[tuple[Trial, Outcome]]]


def report(split: Split, rule: str, results: Results) -> None:
    print(f"\n## {split.name} split, {rule} rule\n")
    print(
        "| scenario | filters | false interruptions | VAD onsets / trial | "
        "mic energy removed | real interruptions kept | latency p50 / max |"
    )
    print("|---|---|---|---|---|---|---|")
    for (kind, config), rows in results.items():
        n = len(rows)
        onsets = statistics.mean(o.onsets for _, o in rows)
        removed = 10 * np.log10(
            max(sum(o.energy_in for _, o in rows), 1.0)
            / max(sum(o.energy_out for _, o in rows), 1.0)
        )
        if kind.startswith("barge-in"):
            # Before the user's first sound, an interruption was the room's, not theirs.
            early = sum(o.latency is not None and o.latency < 0 for _, o in rows)
            lat = sorted(o.latency for _, o in rows if o.latency is not None and o.latency >= 0)
            latency = f"{statistics.median(lat):.2f} / {max(lat):.2f} s" if lat else "-"
            print(
                f"| {kind} | {config} | {early}/{n} | {onsets:.1f} | {_db(removed)} "
                f"| {len(lat)}/{n} | {latency} |"
            )
        else:
            hits = sum(o.interrupted for _, o in rows)
            print(f"| {kind} | {config} | {hits}/{n} | {onsets:.1f} | {_db(removed)} | - | - |")
    print("\n| filters | CPU ms per s of audio (the filters alone) |")
    print("|---|---|")
    configs = sorted({c for _, c in results}, key=list(CONFIGS).index)
    for config in configs:
        rows = [o for (k, c), r in results.items() if c == config for _, o in r]
        cpu = 1000 * sum(o.cpu for o in rows) / max(sum(o.audio for o in rows), 1e-9)
        print(f"| {config} | {cpu:.1f} |")


async def main_async(args: argparse.Namespace) -> None:
    splits = list(SPLITS.values()) if args.split == "both" else [SPLITS[args.split]]
    configs = args.configs.split(",")
    for config in configs:
        if config not in CONFIGS:
            raise SystemExit(f"unknown config {config!r} (known: {', '.join(CONFIGS)})")
    for split in splits:
        stuff = await material(split)
        plan = trials(split, stuff, args.limit)
        results: Results = {}
        started = time.monotonic()
        for kind in ("echo", "babble", "barge-in+echo", "barge-in+babble"):
            for config in configs:
                rows = results.setdefault((kind, config), [])
                for trial in (t for t in plan if t.kind == kind):
                    rows.append((trial, await run_trial(trial, config, args.rule, stuff)))
            print(
                f"{split.name}: {kind} done ({time.monotonic() - started:.0f} s)", file=sys.stderr
            )
        report(split, args.rule, results)
    await close_voices()
    await rj.close_shared()  # Whisper, for --rule onset: its threads stop before exit


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="held-out", choices=[*SPLITS, "both"])
    parser.add_argument("--rule", default="duration", choices=["duration", "onset"])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--limit", type=int, default=None, help="trials per scenario")
    args = parser.parse_args(argv)
    loop = new_virtual_loop()
    try:
        loop.run_until_complete(main_async(args))
    finally:
        loop.close()
    if args.rule == "onset":
        # Whisper's worker thread may still hold its CTranslate2 model when the interpreter
        # tears down, which aborts the process after everything was printed: end here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
