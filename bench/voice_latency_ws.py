"""Voice latency through the WebSocket transport: end of the user's speech in the
microphone input → first agent audio the client played.

    python bench/voice_latency_ws.py [--turns 24] [--warmup 2] [--jitter 0] [--bare]

A server (``rejoinder.io.create_app``) on 127.0.0.1 runs the offline stack as shipped
(``local.voice_session_options()``: Silero VAD with 0.2 s of silence, Whisper tiny.en,
Smart Turn, Piper) and the zero-latency model of ``_fakes.py``; ``--bare`` runs Silero
with its own default silence (0.3 s) and no turn model, as this bench's numbers in
bench/README up to run 6 were measured. A real aiohttp client, in the same process,
streams requests spoken by Piper as a microphone would (16 kHz PCM16, a 20 ms frame
every 20 ms, silence in between), and plays the agent's audio on a simulated speaker
that consumes samples in real time and reports ``played`` every 50 ms, starting a burst
``--jitter`` seconds after its first frame arrives (0: at once). Between requests it
waits for the reply to be played out and 1 s more.

Reports the median and p90 of each step from the end of speech, as the client saw it
(``vad_stop``: the ``user_state`` event; ``transcript``: the final user transcript;
``turn_end``: ``thinking``; ``client_audio``: the first agent sample played) and as the
server's probe saw it (``tts_request``: the model's first sentence reached Piper;
``tts_first_audio``: Piper's first frame), plus the word error of the transcripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import deque
from typing import Any

import aiohttp
import numpy as np
from aiohttp.test_utils import TestServer

import rejoinder as rj
from _fakes import InstantLLM, clear_context
from _voice import (
    FRAME,
    RATE,
    Clip,
    LoopLag,
    Probe,
    TimedSTT,
    TimedTTS,
    Turn,
    add_what_if_options,
    clips,
    offline_stack,
    paced_frames,
    summary,
    what_if,
)
from rejoinder.io import Connection, create_app

REPORT_EVERY = 0.05


class Client:
    """Microphone, speaker and event log of one WebSocket client."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, probe: Probe, jitter: float) -> None:
        self.ws, self.probe, self.jitter = ws, probe, jitter
        self.rate = 0
        self.ready = asyncio.Event()
        self.listening = asyncio.Event()
        self.agent_state = ""
        self._mic: deque[np.ndarray] = deque()
        self._clip_done: asyncio.Future[float] | None = None
        self._speech_end_sample = 0
        # speaker
        self._queued = 0  # samples received, not yet played
        self._played = 0
        self._burst_at: float | None = None
        self._closed = False

    # ------------------------------------------------------------ microphone

    async def play(self, clip: Clip) -> float:
        """Speak ``clip``; returns the capture time of its end of speech."""
        pcm = np.concatenate([clip.pcm, np.zeros((-clip.pcm.size) % FRAME, np.int16)])
        self._mic.extend(pcm[i : i + FRAME] for i in range(0, pcm.size, FRAME))
        self._speech_end_sample = round(clip.speech_end * RATE)
        self._clip_done = asyncio.get_running_loop().create_future()
        return await self._clip_done

    async def microphone(self) -> None:
        silence = np.zeros(FRAME, np.int16).tobytes()
        clip_start: float | None = None
        async for captured in paced_frames(lambda: self._closed):
            if self._mic:
                if clip_start is None:
                    clip_start = captured
                await self.ws.send_bytes(self._mic.popleft().astype("<i2").tobytes())
                if not self._mic and self._clip_done is not None:
                    self._clip_done.set_result(clip_start + self._speech_end_sample / RATE)
                    clip_start = None
            else:
                await self.ws.send_bytes(silence)

    # --------------------------------------------------------------- speaker

    async def speaker(self) -> None:
        last = time.perf_counter()
        reported = -1
        next_report = last
        while not self._closed:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            if self._queued and self._burst_at is not None and now >= self._burst_at:
                step = min(self._queued, round((now - max(last, self._burst_at)) * self.rate))
                self._queued -= step
                self._played += step
                if not self._queued:
                    self._burst_at = None
            last = now
            if now >= next_report and self._played != reported:
                reported = self._played
                await self.ws.send_str(json.dumps({"type": "played", "samples": self._played}))
                next_report = now + REPORT_EVERY

    def _audio(self, data: bytes) -> None:
        now = time.perf_counter()
        turn = self.probe.turn
        if turn is not None and turn.client_audio is None:
            turn.client_audio = now + self.jitter  # heard from then on
        if self._burst_at is None and not self._queued:
            self._burst_at = now + self.jitter
        self._queued += len(data) // 2

    async def _clear(self) -> None:
        self._queued = 0
        self._burst_at = None
        message = {"type": "played", "samples": self._played, "cleared": True}
        await self.ws.send_str(json.dumps(message))

    # ---------------------------------------------------------------- events

    async def read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                self._audio(msg.data)
                continue
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            event: dict[str, Any] = json.loads(msg.data)
            now = time.perf_counter()
            turn = self.probe.turn
            kind = event["type"]
            if kind == "ready":
                self.rate = int(event["sample_rate"])
                self.ready.set()
            elif kind == "clear":
                await self._clear()
            elif kind == "user_state" and turn is not None:
                if event["state"] == "listening" and turn.vad_stop is None:
                    turn.vad_stop = now
            elif kind == "transcript" and turn is not None:
                if event["role"] == "user" and event["final"]:
                    # One final per utterance (a turn may hold several).
                    turn.transcript_at = turn.transcript_at or now
                    turn.transcript = f"{turn.transcript} {event['text']}".strip()
            elif kind == "agent_state":
                self.agent_state = event["state"]
                if turn is not None and event["state"] == "thinking":
                    turn.replies += 1
                    turn.thinking = turn.thinking or now
                if event["state"] == "listening":
                    self.listening.set()
                else:
                    self.listening.clear()
            elif kind == "error":
                print("server error:", event)
        self._closed = True


async def bench(
    turns: int, warmup: int, jitter: float, overrides: dict[str, Any], bare: bool = False
) -> dict[str, object]:
    from rejoinder.providers.local import SileroVAD, voice_session_options

    spoken = await clips()
    vad_silence = overrides.pop("vad_silence", None)
    stack = await offline_stack(vad_silence if bare else None)
    probe = Probe()
    sessions: list[rj.AgentSession[Any]] = []

    def voice(stt: rj.STT, tts: Any) -> dict[str, Any]:
        if bare:  # the VAD's silence alone ends the turn, as before the turn model
            return {"vad": stack.vad, "stt": stt, "tts": tts}
        options = voice_session_options(stt=stt, tts=tts)  # what a user runs
        if vad_silence is not None:
            options["vad"] = SileroVAD(min_silence_duration=vad_silence)
        return options

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=InstantLLM(),
            user_away_timeout=None,
            **(voice(TimedSTT(stack.stt, probe), TimedTTS(stack.tts, probe)) | overrides),
        )
        sessions.append(session)
        await conn.serve(session, rj.Agent(instructions="You are a helpful assistant."))

    server = TestServer(create_app(entrypoint), host="127.0.0.1")
    await server.start_server()
    measured: list[Turn] = []
    lag = LoopLag()
    lag.start()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(server.make_url("/ws")) as ws,
        ):
            client = Client(ws, probe, jitter)
            tasks = [asyncio.create_task(c) for c in (client.read(), client.speaker())]
            await ws.send_str(json.dumps({"type": "start", "sample_rate": RATE}))
            await asyncio.wait_for(client.ready.wait(), 10)
            tasks.append(asyncio.create_task(client.microphone()))
            await asyncio.wait_for(client.listening.wait(), 10)
            await asyncio.sleep(1.0)
            for i in range(warmup + turns):
                clip = spoken[i % len(spoken)]
                clear_context(sessions[0])
                turn = probe.start(clip.text)
                client.listening.clear()
                turn.speech_end = await client.play(clip)
                await asyncio.wait_for(client.listening.wait(), 20)  # played out
                await asyncio.sleep(1.0)  # silence between requests
                if i >= warmup:
                    measured.append(turn)
            client._closed = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await server.close()
    for turn in measured:  # the client's figures only: the server's would overlap
        turn.server_audio = None
    return {
        "bench": "voice_latency_ws",
        "jitter_s": jitter,
        **summary(measured, "client_audio"),
        "event_loop_lag_ms": lag.stop(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--jitter", type=float, default=0.0, help="speaker buffer, seconds")
    parser.add_argument(
        "--bare",
        action="store_true",
        help="Silero with its default silence and no turn model (as measured up to run 6)",
    )
    add_what_if_options(parser)
    args = parser.parse_args()
    result = asyncio.run(bench(args.turns, args.warmup, args.jitter, what_if(args), args.bare))
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
