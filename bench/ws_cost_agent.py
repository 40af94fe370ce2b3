"""The agent ``bench/ws_cost.py`` serves with ``rejoinder serve``: one voice session per
WebSocket client, cheap everywhere except the VAD.

- VAD: Silero (``rejoinder.providers.local.SileroVAD``), one per session as in
  ``examples/voice_agent.py``: the real per-frame cost of listening. With
  ``REJOINDER_BENCH_VAD=energy``, the test kit's energy VAD instead (nearly free: what
  the rest costs).
- STT: the test kit's ``ScriptedSTT`` (no model): every utterance is heard as one request.
- LLM: ``_fakes.InstantLLM`` (zero latency, no state): "Sure. Here is the first sentence.
  And here is the second one."
- TTS: the test kit's ``ScriptedTTS`` at 24 kHz (a quiet tone, 0.05 s per character: 3 s
  of audio per reply, produced at once, as a fast TTS would).

``user_away_timeout`` is off, so a listening session stays listening however long it is
silent. With ``REJOINDER_BENCH_PROFILE=PATH`` in its environment the server process runs
cProfile on its event loop thread from the moment this file is loaded and writes the
statistics to PATH when it exits (``python -m pstats PATH``).
"""

from __future__ import annotations

import atexit
import cProfile
import os

import rejoinder as rj
from _fakes import InstantLLM
from rejoinder.io import Connection
from rejoinder.providers.local import SileroVAD
from rejoinder.testing import ScriptedSTT, ScriptedTTS, ScriptedVAD

TRANSCRIPT = "What's the weather like tomorrow?"
VAD_KIND = os.environ.get("REJOINDER_BENCH_VAD", "silero")

_profile_path = os.environ.get("REJOINDER_BENCH_PROFILE")
if _profile_path:
    _profiler = cProfile.Profile()
    _profiler.enable()

    def _dump() -> None:
        _profiler.disable()
        _profiler.dump_stats(_profile_path)

    atexit.register(_dump)


async def entrypoint(conn: Connection) -> None:
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=InstantLLM(),
        vad=ScriptedVAD() if VAD_KIND == "energy" else SileroVAD(),
        stt=ScriptedSTT(lambda seconds: TRANSCRIPT, interim_every=None),
        tts=ScriptedTTS(sample_rate=24000),
        user_away_timeout=None,
    )
    await conn.serve(session, rj.Agent(instructions="Answer in two short sentences."))
