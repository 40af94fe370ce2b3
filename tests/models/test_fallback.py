"""FallbackLLM: the next model takes a request the first could not start; a reply already
partly heard is never started over elsewhere; a failed model is retried after a while."""

from __future__ import annotations

import pytest

import rejoinder as rj
from rejoinder.testing import Fail, ScriptedLLM, advance

from ..conftest import MakeSession


async def collect(llm: rj.LLM) -> str:
    return "".join([chunk.delta async for chunk in llm.chat(rj.ChatContext())])


async def test_next_llm_takes_over_a_request_the_first_could_not_start() -> None:
    broken = ScriptedLLM([[Fail("down")]])
    backup = ScriptedLLM([["From the backup."]])
    fallback = rj.FallbackLLM([broken, backup])
    assert await collect(fallback) == "From the backup."
    assert not fallback.available(broken)


async def test_partly_heard_reply_is_not_repeated(make_session: MakeSession) -> None:
    flaky = ScriptedLLM([["The first half", Fail("cut")]])
    backup = ScriptedLLM([["A whole different answer."]])
    h = await make_session(rj.FallbackLLM([flaky, backup]))
    await h.session.run(user_input="hi")
    assert h.output.segments == ["The first half"]
    assert backup.calls == []  # not started over elsewhere
    assert [e.source for e in h.errors] == ["llm"]
    assert h.session.agent_state == "listening"


async def test_failed_llm_is_probed_again_after_retry_after() -> None:
    primary = ScriptedLLM([[Fail("down")], ["Primary is back."]])
    backup = ScriptedLLM([["Backup 1."], ["Backup 2."]])
    fallback = rj.FallbackLLM([primary, backup], retry_after=10.0)
    assert await collect(fallback) == "Backup 1."
    assert await collect(fallback) == "Backup 2."  # primary still marked down
    await advance(10.0)
    assert await collect(fallback) == "Primary is back."
    assert fallback.available(primary)


async def test_every_llm_failing_is_one_clear_error() -> None:
    fallback = rj.FallbackLLM([ScriptedLLM([[Fail("a down")]]), ScriptedLLM([[Fail("b down")]])])
    with pytest.raises(rj.LLMError, match="every LLM failed: scripted: a down; scripted: b down"):
        await collect(fallback)


def test_needs_at_least_one_llm() -> None:
    with pytest.raises(ValueError, match="at least one"):
        rj.FallbackLLM([])


async def test_tts_falls_back_before_audio_but_never_repeats_a_sentence() -> None:
    from rejoinder.testing import ScriptedTTS

    broken = ScriptedTTS(fail_on="Hello")
    backup = ScriptedTTS()
    voices = rj.FallbackTTS([broken, backup])
    frames = [item async for item in voices.synthesize("Hello there.")]
    assert len(frames) == round(backup.duration_of("Hello there.") * 50)
    assert not voices.available(broken)
    assert backup.texts == ["Hello there."]

    class MidSentenceFailure(ScriptedTTS):
        async def synthesize(self, text: str):  # type: ignore[no-untyped-def,override]
            yield rj.AudioFrame.silence(0.02, self.sample_rate)
            raise rj.models.tts.TTSError("died mid-sentence")

    spare = ScriptedTTS()
    voices = rj.FallbackTTS([MidSentenceFailure(), spare])
    with pytest.raises(rj.models.tts.TTSError, match="mid-sentence"):
        _ = [item async for item in voices.synthesize("Some words.")]
    assert spare.texts == []  # the heard part is not said again by another voice


def test_tts_voices_must_share_a_format() -> None:
    from rejoinder.testing import ScriptedTTS

    with pytest.raises(ValueError, match="share sample rate"):
        rj.FallbackTTS([ScriptedTTS(sample_rate=24000), ScriptedTTS(sample_rate=16000)])


async def test_stt_falls_back_per_utterance() -> None:
    from rejoinder.testing import ScriptedSTT

    broken = ScriptedSTT(["unused"], fail=True)
    backup = ScriptedSTT(["hello there"])
    stt = rj.FallbackSTT([broken, backup])
    assert await stt.recognize([rj.AudioFrame.silence(0.5, 16000)]) == "hello there"
    assert not stt.available(broken)
    with pytest.raises(rj.models.stt.STTError, match="every STT failed"):
        await rj.FallbackSTT([ScriptedSTT([], fail=True)]).recognize([])
