"""Typed metrics on virtual time: every value is what the scripted models were told to do.

Each test collects the session's ``metrics_collected`` events and checks the numbers
against the script: an LLM's delay before its first delta is its ``ttft``, a TTS's
latency its ``ttfb``, and the voice latency is the time from the end of the user's speech
to the moment the output reported the reply playing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models import Usage
from rejoinder.providers import openai
from rejoinder.testing import (
    Delay,
    MemoryAudioInput,
    MemoryAudioOutput,
    MemoryTextOutput,
    OpenAIChatServer,
    OpenAIRealtimeServer,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
)
from rejoinder.testing.openai_chat_server import (
    ErrorReply,
    Reply,
    StreamReply,
    text_chunks,
    usage_chunk,
)
from rejoinder.testing.scripted_audio import speech_frame
from rejoinder.testing.scripted_llm import Fail


class Collected:
    def __init__(self, session: rj.AgentSession[Any]) -> None:
        self.all: list[rj.Metrics] = []
        session.on("metrics_collected", lambda ev: self.all.append(ev.metrics))

    def of(self, kind: type[Any]) -> list[Any]:
        return [m for m in self.all if isinstance(m, kind)]


async def text_session(llm: rj.LLM) -> tuple[rj.AgentSession[Any], Collected]:
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, user_away_timeout=None)
    session.output.transcription = MemoryTextOutput()
    collected = Collected(session)
    await session.start(rj.Agent(instructions="t"))
    return session, collected


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_llm_ttft_duration_and_tokens_come_from_the_stream() -> None:
    llm = ScriptedLLM([[Delay(0.3), "Hello", Delay(0.5), " there.", Usage(12, 5, 3)]])
    session, collected = await text_session(llm)
    speeches: list[rj.SpeechCreatedEvent] = []
    session.on("speech_created", speeches.append)
    start = now()
    await session.run(user_input="hi")
    [m] = collected.of(rj.LLMMetrics)
    assert m.type == "llm"
    assert m.ttft == pytest.approx(0.3, abs=1e-9)
    assert m.duration == pytest.approx(0.8, abs=1e-9)
    assert m.timestamp == pytest.approx(start + 0.8, abs=1e-9)
    assert (m.prompt_tokens, m.completion_tokens, m.cached_tokens) == (12, 5, 3)
    assert m.total_tokens == 17
    assert (m.model, m.provider, m.retries, m.fallback_from) == (
        "scripted",
        "rejoinder.testing",
        0,
        None,
    )
    assert m.label == "rejoinder.testing.scripted_llm.ScriptedLLM"
    assert m.speech_id == speeches[0].speech_handle.id
    assert m.to_dict()["type"] == "llm" and m.to_dict()["ttft"] == m.ttft
    json.dumps(m.to_dict())  # the client protocol's payload
    await session.aclose()


async def test_a_reply_with_only_a_tool_call_has_no_ttft() -> None:
    @rj.function_tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    llm = ScriptedLLM([[Delay(0.2), rj.testing.ToolCall("noop")], ["Done."]])
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, user_away_timeout=None)
    collected = Collected(session)
    await session.start(rj.Agent(instructions="t", tools=[noop]))
    await session.run(user_input="go")
    first, second = collected.of(rj.LLMMetrics)
    assert first.ttft is None and first.duration == pytest.approx(0.2, abs=1e-9)
    assert second.ttft == pytest.approx(0.0, abs=1e-9)
    assert first.speech_id != second.speech_id
    await session.aclose()


async def test_a_fallback_switch_names_the_model_that_failed() -> None:
    primary = ScriptedLLM([[Fail("down")]], model="primary")
    backup = ScriptedLLM([["From the backup."]], model="backup")
    fallback = rj.FallbackLLM([primary, backup], probe=False)
    session, collected = await text_session(fallback)
    await session.run(user_input="hi")
    [m] = collected.of(rj.LLMMetrics)
    assert (m.model, m.fallback_from, m.retries) == ("backup", "primary", 0)
    assert m.label == "rejoinder.testing.scripted_llm.ScriptedLLM"
    await session.aclose()


async def test_without_a_failure_a_fallback_names_the_model_that_served() -> None:
    fallback = rj.FallbackLLM([ScriptedLLM([["Fine."]], model="primary")], probe=False)
    session, collected = await text_session(fallback)
    await session.run(user_input="hi")
    [m] = collected.of(rj.LLMMetrics)
    assert (m.model, m.fallback_from) == ("primary", None)
    await session.aclose()


# ------------------------------------------------------------- OpenAI over loopback


async def test_openai_usage_and_cached_tokens_from_the_loopback_server() -> None:
    reply = StreamReply([*text_chunks("Hi", " there."), usage_chunk(42, 7, cached_tokens=40)])
    async with OpenAIChatServer([reply]) as server:
        llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="k")
        session, collected = await text_session(llm)
        await session.run(user_input="hi")
        [m] = collected.of(rj.LLMMetrics)
        assert (m.prompt_tokens, m.completion_tokens, m.cached_tokens) == (42, 7, 40)
        assert (m.model, m.provider, m.retries) == ("test-model", "openai", 0)
        assert m.label == "rejoinder.providers.openai.chat.LLM"
        assert server.requests[0]["stream_options"] == {"include_usage": True}
        await session.aclose()
        await llm.aclose()


async def test_openai_without_cache_details_reports_cached_as_unknown() -> None:
    reply = StreamReply([*text_chunks("Hi."), usage_chunk(10, 2)])
    async with OpenAIChatServer([reply]) as server:
        llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="k")
        session, collected = await text_session(llm)
        await session.run(user_input="hi")
        [m] = collected.of(rj.LLMMetrics)
        assert (m.prompt_tokens, m.completion_tokens, m.cached_tokens) == (10, 2, None)
        await session.aclose()
        await llm.aclose()


async def test_a_retried_503_shows_retries_1() -> None:
    replies: list[Reply] = [
        ErrorReply(503),
        StreamReply([*text_chunks("Back."), usage_chunk(3, 1)]),
    ]
    async with OpenAIChatServer(replies) as server:
        llm = openai.LLM(
            model="test-model", base_url=server.base_url, api_key="k", retry_backoff=0.5
        )
        session, collected = await text_session(llm)
        await session.run(user_input="hi")
        [m] = collected.of(rj.LLMMetrics)
        assert m.retries == 1
        assert (m.prompt_tokens, m.completion_tokens) == (3, 1)
        assert m.ttft is not None and 0.25 <= m.ttft <= 0.5 + 1e-6  # the backoff, jittered
        assert len(server.requests) == 2
        await session.aclose()
        await llm.aclose()


# --------------------------------------------------------------------------- voice


async def test_tts_ttfb_characters_and_audio_duration() -> None:
    tts = ScriptedTTS(latency=0.2, seconds_per_char=0.05)
    llm = ScriptedLLM([["Hello there, friend."]])
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, tts=tts, user_away_timeout=None)
    session.output.audio = MemoryAudioOutput(24000)
    collected = Collected(session)
    await session.start(rj.Agent(instructions="t"))
    start = now()
    await session.run(user_input="hi")
    [m] = collected.of(rj.TTSMetrics)
    text = "Hello there, friend."
    assert (m.characters, m.streamed) == (len(text), False)
    assert m.ttfb == pytest.approx(0.2, abs=1e-9)
    assert m.audio_duration == pytest.approx(m.characters * tts.seconds_per_char)
    assert m.duration == pytest.approx(0.2, abs=1e-9)  # every frame comes with the first
    assert m.timestamp == pytest.approx(start + 0.2, abs=1e-9)
    [llm_m] = collected.of(rj.LLMMetrics)
    assert m.speech_id == llm_m.speech_id
    assert m.label == "rejoinder.testing.scripted_tts.ScriptedTTS"
    # A `run` (typed input) is no spoken turn: no voice latency, no end of utterance.
    assert collected.of(rj.VoiceLatencyMetrics) == []
    assert collected.of(rj.EOUMetrics) == []
    await session.aclose()


async def test_tts_of_several_sentences_sums_them() -> None:
    tts = ScriptedTTS(latency=0.1)
    text = ["First sentence here. ", "And a second one."]
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([text]), tts=tts, user_away_timeout=None
    )
    session.output.audio = MemoryAudioOutput(24000)
    collected = Collected(session)
    await session.start(rj.Agent(instructions="t"))
    await session.run(user_input="hi")
    [m] = collected.of(rj.TTSMetrics)
    assert m.characters == sum(len(t) for t in tts.texts)
    assert m.audio_duration == pytest.approx(sum(tts.duration_of(t) for t in tts.texts))
    assert m.ttfb == pytest.approx(0.1, abs=1e-9)
    assert m.duration == pytest.approx(0.2, abs=1e-9)  # two syntheses, 0.1 s each
    await session.aclose()


class VoiceCall:
    def __init__(self, *, stt_latency: float, llm_delay: float, tts_latency: float) -> None:
        self.mic = MemoryAudioInput(16000)
        self.stt = ScriptedSTT(["What time is it?", "And the date?"], latency=stt_latency)
        self.tts = ScriptedTTS(latency=tts_latency)
        self.llm = ScriptedLLM(
            [
                [Delay(llm_delay), "It is noon.", Usage(20, 4)],
                [Delay(llm_delay), "It is Monday.", Usage(30, 5, 10)],
            ]
        )
        self.session: rj.AgentSession[Any] = rj.AgentSession(
            llm=self.llm,
            stt=self.stt,
            tts=self.tts,
            vad=ScriptedVAD(min_silence=0.3),
            min_endpointing_delay=0.4,
            user_away_timeout=None,
        )
        self.session.input.audio = self.mic
        self.session.output.audio = MemoryAudioOutput(24000)
        self.collected = Collected(self.session)
        self.timeline = StateTimeline(self.session)

    async def speak(self, seconds: float) -> float:
        """Speak for ``seconds``; returns when the speech ended (the silence begins)."""
        for _ in range(round(seconds / 0.02)):
            await self.mic.push(speech_frame(0.02))
        return now()


async def test_a_voice_turn_measures_stt_end_of_utterance_and_voice_latency() -> None:
    call = VoiceCall(stt_latency=0.1, llm_delay=0.2, tts_latency=0.15)
    await call.session.start(rj.Agent(instructions="t"))
    ended = await call.speak(1.0)
    await call.mic.push_silence(3.0)

    [stt] = call.collected.of(rj.STTMetrics)
    [eou] = call.collected.of(rj.EOUMetrics)
    [latency] = call.collected.of(rj.VoiceLatencyMetrics)
    # The VAD ends the utterance after 0.3 s of silence; the STT takes 0.1 s.
    vad_end = ended + 0.3
    assert stt.timestamp == pytest.approx(vad_end + 0.1, abs=1e-6)
    assert stt.latency == pytest.approx(0.1, abs=1e-6)
    assert stt.streamed is True
    assert stt.audio_duration == pytest.approx(call.stt.utterances[0])
    assert stt.label == "rejoinder.testing.scripted_audio.ScriptedSTT"
    # The transcript is in 0.4 s after the speech ended: the turn ends at once (the
    # endpointing delay of 0.4 s has run out by then).
    assert eou.transcription_delay == pytest.approx(0.4, abs=1e-6)
    assert eou.end_of_utterance_delay == pytest.approx(0.4, abs=1e-6)
    # Then 0.2 s to the first token, 0.15 s to the first audio, heard at once.
    heard = call.timeline.times_of("speaking")[0]
    assert latency.timestamp == pytest.approx(heard, abs=1e-9)
    assert latency.latency == pytest.approx(heard - ended, abs=1e-9)
    assert latency.latency == pytest.approx(0.4 + 0.2 + 0.15, abs=1e-6)
    assert latency.user_speech_ended_at == pytest.approx(ended, abs=1e-6)
    [tts] = call.collected.of(rj.TTSMetrics)
    assert latency.speech_id == tts.speech_id
    await call.session.aclose()


async def test_usage_sums_per_model_across_two_turns() -> None:
    call = VoiceCall(stt_latency=0.0, llm_delay=0.1, tts_latency=0.0)
    await call.session.start(rj.Agent(instructions="t"))
    await call.speak(1.0)
    await call.mic.push_silence(3.0)
    await call.speak(0.6)
    await call.mic.push_silence(3.0)

    assert len(call.collected.of(rj.VoiceLatencyMetrics)) == 2
    usage = call.session.usage
    assert list(usage) == [
        "rejoinder.testing.scripted_audio.ScriptedSTT",
        "scripted",
        "rejoinder.testing.scripted_tts.ScriptedTTS",
    ]
    llm = usage["scripted"]
    assert isinstance(llm, rj.UsageSummary)
    assert (llm.llm_requests, llm.llm_prompt_tokens, llm.llm_completion_tokens) == (2, 50, 9)
    assert llm.llm_cached_tokens == 10
    assert llm.provider == "rejoinder.testing"
    tts = usage["rejoinder.testing.scripted_tts.ScriptedTTS"]
    spoken = ["It is noon.", "It is Monday."]
    assert tts.tts_characters == sum(len(t) for t in spoken)
    assert tts.tts_audio_duration == pytest.approx(sum(call.tts.duration_of(t) for t in spoken))
    stt = usage["rejoinder.testing.scripted_audio.ScriptedSTT"]
    assert stt.stt_audio_duration == pytest.approx(sum(call.stt.utterances))
    assert usage is not call.session.usage  # a copy
    await call.session.aclose()


async def test_audio_heard_without_a_user_turn_has_no_voice_latency() -> None:
    call = VoiceCall(stt_latency=0.0, llm_delay=0.0, tts_latency=0.0)
    await call.session.start(rj.Agent(instructions="t"))
    await call.session.say("Welcome to the line.")
    await advance(0.1)
    assert call.collected.of(rj.VoiceLatencyMetrics) == []
    assert len(call.collected.of(rj.TTSMetrics)) == 1
    await call.session.aclose()


# ------------------------------------------------------------------------ realtime


@pytest.fixture
async def oai() -> Any:
    async with OpenAIRealtimeServer() as srv:
        yield srv


@pytest.mark.looptime(noop_cycles=2000)
async def test_realtime_usage_and_timing_from_response_done(oai: OpenAIRealtimeServer) -> None:
    from tests.scenarios.realtime_rig import Rig, realtime, user_says

    rigs: list[Rig] = []
    rig = await realtime(oai, rigs)
    collected = Collected(rig.session)
    usage = rig.session
    await user_says(oai, rig, "Hello?")
    assert collected.of(rj.VoiceLatencyMetrics) == []
    turn_ended = now()  # the provider's turn end reached the session in user_says
    await oai.response_created("resp_1")
    started = now()
    await rig.settle(0.2)
    await oai.transcript("resp_1", "item_resp_1", "Hi there.")
    await oai.audio("resp_1", "item_resp_1", seconds=0.5)
    await oai.audio_done("resp_1", "item_resp_1")
    await rig.settle(0.1)
    await oai.send(
        {
            "type": "response.done",
            "response": {
                "id": "resp_1",
                "object": "realtime.response",
                "status": "completed",
                "status_details": None,
                "output": [],
                "usage": {
                    "total_tokens": 150,
                    "input_tokens": 100,
                    "output_tokens": 50,
                    "input_token_details": {
                        "text_tokens": 20,
                        "audio_tokens": 80,
                        "cached_tokens": 64,
                    },
                    "output_token_details": {"text_tokens": 10, "audio_tokens": 40},
                },
            },
        }
    )
    await rig.settle(0.6)
    [m] = collected.of(rj.RealtimeMetrics)
    assert (m.response_id, m.status) == ("resp_1", "completed")
    assert (m.model, m.provider) == ("gpt-realtime", "openai")
    assert m.label == "rejoinder.providers.openai.realtime.Realtime"
    assert (m.input_tokens, m.output_tokens, m.total_tokens) == (100, 50, 150)
    assert (m.input_text_tokens, m.input_audio_tokens) == (20, 80)
    assert (m.output_text_tokens, m.output_audio_tokens, m.cached_tokens) == (10, 40, 64)
    # Audio came 0.2 s after the response started; done 0.1 s after that.
    assert m.ttft == pytest.approx(0.2, abs=1e-9)
    assert m.duration == pytest.approx(0.3, abs=1e-9)
    assert m.timestamp - started == pytest.approx(0.3, abs=1e-9)
    [latency] = collected.of(rj.VoiceLatencyMetrics)
    assert latency.speech_id is None
    assert latency.timestamp == pytest.approx(rig.timeline.times_of("speaking")[-1], abs=1e-9)
    # From the provider's end of the user's turn to the first audio heard.
    assert latency.user_speech_ended_at <= turn_ended
    assert latency.latency == pytest.approx(latency.timestamp - latency.user_speech_ended_at)
    assert latency.timestamp == pytest.approx(started + 0.2, abs=1e-9)
    [summary] = usage.usage.values()
    assert (summary.realtime_input_tokens, summary.realtime_output_tokens) == (100, 50)
    assert summary.realtime_cached_tokens == 64
    for r in rigs:
        await r.aclose()
