"""The metric types, their payloads, usage sums, and the providers' usage parsing."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError

import pytest

import rejoinder as rj
from rejoinder.io.protocol import MetricsMessage, encode
from rejoinder.models import Usage
from rejoinder.models.metrics import label_of
from rejoinder.providers.openai._realtime_wire import response_usage
from rejoinder.providers.openai.chat import StreamAssembler
from rejoinder.session.usage import UsageCollector
from rejoinder.testing.openai_chat_server import usage_chunk


def llm(**kw: object) -> rj.LLMMetrics:
    base: dict[str, object] = {
        "timestamp": 1.0,
        "label": "x.LLM",
        "model": "m",
        "speech_id": "speech_1",
        "ttft": 0.25,
        "duration": 1.5,
    }
    base.update(kw)
    return rj.LLMMetrics(**base)  # type: ignore[arg-type]


def test_every_metric_has_its_type_and_a_json_payload() -> None:
    metrics: list[rj.Metrics] = [
        llm(prompt_tokens=3),
        rj.TTSMetrics(
            timestamp=1.0,
            label="t",
            speech_id="s",
            ttfb=0.1,
            duration=0.2,
            characters=5,
            audio_duration=0.25,
        ),
        rj.STTMetrics(timestamp=1.0, label="s", audio_duration=1.0, latency=0.1),
        rj.EOUMetrics(timestamp=1.0, end_of_utterance_delay=0.5, transcription_delay=0.2),
        rj.RealtimeMetrics(timestamp=1.0, label="r", response_id="resp_1", input_tokens=9),
        rj.VoiceLatencyMetrics(timestamp=2.0, speech_id="s", latency=0.8, user_speech_ended_at=1.2),
    ]
    kinds = [m.to_dict()["type"] for m in metrics]
    assert kinds == ["llm", "tts", "stt", "eou", "realtime", "voice_latency"]
    for m in metrics:
        payload = m.to_dict()
        assert payload["type"] == m.type
        assert payload["timestamp"] == m.timestamp
        assert {"label", "model", "provider"} <= set(payload)
        json.dumps(payload)
        # The client protocol's metrics message carries the payload as is.
        assert json.loads(encode(MetricsMessage(metrics=payload)))["metrics"] == payload


def test_metrics_are_frozen_and_readable_by_name() -> None:
    m = llm(prompt_tokens=10, completion_tokens=4)
    with pytest.raises(FrozenInstanceError):
        m.ttft = 1.0  # type: ignore[misc]
    assert m["ttft"] == 0.25 and m["type"] == "llm"
    assert m.total_tokens == 14
    with pytest.raises(KeyError):
        m["nope"]


def test_label_of_names_the_class() -> None:
    assert label_of(UsageCollector()) == "rejoinder.session.usage.UsageCollector"


def test_usage_collector_sums_per_model_and_skips_timings() -> None:
    usage = UsageCollector()
    usage.add(llm(prompt_tokens=10, completion_tokens=2, cached_tokens=4, retries=1))
    usage.add(llm(prompt_tokens=5, completion_tokens=1))
    usage.add(llm(model=None, label="other.LLM", prompt_tokens=1))
    usage.add(rj.EOUMetrics(timestamp=1.0, end_of_utterance_delay=0.5, transcription_delay=0.2))
    usage.add(
        rj.RealtimeMetrics(
            timestamp=1.0,
            label="r",
            model="rt",
            provider="openai",
            response_id="a",
            input_tokens=100,
            output_tokens=50,
            input_audio_tokens=80,
            output_audio_tokens=40,
            cached_tokens=64,
        )
    )
    usage.add(
        rj.RealtimeMetrics(
            timestamp=2.0, label="r", model="rt", response_id="b", input_tokens=1, output_tokens=2
        )
    )
    summary = usage.usage
    assert list(summary) == ["m", "other.LLM", "rt"]
    m = summary["m"]
    assert (m.llm_requests, m.llm_prompt_tokens, m.llm_completion_tokens) == (2, 15, 3)
    assert (m.llm_cached_tokens, m.llm_retries) == (4, 1)
    rt = summary["rt"]
    assert (rt.realtime_input_tokens, rt.realtime_output_tokens) == (101, 52)
    assert (rt.realtime_input_audio_tokens, rt.realtime_output_audio_tokens) == (80, 40)
    assert (rt.realtime_cached_tokens, rt.provider) == (64, "openai")
    assert rt.to_dict()["model"] == "rt"


def test_openai_stream_usage_with_and_without_cache_details() -> None:
    for chunk, cached in ((usage_chunk(42, 7, cached_tokens=40), 40), (usage_chunk(4, 1), None)):
        assembler = StreamAssembler()
        assert assembler.feed(json.dumps(chunk)) is None
        final = assembler.feed("[DONE]")
        assert final is not None
        assert final.usage == Usage(
            chunk["usage"]["prompt_tokens"], chunk["usage"]["completion_tokens"], cached
        )


def test_realtime_response_usage_is_parsed_with_its_split() -> None:
    usage = response_usage(
        {
            "total_tokens": 150,
            "input_tokens": 100,
            "output_tokens": 50,
            "input_token_details": {"text_tokens": 20, "audio_tokens": 80, "cached_tokens": 64},
            "output_token_details": {"text_tokens": 10, "audio_tokens": 40},
        }
    )
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (100, 50)
    assert (usage.input_text_tokens, usage.input_audio_tokens) == (20, 80)
    assert (usage.output_text_tokens, usage.output_audio_tokens) == (10, 40)
    assert usage.cached_tokens == 64
    assert response_usage(None) is None
    partial = response_usage({"input_tokens": 3, "output_tokens": "x"})
    assert partial is not None
    assert (partial.input_tokens, partial.output_tokens, partial.input_audio_tokens) == (3, 0, None)
