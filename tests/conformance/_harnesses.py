"""Harnesses for the loopback servers that share their machinery: the speech-to-text
servers built on ``ListenServer`` (Deepgram, AssemblyAI) take the same ``Fault`` actions
and refusals, the text-to-speech servers (Cartesia, ElevenLabs) the same fault steps, and
the streamed chat servers (OpenAI, Anthropic, Gemini) the same scripted replies. A
provider's test names its engine, key and what differs."""

from __future__ import annotations

from typing import Any, ClassVar

from rejoinder.models.stt import STT
from rejoinder.models.tts import TTS
from rejoinder.testing._scripted_stream import CutConnection, Pause, StreamReply
from rejoinder.testing._ws_faults import Cut, Refuse, Stall
from rejoinder.testing.conformance import LLMHarness, STTHarness, TTSHarness

FRAME_BYTES = 640  # 20 ms at 16 kHz, 16-bit mono


class OverServer:
    """What every harness here has: the loopback server it scripts, that server's port
    for the leak checks, and the options that point a client at it, retrying as the
    harness says with a short backoff."""

    retries: ClassVar[int]

    def __init__(self, server: Any) -> None:
        self.server = server

    @property
    def server_port(self) -> int:
        return int(self.server.port)

    def _client_options(self) -> dict[str, Any]:
        return {
            "base_url": self.server.base_url,
            "max_retries": self.retries,
            "retry_backoff": 0.01,
        }


class ListenHarness(OverServer, STTHarness):
    """An ``STTHarness`` over a ``DeepgramServer`` or an ``AssemblyAIServer``."""

    # A silent server: recognize waits finalize_timeout for the final result, then
    # returns what it heard (the providers' documented choice).
    stall_timeout = 2.0
    retries = 2
    engine: ClassVar[type[Any]]
    """The recognizer's class."""
    key: ClassVar[str]
    fault: ClassVar[type[Any]]
    """The server module's ``Fault``."""
    bad_key_message: ClassVar[str]
    """What the server says when it refuses a key."""

    def make(self) -> STT:
        stt: STT = self.engine(
            api_key=self.key, finalize_timeout=self.stall_timeout, **self._client_options()
        )
        return stt

    def attempts(self) -> int:
        return len(self.server.refused) + len(self.server.connections)

    def retries_of(self, stt: STT) -> int:
        assert isinstance(stt, self.engine)
        return int(stt.retries)

    def transcript(self, text: str) -> None:
        self.server.add_transcripts(text)

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.refuse(503, times=times, message="Service overloaded.")
            return "503"
        self.server.refuse(401, times=times, message=self.bad_key_message)
        return "401"

    def drop_mid_utterance(self, text: str) -> None:
        self.server.add_transcripts(text)
        self.server.add_faults(self.fault("drop", after_bytes=10 * FRAME_BYTES))

    def garbage(self, text: str) -> None:
        self.server.add_transcripts(text)
        self.server.add_faults(self.fault("garbage", after_bytes=FRAME_BYTES))

    def stall(self, text: str) -> None:
        self.server.add_transcripts(text)
        self.server.add_faults(self.fault("mute"))


class ToneHarness(OverServer, TTSHarness):
    """A ``TTSHarness`` over a ``CartesiaServer`` or an ``ElevenLabsServer``."""

    stall_timeout = 5.0
    retries = 2
    engine: ClassVar[type[Any]]
    """The engine's class."""
    key: ClassVar[str]
    garbage_step: ClassVar[type[Any]]
    """The server module's ``Garbage``."""

    def make(self) -> TTS:
        tts: TTS = self.engine(
            voice_id="voice-1",
            api_key=self.key,
            timeout=self.stall_timeout,
            **self._client_options(),
        )
        return tts

    def attempts(self) -> int:
        return int(self.server.refused) + len(self.server.connections)

    def retries_of(self, tts: TTS) -> int:
        assert isinstance(tts, self.engine)
        return int(tts.retries)

    def _seconds(self, text: str) -> float:
        """The seconds of audio the server sends for ``text``."""
        raise NotImplementedError

    def _set_pace(self, pace: float) -> None:
        """The server waits ``pace`` seconds before each piece of audio."""
        raise NotImplementedError

    def speak(self, text: str, *, pace: float = 0.0) -> float:
        self._set_pace(pace)
        return self._seconds(text)

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.script(*[Refuse(503)] * times)
            return "503"
        self.server.script(*[Refuse(401, "Invalid API key")] * times)
        return "401"

    def drop_before_audio(self, text: str) -> float:
        self.server.script(Cut(after=0))
        return self.speak(text)

    def drop_mid_audio(self, text: str) -> None:
        self.server.script(Cut(after=1))

    def garbage(self, text: str) -> float | None:
        self.server.script(self.garbage_step(after=1))
        return self._seconds(text)

    def stall(self, text: str) -> None:
        self.server.script(Stall(after=1))


class ChatStreamHarness(OverServer, LLMHarness):
    """An ``LLMHarness`` over a streamed chat server (``OpenAIChatServer``,
    ``AnthropicServer``, ``GeminiServer``): every request is recorded, and a reply that is
    cut or stalls is the API's start of a text reply, then the cut or the silence."""

    stall_timeout = 5.0
    retries = 2

    def attempts(self) -> int:
        return len(self.server.requests)

    def _streaming(self, *chunks: str) -> list[Any]:
        """The events of a text reply that has streamed ``chunks`` and not ended (with
        none: what the API sends before any text)."""
        raise NotImplementedError

    def cut_mid_stream(self, *chunks: str) -> None:
        self.server.add(StreamReply([*self._streaming(*chunks), CutConnection()]))

    def stall(self, *chunks: str) -> None:
        started = self._streaming(*chunks) if chunks else []
        self.server.add(StreamReply([*started, Pause(3600)], done=False))
