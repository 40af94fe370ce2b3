"""Running the conversation benchmark: the server process, one condition's connection,
and the steps of one utterance.

One utterance at a time, over one ``/ws`` connection per half and condition. Before each
the client waits until nobody talks (the agent ``listening``, the user ``listening``, the
speaker empty) for ``GAP`` s. A command, question or two-part utterance is said, then the
client waits for the answer to be played out. A barge-in item first says its ``lead``,
waits for the answer to start playing, and ``offset`` s later says the clip over it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _conversation_audio import Clip
from _conversation_client import Client
from _conversation_figures import (
    MISS_AFTER,
    Outcome,
    event_dicts,
    judge_barge_in,
    judge_speech,
)
from _served import ServedProcess
from panel.panel import BARGE_IN_KINDS
from ws_cost import free_port, proc_cpu

AGENT = Path(__file__).resolve().parent / "conversation_agent.py"
GAP = 1.0
SETTLE_LIMIT = 45.0  # an utterance never takes longer than this to be over
LISTEN_AFTER = 2.5  # after a barge-in clip: long enough for a pause or a late answer
LEAD_WAIT = 12.0  # the lead only sets a barge-in up: its answer may be slow
TRANSCRIPT_WAIT = 8.0  # how long after a clip its final transcript may still come
NOISE_HOLD = 4.0


class Server(ServedProcess):
    """``rejoinder serve bench/conversation_agent.py`` in its own process."""

    def __init__(self, port: int | None) -> None:
        port = port or free_port()
        exe = Path(sys.executable).parent / "rejoinder"
        command = [str(exe), "serve", str(AGENT), "--host", "127.0.0.1"]
        command += ["--port", str(port), "--drain-timeout", "2"]
        super().__init__(command, port, log_prefix="conversation_server_")

    async def wait_up(self, within: float = 180.0, poll: float = 0.3) -> None:
        await super().wait_up(within, poll)  # the speech models load first

    def cpu(self) -> float:
        """CPU seconds (user + system, every thread) of the server so far."""
        return sum(proc_cpu(f"/proc/{self.proc.pid}/stat"))

    def tail(self, chars: int = 3000) -> str:
        return super().tail(chars)


async def settle(client: Client, not_before: float) -> bool:
    """Wait until nobody has talked for ``GAP`` s and it is ``not_before``; False if that
    did not happen within ``SETTLE_LIMIT``. Noise can hold the VAD open (babble is
    speech): once the agent alone has been quiet for ``NOISE_HOLD`` s, a user still
    "speaking" is taken for the room."""
    deadline = time.perf_counter() + SETTLE_LIMIT
    quiet_since: float | None = None
    agent_quiet_since: float | None = None
    while (now := time.perf_counter()) < deadline and not client.closed:
        agent_quiet_since = (agent_quiet_since or now) if client.agent_quiet() else None
        held_open = agent_quiet_since is not None and now - agent_quiet_since >= NOISE_HOLD
        if client.idle() or held_open:
            quiet_since = quiet_since or now
            if now - quiet_since >= GAP and now >= not_before:
                return True
        else:
            quiet_since = None
        await asyncio.sleep(0.02)
    return False


@dataclass
class Spoken:
    """A clip ready for one connection: its audio at the connection's rate."""

    clip: Clip
    pcm: np.ndarray
    lead: np.ndarray | None


async def run_item(client: Client, s: Spoken, out: Outcome) -> Outcome:
    clip = s.clip
    if not await settle(client, time.perf_counter()):
        out.valid, out.note = False, "the agent never went quiet before it"
        return out
    if clip.item.kind in BARGE_IN_KINDS:
        return await _barge_in(client, s, out)
    mark = len(client.log)
    _, done = client.say(s.pcm)
    t0 = await done
    end = t0 + clip.end
    await _transcribed(client, mark, end + TRANSCRIPT_WAIT)
    await settle(client, end + MISS_AFTER)
    events = client.log[mark:]
    second = t0 + clip.second_onset if clip.second_onset is not None else None
    judge_speech(out, events, end, second)
    out.events = event_dicts(events, t0)
    return out


async def _barge_in(client: Client, s: Spoken, out: Outcome) -> Outcome:
    clip = s.clip
    assert s.lead is not None
    mark = len(client.log)
    _, done = client.say(s.lead)
    t_lead = await done
    lead_end = t_lead + clip.lead_end
    answer = await _first_play(client, mark, lead_end + LEAD_WAIT)
    if answer is None:
        out.valid, out.note = False, "the lead was not answered"
        await settle(client, time.perf_counter())
        return out
    await asyncio.sleep(max(0.0, answer + clip.item.offset - time.perf_counter()))
    # The agent has to be audible when the clip starts, or it is not a barge-in.
    audible = client.playing and client.agent_state == "speaking"
    mark = len(client.log)
    _, done = client.say(s.pcm)
    t0 = await done
    if not audible:
        out.valid, out.note = False, "the agent was not speaking when the clip started"
    if clip.item.reference:  # sounds without words may never be transcribed
        await _transcribed(client, mark, t0 + clip.end + TRANSCRIPT_WAIT)
    await settle(client, t0 + clip.end + LISTEN_AFTER)
    events = client.log[mark:]
    judge_barge_in(out, events, t0 + clip.onset, t0 + clip.end)
    out.events = event_dicts(client.log[mark:], t0)
    return out


async def _first_play(client: Client, mark: int, deadline: float) -> float | None:
    while time.perf_counter() < deadline and not client.closed:
        for e in client.log[mark:]:
            if e.kind == "play_start":
                return e.t
        await asyncio.sleep(0.02)
    return None


async def _transcribed(client: Client, mark: int, deadline: float) -> None:
    """Wait (until ``deadline``) for the recognition of everything said after ``mark``:
    a final user transcript for each utterance the VAD ended, or the agent thinking
    after the last one (it committed the turn with its transcript). A slow recognition is
    then counted with its own utterance, not the next one's."""
    while time.perf_counter() < deadline and not client.closed:
        ends = finals = 0
        answered = False
        for e in client.log[mark:]:
            if e.kind == "user_state" and e.data.get("state") == "listening":
                ends += 1
                answered = False
            elif e.kind == "transcript" and e.data.get("role") == "user" and e.data.get("final"):
                finals += 1
            elif e.kind == "agent_state" and e.data.get("state") == "thinking":
                answered = True
        if ends and client.user_state != "speaking" and (finals >= ends or answered):
            return
        await asyncio.sleep(0.02)
