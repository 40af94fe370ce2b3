"""The STT, TTS and realtime suites fail models that break their promises: each broken
model here is a working one with one fault, and the test it breaks must fail on it with
the suite's own AssertionError (the LLM suite's are in test_catches_broken_llms.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from rejoinder.models import FunctionCallOutput, ToolDefinition
from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import (
    ProviderError,
    RealtimeConfig,
    RealtimeEvent,
    RealtimeModel,
    RealtimeSession,
    ToolOutputFate,
)
from rejoinder.models.stt import STT, STTError
from rejoinder.models.tts import TTS, TTSError, WordTiming
from rejoinder.providers import openai
from rejoinder.providers.openai.realtime import Realtime
from rejoinder.testing.conformance import RealtimeConformance, STTConformance, TTSConformance
from rejoinder.testing.conformance.realtime import CONFIG, Recorder
from rejoinder.testing.openai_audio_server import OpenAIAudioServer
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer

from .test_openai_realtime import OpenAIRealtimeHarness
from .test_openai_stt import OpenAITranscriptionHarness
from .test_openai_tts import OpenAISpeechHarness

pytestmark = pytest.mark.looptime(noop_cycles=2000)

# -- STT ------------------------------------------------------------------------------------


class EmptyOnError(STT):
    """Answers "" when recognition fails: a lost utterance reads as silence."""

    def __init__(self, inner: openai.STT) -> None:
        self.inner = inner

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        try:
            return await self.inner.recognize(frames)
        except STTError:
            return ""

    async def aclose(self) -> None:
        await self.inner.aclose()


class BrokenSTTHarness(OpenAITranscriptionHarness):
    def make(self) -> STT:  # type: ignore[override]
        return EmptyOnError(super().make())


class UnboundedSTTHarness(OpenAITranscriptionHarness):
    def make(self) -> openai.STT:
        # No read timeout: a silent server is waited for forever.
        return openai.STT(base_url=self.server.base_url, timeout=openai.Timeout(read=None))


async def test_an_stt_that_turns_a_drop_into_silence_fails() -> None:
    async with OpenAIAudioServer() as server:
        harness = BrokenSTTHarness(server)
        stt = harness.make()
        try:
            with pytest.raises(AssertionError, match="a dropped utterance came back partial: ''"):
                await STTConformance().test_a_drop_mid_utterance_never_gives_a_partial_transcript(
                    harness=harness, stt=stt
                )
        finally:
            await stt.aclose()


async def test_an_stt_that_waits_forever_fails() -> None:
    async with OpenAIAudioServer() as server:
        harness = UnboundedSTTHarness(server)
        stt = harness.make()
        try:
            with pytest.raises(AssertionError, match="a stalled recognition did not finish"):
                await STTConformance().test_a_stall_is_given_up_on_within_the_timeout(
                    harness=harness, stt=stt
                )
        finally:
            await stt.aclose()


# -- TTS ------------------------------------------------------------------------------------


class QuietOnError(TTS):
    """Ends the audio quietly when synthesis fails: half a sentence sounds like all of it."""

    def __init__(self, inner: openai.TTS) -> None:
        super().__init__(sample_rate=inner.sample_rate)
        self.inner = inner

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        try:
            async for item in self.inner.synthesize(text):
                yield item
        except TTSError:
            return

    async def aclose(self) -> None:
        await self.inner.aclose()


class BrokenTTSHarness(OpenAISpeechHarness):
    def make(self) -> TTS:  # type: ignore[override]
        return QuietOnError(super().make())


async def test_a_tts_that_ends_a_cut_synthesis_quietly_fails() -> None:
    async with OpenAIAudioServer() as server:
        harness = BrokenTTSHarness(server)
        tts = harness.make()
        try:
            with pytest.raises(AssertionError, match="a cut synthesis ended quietly"):
                await TTSConformance().test_a_drop_mid_audio_raises(harness=harness, tts=tts)
        finally:
            await tts.aclose()


# -- realtime -------------------------------------------------------------------------------


class HidesErrors(RealtimeSession):
    """Drops ``ProviderError`` events: a malformed frame goes unreported."""

    def __init__(self, inner: RealtimeSession) -> None:
        self.inner = inner

    async def start(self, config: RealtimeConfig) -> None:
        await self.inner.start(config)

    async def events(self) -> AsyncIterator[RealtimeEvent]:
        async for event in self.inner.events():
            if not isinstance(event, ProviderError):
                yield event

    def push_audio(self, frame: AudioFrame) -> None:
        self.inner.push_audio(frame)

    def submit_tool_output(
        self, output: FunctionCallOutput, *, reply_required: bool
    ) -> ToolOutputFate:
        return self.inner.submit_tool_output(output, reply_required=reply_required)

    def add_context(self, text: str) -> None:
        self.inner.add_context(text)

    def update_instructions(self, instructions: str) -> None:
        self.inner.update_instructions(instructions)

    def update_tools(self, tools: Sequence[ToolDefinition]) -> None:
        self.inner.update_tools(tools)

    def generate_reply(self, instructions: str | None = None) -> None:
        self.inner.generate_reply(instructions)

    def send_user_text(self, text: str) -> None:
        self.inner.send_user_text(text)

    async def aclose(self) -> None:
        await self.inner.aclose()


class HidingModel(RealtimeModel):
    def __init__(self, inner: Realtime) -> None:
        self.inner = inner

    def session(self) -> RealtimeSession:
        return HidesErrors(self.inner.session())


class BrokenRealtimeHarness(OpenAIRealtimeHarness):
    def make(self) -> RealtimeModel:  # type: ignore[override]
        return HidingModel(super().make())


class NoRetriesHarness(OpenAIRealtimeHarness):
    def make(self) -> Realtime:
        return Realtime(api_key="sk-test", base_url=self.server.base_url, max_retries=0)


async def run_live(harness: OpenAIRealtimeHarness, test: Any) -> None:
    """Run a test that takes a live session, as its fixtures would."""
    model = harness.make()
    session = model.session()
    recorder = Recorder(session)
    try:
        await session.start(CONFIG)
        await test(harness=harness, model=model, live=(session, recorder))
    finally:
        await session.aclose()


async def test_a_session_that_hides_a_malformed_frame_fails() -> None:
    async with (
        OpenAIRealtimeServer() as server,
        OpenAIRealtimeServer(session_created=False) as silent,
    ):
        harness = BrokenRealtimeHarness(server, silent)
        with pytest.raises(AssertionError, match="waiting for a ProviderError"):
            await run_live(
                harness,
                RealtimeConformance().test_a_malformed_frame_is_reported_and_the_session_goes_on,
            )


async def test_a_model_that_does_not_retry_a_refusal_fails() -> None:
    async with (
        OpenAIRealtimeServer() as server,
        OpenAIRealtimeServer(session_created=False) as silent,
    ):
        harness = NoRetriesHarness(server, silent)
        with pytest.raises(AssertionError, match=r"start failed: .*503"):
            await RealtimeConformance().test_a_transient_refusal_is_retried(
                harness=harness, model=harness.make()
            )
