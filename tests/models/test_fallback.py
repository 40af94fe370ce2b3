"""FallbackLLM/TTS/STT: the next instance takes a request the first could not start; a
reply already partly heard is never started over elsewhere; a failed instance is probed in
the background until it works again (or, with probing off, retried by a later request)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

import rejoinder as rj
from rejoinder.models.chat import ChatContext
from rejoinder.models.stt import STTError
from rejoinder.models.tts import TTSError
from rejoinder.testing import (
    Delay,
    Fail,
    Gate,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    advance,
    now,
)
from rejoinder.testing.scripted_llm import Response

from ..conftest import MakeSession


async def collect(llm: rj.LLM) -> str:
    return "".join([chunk.delta async for chunk in llm.chat(rj.ChatContext())])


def assert_no_other_task() -> None:
    assert asyncio.all_tasks() == {asyncio.current_task()}


class Recorded(ScriptedLLM):
    """A ScriptedLLM whose calls are stamped with the loop time they were made at."""

    def __init__(self, script: Sequence[Response], then: Response = ("pong",)) -> None:
        self.times: list[float] = []
        script = list(script)

        def respond(chat_ctx: ChatContext) -> Response:
            self.times.append(now())
            return script.pop(0) if script else then

        super().__init__(respond)


# ------------------------------------------------------------------ the fallback itself


async def test_next_llm_takes_over_a_request_the_first_could_not_start() -> None:
    broken = ScriptedLLM([[Fail("down")]])
    backup = ScriptedLLM([["From the backup."]])
    fallback = rj.FallbackLLM([broken, backup])
    assert await collect(fallback) == "From the backup."
    assert not fallback.available(broken)
    await fallback.aclose()


async def test_partly_heard_reply_is_not_repeated(make_session: MakeSession) -> None:
    flaky = ScriptedLLM([["The first half", Fail("cut")]])
    backup = ScriptedLLM([["A whole different answer."]])
    h = await make_session(rj.FallbackLLM([flaky, backup]))
    await h.session.run(user_input="hi")
    assert h.output.segments == ["The first half"]
    assert backup.calls == []  # not started over elsewhere
    assert [e.source for e in h.errors] == ["llm"]
    assert h.session.agent_state == "listening"


async def test_every_llm_failing_is_one_clear_error() -> None:
    fallback = rj.FallbackLLM([ScriptedLLM([[Fail("a down")]]), ScriptedLLM([[Fail("b down")]])])
    with pytest.raises(rj.LLMError, match="every LLM failed: scripted: a down; scripted: b down"):
        await collect(fallback)
    await fallback.aclose()


def test_needs_at_least_one_llm() -> None:
    with pytest.raises(ValueError, match="at least one"):
        rj.FallbackLLM([])


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("retry_after", 0.0, "retry_after must be positive"),
        ("probe_interval", 0.0, "probe_interval must be a positive"),
        ("probe_interval", -1.0, "probe_interval must be a positive"),
        ("probe_interval", math.nan, "probe_interval must be a positive"),
        ("probe_interval", math.inf, "probe_interval must be a positive"),
        ("probe_timeout", 0.0, "probe_timeout must be a positive"),
        ("probe_timeout", -5.0, "probe_timeout must be a positive"),
    ],
)
def test_timings_must_be_positive(option: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rj.FallbackLLM([ScriptedLLM([])], **{option: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        rj.FallbackTTS([ScriptedTTS()], **{option: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        rj.FallbackSTT([ScriptedSTT([])], **{option: value})  # type: ignore[arg-type]


def test_probe_must_be_a_flag_or_a_function() -> None:
    with pytest.raises(TypeError, match="probe must be a bool or an async function"):
        rj.FallbackLLM([ScriptedLLM([])], probe="yes")  # type: ignore[arg-type]


# ------------------------------------------------------------------ background probes


async def test_failed_llm_is_probed_after_the_interval_and_preferred_again() -> None:
    primary = ScriptedLLM([[Fail("down")], ["pong"], ["Primary is back."]])
    backup = ScriptedLLM([["Backup 1."], ["Backup 2."]])
    fallback = rj.FallbackLLM([primary, backup], retry_after=30.0, probe_interval=5.0)
    assert await collect(fallback) == "Backup 1."
    assert fallback.probing(primary) and not fallback.available(primary)
    await advance(4.9)
    assert len(primary.calls) == 1  # not probed yet
    assert await collect(fallback) == "Backup 2."
    await advance(0.2)
    # The probe: one user message, no tools, no tool use.
    probe = primary.calls[1]
    assert [(m.role, m.content) for m in probe.chat_ctx.messages()] == [("user", "ping")]
    assert (probe.tools, probe.tool_choice) == ([], "none")
    assert fallback.available(primary) and not fallback.probing(primary)
    assert_no_other_task()  # the probe task is over
    assert await collect(fallback) == "Primary is back."
    assert len(backup.calls) == 2
    await fallback.aclose()


async def test_probe_reads_one_chunk_and_closes_the_stream() -> None:
    closed = asyncio.Event()

    class Chatty(rj.LLM):
        def __init__(self) -> None:
            self.calls = 0

        def chat(self, chat_ctx, tools=(), tool_choice="auto"):  # type: ignore[no-untyped-def,override]
            self.calls += 1
            return self._stream(self.calls)

        async def _stream(self, call: int):  # type: ignore[no-untyped-def]
            if call == 1:
                raise rj.LLMError("down")
            try:
                while True:  # a reply that would never end
                    yield rj.models.llm.ChatChunk(delta="pong ")
                    await advance(0.1)
            finally:
                closed.set()

    chatty = Chatty()
    fallback = rj.FallbackLLM([chatty, ScriptedLLM([["backup"]])], probe_interval=1.0)
    assert await collect(fallback) == "backup"
    await advance(1.1)
    assert closed.is_set()
    assert fallback.available(chatty)
    await fallback.aclose()


async def test_a_failing_probe_backs_off_and_the_instance_stays_unavailable() -> None:
    # One failed request, then four failed probes, then a working one.
    primary = Recorded([[Fail("down")]] * 5, then=["pong"])
    backup = ScriptedLLM(lambda ctx: ["backup"])
    fallback = rj.FallbackLLM([primary, backup], retry_after=10.0)  # probe_interval = 10 s
    t0 = now()
    assert await collect(fallback) == "backup"
    await advance(100.0)
    # Long past retry_after, but the probe decides: no request is sent to it.
    assert not fallback.available(primary)
    assert await collect(fallback) == "backup"
    await advance(140.0)
    assert fallback.available(primary)
    # 10 s, then doubling, capped at 8 x 10 s.
    assert [round(t - t0, 3) for t in primary.times] == [0, 10, 30, 70, 150, 230]
    await fallback.aclose()


async def test_a_hanging_probe_fails_after_probe_timeout() -> None:
    primary = Recorded([[Fail("down")], [Delay(3600), "late"]], then=["pong"])
    fallback = rj.FallbackLLM(
        [primary, ScriptedLLM(lambda ctx: ["backup"])], probe_interval=10.0, probe_timeout=2.0
    )
    t0 = now()
    await collect(fallback)
    await advance(12.1)
    assert not fallback.available(primary)  # timed out at 12 s
    await advance(20.0)  # next probe 20 s after the timeout
    assert fallback.available(primary)
    assert [round(t - t0, 3) for t in primary.times] == [0, 10, 32]
    await fallback.aclose()


async def test_a_request_that_works_on_a_probed_llm_ends_its_probe() -> None:
    only = ScriptedLLM([[Fail("down")], ["It works."]])
    fallback = rj.FallbackLLM([only], probe_interval=10.0)
    with pytest.raises(rj.LLMError):
        await collect(fallback)
    assert fallback.probing(only)
    assert await collect(fallback) == "It works."  # all down: tried anyway
    assert fallback.available(only) and not fallback.probing(only)
    await advance(0)
    assert_no_other_task()
    await advance(60.0)
    assert len(only.calls) == 2  # never probed
    await fallback.aclose()


async def test_aclose_cancels_probes_even_mid_probe_and_leaves_no_task() -> None:
    never = asyncio.Event()
    hanging = ScriptedLLM([[Fail("down")], [Gate(never), "pong"]])
    dead = ScriptedLLM([[Fail("down")]])
    fallback = rj.FallbackLLM(
        [hanging, dead, ScriptedLLM([["backup"]])], probe_interval=5.0, probe_timeout=60.0
    )
    assert await collect(fallback) == "backup"
    assert fallback.probing(hanging) and fallback.probing(dead)
    await advance(6.0)
    assert len(hanging.calls) == 2  # its probe is waiting on the gate
    await fallback.aclose()
    assert_no_other_task()
    assert not fallback.probing(hanging) and not fallback.probing(dead)
    await advance(600.0)
    assert len(hanging.calls) == 2 and len(dead.calls) == 2
    await fallback.aclose()  # idempotent


async def test_after_aclose_a_failure_is_retried_lazily() -> None:
    primary = ScriptedLLM([[Fail("down")], ["back"]])
    fallback = rj.FallbackLLM([primary, ScriptedLLM([["backup"]])], retry_after=10.0)
    await fallback.aclose()
    assert await collect(fallback) == "backup"
    assert not fallback.probing(primary)
    assert_no_other_task()
    await advance(10.0)
    assert len(primary.calls) == 1
    assert await collect(fallback) == "back"


async def test_a_probe_that_turns_cancellation_into_an_error_still_ends_on_aclose() -> None:
    never = asyncio.Event()

    async def stubborn(llm: rj.LLM) -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            raise ConnectionError("interrupted") from None

    fallback = rj.FallbackLLM(
        [ScriptedLLM([[Fail("down")]]), ScriptedLLM([["backup"]])],
        probe=stubborn,
        probe_interval=1.0,
        probe_timeout=60.0,
    )
    await collect(fallback)
    await advance(2.0)  # the probe is waiting
    await fallback.aclose()
    assert_no_other_task()


def test_a_probe_runs_only_in_the_loop_that_started_it() -> None:
    primary = ScriptedLLM([[Fail("one")], [Fail("two")]])
    fallback = rj.FallbackLLM([primary], probe_interval=3600.0)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()

    async def fail_once() -> None:
        with pytest.raises(rj.LLMError):
            await collect(fallback)

    async def in_second_loop() -> None:
        # The first loop's probe cannot run here: this loop does not count on it...
        assert not fallback.probing(primary)
        await fail_once()  # (every LLM is down: it is tried anyway)
        # ...and starts its own.
        assert fallback.probing(primary)
        (probe,) = asyncio.all_tasks() - {asyncio.current_task()}
        await fallback.aclose()
        assert probe.cancelled()

    try:
        first.run_until_complete(fail_once())
        assert fallback_probes(first) == 1
        second.run_until_complete(in_second_loop())
        assert fallback_probes(first) == 1  # untouched by the second loop's aclose
    finally:
        leftover = asyncio.all_tasks(first)
        for task in leftover:
            task.cancel()
        first.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
        first.close()
        second.close()
    assert len(primary.calls) == 2


def fallback_probes(loop: asyncio.AbstractEventLoop) -> int:
    return sum(t.get_name().startswith("rejoinder: probe") for t in asyncio.all_tasks(loop))


async def test_a_custom_probe_replaces_the_default() -> None:
    probed: list[rj.LLM] = []
    healthy = False

    async def health_check(llm: rj.LLM) -> None:
        probed.append(llm)
        if not healthy:
            raise ConnectionError("still down")

    primary = ScriptedLLM([[Fail("down")], ["back"]])
    fallback = rj.FallbackLLM(
        [primary, ScriptedLLM([["backup"]])], probe=health_check, probe_interval=1.0
    )
    await collect(fallback)
    await advance(1.1)
    assert probed == [primary] and not fallback.available(primary)
    healthy = True
    await advance(2.0)
    assert probed == [primary, primary] and fallback.available(primary)
    assert len(primary.calls) == 1  # the default probe never ran
    assert await collect(fallback) == "back"
    await fallback.aclose()


async def test_with_probing_off_a_failed_llm_is_retried_by_a_request_after_retry_after() -> None:
    primary = ScriptedLLM([[Fail("down")], ["Primary is back."]])
    backup = ScriptedLLM([["Backup 1."], ["Backup 2."]])
    fallback = rj.FallbackLLM([primary, backup], retry_after=10.0, probe=False)
    assert await collect(fallback) == "Backup 1."
    assert not fallback.probing(primary)
    assert_no_other_task()
    assert await collect(fallback) == "Backup 2."  # primary still marked down
    await advance(10.0)
    assert len(primary.calls) == 1  # nothing ran in the background
    assert fallback.available(primary)  # half-open: the next request tries it
    assert await collect(fallback) == "Primary is back."
    assert fallback.available(primary)
    await fallback.aclose()


# ------------------------------------------------------------------ TTS and STT


async def test_tts_falls_back_before_audio_but_never_repeats_a_sentence() -> None:
    broken = ScriptedTTS(fail_on="Hello")
    backup = ScriptedTTS()
    voices = rj.FallbackTTS([broken, backup])
    frames = [item async for item in voices.synthesize("Hello there.")]
    assert len(frames) == round(backup.duration_of("Hello there.") * 50)
    assert not voices.available(broken)
    assert backup.texts == ["Hello there."]
    await voices.aclose()

    class MidSentenceFailure(ScriptedTTS):
        async def synthesize(self, text: str):  # type: ignore[no-untyped-def,override]
            yield rj.AudioFrame.silence(0.02, self.sample_rate)
            raise TTSError("died mid-sentence")

    spare = ScriptedTTS()
    voices = rj.FallbackTTS([MidSentenceFailure(), spare])
    with pytest.raises(TTSError, match="mid-sentence"):
        _ = [item async for item in voices.synthesize("Some words.")]
    assert spare.texts == []  # the heard part is not said again by another voice
    await voices.aclose()


def test_tts_voices_must_share_a_format() -> None:
    with pytest.raises(ValueError, match="share sample rate"):
        rj.FallbackTTS([ScriptedTTS(sample_rate=24000), ScriptedTTS(sample_rate=16000)])


async def test_failed_tts_is_probed_with_a_short_synthesis() -> None:
    broken = ScriptedTTS(fail_on="o")  # "ok" fails too
    backup = ScriptedTTS()
    voices = rj.FallbackTTS([broken, backup], probe_interval=5.0)
    _ = [item async for item in voices.synthesize("Hello.")]
    await advance(5.1)
    assert broken.texts == ["Hello.", "ok"]
    assert voices.probing(broken) and not voices.available(broken)
    broken.fail_on = None
    await advance(10.0)  # backed off: 10 s after the failed probe
    assert broken.texts == ["Hello.", "ok", "ok"]
    assert voices.available(broken)
    _ = [item async for item in voices.synthesize("Hello again.")]
    assert broken.texts[-1] == "Hello again."
    assert backup.texts == ["Hello."]
    await voices.aclose()
    assert_no_other_task()


async def test_stt_falls_back_per_utterance() -> None:
    broken = ScriptedSTT(["unused"], fail=True)
    backup = ScriptedSTT(["hello there"])
    stt = rj.FallbackSTT([broken, backup])
    assert await stt.recognize([rj.AudioFrame.silence(0.5, 16000)]) == "hello there"
    assert not stt.available(broken)
    await stt.aclose()
    alone = rj.FallbackSTT([ScriptedSTT([], fail=True)])
    with pytest.raises(STTError, match="every STT failed"):
        await alone.recognize([])
    await alone.aclose()
    assert_no_other_task()


async def test_stt_fallback_keeps_what_the_recognizer_knows_about_its_words() -> None:
    unsure = ScriptedSTT([rj.Transcript("near now.", last_word_confidence=0.2)])
    stt = rj.FallbackSTT([ScriptedSTT([], fail=True), unsure])
    transcript = await stt.transcribe([rj.AudioFrame.silence(0.5, 16000)])
    assert transcript == rj.Transcript("near now.", last_word_confidence=0.2)
    await stt.aclose()
    assert_no_other_task()


async def test_stt_fallback_asks_the_first_available_for_the_words_so_far() -> None:
    broken = ScriptedSTT(["unused"], fail=True)
    backup = ScriptedSTT(lambda seconds: "hold on")
    stt = rj.FallbackSTT([broken, backup])
    so_far = [rj.AudioFrame.silence(0.4, 16000)]
    with pytest.raises(STTError):  # the first is still available: its failure is the answer
        await stt.transcribe_so_far(so_far)
    assert stt.available(broken)  # a pass over words so far marks nothing down
    assert await stt.recognize(so_far) == "hold on"  # a whole utterance does
    assert await stt.transcribe_so_far(so_far) == rj.Transcript("hold on")
    await stt.aclose()
    assert_no_other_task()


async def test_failed_stt_is_probed_with_half_a_second_of_silence() -> None:
    broken = ScriptedSTT(lambda seconds: "primary", fail=True)
    backup = ScriptedSTT(lambda seconds: "backup")
    stt = rj.FallbackSTT([broken, backup], retry_after=4.0)
    speech = [rj.AudioFrame.silence(1.2, 16000)]
    assert await stt.recognize(speech) == "backup"
    await advance(4.1)
    assert broken.utterances == [1.2, 0.5]
    assert stt.probing(broken)
    broken.fail = False
    await advance(8.0)
    assert broken.utterances == [1.2, 0.5, 0.5]
    assert stt.available(broken)
    assert await stt.recognize(speech) == "primary"
    await stt.aclose()
