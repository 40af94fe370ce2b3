"""An appointment reminder the agent phones out: who answered decides what it says.

    .venv/bin/python examples/outbound_reminder.py      # offline: an answering machine

On a real call, serve ``entrypoint`` for the provider's media stream (``rejoinder serve
examples/outbound_reminder.py --telephony twilio``) and place calls with
``rejoinder.io.telephony.outbound.dial(...)``. Each answered call gets a session with
answering detection on its audio (``detect_answered_by``, before the session starts);
the provider's own detection, when it was asked for, arrives as ``answered_by`` events
too. The agent waits at most three seconds for the answer, then:

- a person (``human``), or nothing known in time (``unknown``): it greets them and talks;
- a machine: ``LeaveVoicemail`` waits for the beep (at most ``beep_timeout``, then for
  the greeting to go quiet), says the message, which the greeting's tail cannot cut, and
  hangs up once it was heard;
- a screening assistant (iOS, Pixel's Call Screen): it says who is calling and why, then
  talks with whoever comes on. A screening assistant sounds like a machine before its
  words are recognized: ``LeaveVoicemail`` then returns ``screening`` without a word.

Offline, the "call" is a synthesized answering machine (a greeting of syllable-like
bursts, then a 1 kHz beep) played into the session's microphone at 8 kHz, with scripted
models; it prints what was detected, when the message started (after the beep) and why
the call ended. It runs in real time: about ten seconds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import rejoinder as rj
from rejoinder.io import Connection

CLINIC = "Doctor Lee's office"
MESSAGE = (
    f"Hi, this is {CLINIC} with a reminder of your appointment tomorrow at ten. "
    "Please call us back if you need to change it. Goodbye."
)


class Reminder(rj.Agent):
    instructions = (
        f"You call patients for {CLINIC} to confirm tomorrow's appointment at ten. Be "
        "brief and friendly; offer to reschedule."
    )

    def __init__(self) -> None:
        super().__init__()
        self.answered_by: str | None = None

    async def on_enter(self) -> None:
        kind = await rj.wait_answered_by(self.session, timeout=3.0)
        self.answered_by = kind
        if kind == "machine":
            voicemail = await rj.LeaveVoicemail(MESSAGE, beep_timeout=10.0)
            if voicemail.outcome != "screening":
                return  # left (and hung up), or the call ended first
            kind = "screening"
        if kind == "screening":
            self.session.say(f"This is {CLINIC}, calling about tomorrow's appointment.")
        else:
            self.session.say(f"Hi, this is {CLINIC}. I'm calling about your appointment.")

    async def on_user_turn_completed(
        self, turn_ctx: rj.ChatContext, new_message: rj.ChatMessage
    ) -> None:
        if self.answered_by is None:
            raise rj.StopResponse  # who is talking is not known yet: no reply to a greeting


async def entrypoint(conn: Connection) -> None:
    """One answered call (the provider's media stream)."""
    from rejoinder.providers import local

    session: rj.AgentSession[None] = rj.AgentSession(
        llm=_llm(), **local.voice_session_options(), user_away_timeout=None
    )
    rj.detect_answered_by(session)
    await conn.serve(session, Reminder())


def _llm() -> rj.LLM:
    import os

    model = os.environ.get("REJOINDER_LLM", "").strip()
    if not model:
        from rejoinder.demo import DemoLLM

        return DemoLLM(spoken=True)
    from rejoinder.providers.registry import llm_from_name

    return llm_from_name(model)


# ------------------------------------------------------------------ offline


RATE = 8000


def answering_machine(seed: int = 1) -> np.ndarray:
    """A greeting of syllable-like bursts (about 4 s, pitch gliding), a pause, a beep."""
    rng = np.random.default_rng(seed)
    parts: list[np.ndarray] = [np.zeros(int(0.3 * RATE))]
    said = 0.0
    while said < 4.0:
        length = rng.uniform(0.12, 0.26)
        t = np.arange(int(length * RATE)) / RATE
        pitch = rng.uniform(110, 170) * (1 + 0.2 * t)
        voice = sum(np.sin(2 * np.pi * k * np.cumsum(pitch) / RATE) / k for k in range(1, 12))
        parts += [0.08 * voice * np.sin(np.pi * t / length), np.zeros(int(0.06 * RATE))]
        said += length + 0.06
    parts.append(np.zeros(int(0.5 * RATE)))
    t = np.arange(int(0.4 * RATE)) / RATE
    parts += [0.2 * np.sin(2 * np.pi * 1000 * t), np.zeros(int(12 * RATE))]
    audio = np.concatenate(parts) + rng.normal(0, 0.002, sum(p.shape[0] for p in parts))
    return (audio * 32767).astype(np.int16)


async def run_offline() -> dict[str, Any]:
    """The reminder calls a synthesized answering machine; returns what happened."""
    from rejoinder.testing import (
        MemoryAudioInput,
        MemoryAudioOutput,
        ScriptedLLM,
        ScriptedSTT,
        ScriptedTTS,
        ScriptedVAD,
    )

    loop = asyncio.get_running_loop()
    line = MemoryAudioInput(RATE)
    speaker = MemoryAudioOutput(24000)
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=ScriptedLLM([]),  # nobody to talk with: the machine gets only the message
        stt=ScriptedSTT(["you have reached the voicemail of Sam, please leave a message"]),
        tts=ScriptedTTS(seconds_per_char=0.03),
        vad=ScriptedVAD(),
        user_away_timeout=None,
    )
    session.input.audio, session.output.audio = line, speaker
    rj.detect_answered_by(session)
    seen: dict[str, Any] = {"events": [], "spoke_at": None}
    answered = loop.time()
    session.on(
        "answered_by",
        lambda e: seen["events"].append(
            (round(e.created_at - answered, 2), e.answered_by, e.source, e.beep, e.detail)
        ),
    )
    session.on(
        "agent_state_changed",
        lambda e: (
            seen.update(spoke_at=round(e.created_at - answered, 2))
            if e.new_state == "speaking" and seen["spoke_at"] is None
            else None
        ),
    )
    ended: asyncio.Future[str] = loop.create_future()
    session.on("close", lambda e: ended.done() or ended.set_result(e.reason))
    playing = asyncio.ensure_future(line.push_pcm(answering_machine().tobytes()))
    starting = asyncio.ensure_future(session.start(Reminder()))  # its on_enter waits
    try:
        seen["ended"] = await asyncio.wait_for(ended, 30.0)
    finally:
        playing.cancel()
        await session.aclose()
        await asyncio.wait((starting,), timeout=5.0)
    seen["ended_at"] = round(loop.time() - answered, 2)
    return seen


async def main() -> None:
    import logging

    logging.getLogger("rejoinder").setLevel(logging.ERROR)  # the demo prints what matters
    seen = await run_offline()
    for at, kind, source, beep, detail in seen["events"]:
        print(f"{at:5.2f} s  answered_by {kind} ({source}){' beep' if beep else ''}: {detail}")
    print(f"{seen['spoke_at']:5.2f} s  the voicemail message starts")
    print(f"{seen['ended_at']:5.2f} s  the call ends: {seen['ended']}")


if __name__ == "__main__":
    asyncio.run(main())
