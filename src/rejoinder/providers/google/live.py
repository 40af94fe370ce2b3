"""Gemini Live (the Live API's ``BidiGenerateContent`` WebSocket) as a ``RealtimeModel``:
speech in, speech out.

``from rejoinder.providers import google; llm = google.Live(voice="Puck")`` goes in the
session's ``llm=`` slot (key from ``$GEMINI_API_KEY``, else ``$GOOGLE_API_KEY``).

What is implemented:

- ``setup`` (model, AUDIO responses with a prebuilt voice and language, system
  instruction, function declarations with ``behavior``, activity detection on or off,
  input and output transcription, session resumption, context window compression), then
  ``setupComplete``; ``realtimeInput`` audio (16 kHz PCM) and ``activityStart`` /
  ``activityEnd``; ``clientContent`` turns; ``toolResponse`` (with ``scheduling`` for
  non-blocking functions). Server ``serverContent`` (24 kHz audio, input and output
  transcription, ``interrupted``, ``generationComplete``, ``turnComplete``),
  ``toolCall``, ``toolCallCancellation``, ``goAway``, ``sessionResumptionUpdate`` and
  ``usageMetadata`` (as the turn's ``ResponseUsage``). How they map onto the session's
  facts is ``_live_protocol``'s docstring; connection handling is ``_live_session``'s.
- Turn detection: the server's (``activity_detection``, the default), or ours: with
  ``activity_detection=None`` and a ``vad=`` (e.g. ``local.SileroVAD()``) the client
  sends ``activityStart`` / ``activityEnd`` where the VAD hears speech start and end.
- Non-blocking functions: ``non_blocking={"search_flights": "when_idle",
  "log_call": "silent", "price_alert": "interrupt"}`` declares those functions
  ``NON_BLOCKING``: the model keeps talking while they run. Their results are scheduled
  as named, and ``SILENT`` whenever the tool returns ``reply_required=False``. What the
  agent reports follows: while a ``when_idle`` or ``interrupt`` function runs the agent
  owes its result (``thinking`` when it says nothing else); the result is voiced when the
  model is idle (``when_idle``: the user is never cut off) or at once, cutting off what the
  model was saying (``interrupt``); a ``silent`` function owes nothing at any point (the
  user is still never marked away while it runs).
- Connections: retries of the first one (``max_retries``...), a resumed replacement at a
  quiet moment after a ``goAway``, after ``recycle_after`` seconds, or when the agent
  changes (the setup cannot change on an open connection), and bounded reconnects after
  a loss; see ``_live_session``.

Not implemented: video and image input, text output, proactive audio and affective
dialog (v1alpha), Google Search and code execution tools, ephemeral tokens, the
``transparent`` resumption mode (audio of a dropped connection is not replayed),
``audioStreamEnd`` on mute (the session sends silence instead). With the server's
activity detection the user's turn is known only from transcription and the model's
answer: words transcribed after the model began answering are reported as interim
transcripts only. A barge-in is cut by the session; the API has no truncation, so what
the model believes was heard is its own estimate. An ``interrupt`` result cuts the model
off on the server at once, but the part of its speech the session already received still
plays (there is no fact that lets a provider stop the session's playback).

Sources: https://ai.google.dev/api/live,
https://ai.google.dev/gemini-api/docs/live-api/get-started-websocket,
https://ai.google.dev/gemini-api/docs/live-api/tools,
https://firebase.google.com/docs/ai-logic/live-api/sessions, and (configuration only
changes by resuming) https://discuss.ai.google.dev/t/unable-to-update-gemini-live-session-configuration-without-closing-the-existing-session/83359.

``aiohttp``, numpy and soxr are imported on first use, so importing this module is cheap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...models.realtime import RealtimeModel
from .._retry import RetryPolicy
from ._live_session import GeminiLiveSession, Settings
from ._live_wire import (
    DEFAULT_BASE_URL,
    NON_BLOCKING_CHOICES,
    OUTPUT_RATE,
    NonBlocking,
    SetupOptions,
    live_url,
    model_resource,
    redact,
)

if TYPE_CHECKING:
    from ...models.vad import VAD

__all__ = ["DEFAULT_COMPRESSION", "DEFAULT_MODEL", "GeminiLiveSession", "Live"]

DEFAULT_MODEL = "gemini-2.5-flash-native-audio-preview-12-2025"
"""A native-audio Live model that takes non-blocking (asynchronous) function calls."""
DEFAULT_COMPRESSION: Mapping[str, Any] = MappingProxyType({"slidingWindow": {}})
"""Sliding-window compression at the service's default trigger: without it an audio
session ends when its context fills (about 15 minutes)."""


class Live(RealtimeModel):
    """Gemini Live over a WebSocket. Each ``session()`` is one conversation, whose
    connection is replaced (resumed) as the service requires."""

    duplex = False
    sample_rate = OUTPUT_RATE

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        api_key: str | None = None,
        base_url: str | None = None,
        voice: str | None = "Puck",
        language: str | None = None,
        temperature: float | None = None,
        activity_detection: Mapping[str, Any] | None = MappingProxyType({}),
        vad: VAD | None = None,
        input_transcription: bool = True,
        output_transcription: bool = True,
        context_window_compression: Mapping[str, Any] | None = DEFAULT_COMPRESSION,
        non_blocking: Mapping[str, NonBlocking] | None = None,
        user_turn_silence: float = 1.2,
        recycle_after: float | None = 540.0,
        connect_timeout: float = 10.0,
        close_timeout: float = 2.0,
        max_reconnect_attempts: int = 3,
        reconnect_backoff: float = 0.5,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
    ) -> None:
        """
        Args:
            model: a Live model (``models/`` is added when missing).
            api_key: sent as the ``key`` query parameter; defaults to
                ``$GEMINI_API_KEY``, then ``$GOOGLE_API_KEY``.
            base_url: the API host; defaults to ``$GOOGLE_GEMINI_BASE_URL`` (as Google's
                SDK reads it), then ``https://generativelanguage.googleapis.com``.
            voice: a prebuilt voice (``Puck``, ``Kore``, ``Charon``...); ``None``: the
                service's. ``language``: the speech's language code (``en-US``...).
            temperature: the generation temperature (``None``: the service's).
            activity_detection: the server's activity detection
                (``automaticActivityDetection``: ``startOfSpeechSensitivity``,
                ``endOfSpeechSensitivity``, ``prefixPaddingMs``, ``silenceDurationMs``),
                on by default. ``None`` turns it off: then ``vad`` is our turn detection.
            vad: with ``activity_detection=None``, the VAD whose speech start and end
                become ``activityStart`` and ``activityEnd`` (and the user's turns).
            input_transcription: transcribe the user's speech (what the history
                records).
            output_transcription: transcribe the model's speech (what the history
                records).
            context_window_compression: ``contextWindowCompression`` as the API takes it
                (``{"triggerTokens": ..., "slidingWindow": {"targetTokens": ...}}``);
                ``None`` turns it off.
            non_blocking: function name → ``"when_idle"``, ``"interrupt"`` or
                ``"silent"``: those functions are non-blocking and their results are
                scheduled so (``SILENT`` when the tool requires no reply). Names of
                functions the current agent does not have are ignored.
            user_turn_silence: with the server's activity detection, a user turn with no
                new words for this long (of audio sent) is over even if the model does
                not answer.
            recycle_after: replace the connection at the first quiet moment after this
                many seconds, before the service's limit (about 10 minutes) even if no
                GoAway comes; ``None``: only on GoAway.
            connect_timeout: seconds for connecting and the setup, each connection.
            close_timeout: seconds a close may take before the socket is cut.
            max_reconnect_attempts: after a lost connection, how many times to try to
                reconnect (0: never).
            reconnect_backoff: seconds before the first reconnect attempt (doubling).
            max_retries: how many times the first connection is tried again after a
                transient failure (cannot connect, HTTP 429/5xx, an internal error before
                ``setupComplete``); a refused key, an invalid setup or a timeout fail at
                once.
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
        """
        key = api_key or os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        if not key:
            raise ValueError(
                "google.Live needs an API key: pass api_key=... or set GEMINI_API_KEY "
                "(or GOOGLE_API_KEY)"
            )
        if activity_detection is None and vad is None:
            raise ValueError(
                "google.Live: with activity_detection=None our own turn detection decides, "
                "so it needs vad=... (e.g. local.SileroVAD())"
            )
        if activity_detection is not None and vad is not None:
            raise ValueError("google.Live: vad= is our turn detection: set activity_detection=None")
        blocking_modes = dict(non_blocking or {})
        for name, mode in blocking_modes.items():
            if mode not in NON_BLOCKING_CHOICES:
                choices = ", ".join(repr(choice) for choice in NON_BLOCKING_CHOICES)
                raise ValueError(
                    f"google.Live: non_blocking[{name!r}] must be one of {choices}, got {mode!r}"
                )
        if recycle_after is not None and not recycle_after > 0:
            raise ValueError("recycle_after must be positive (seconds), or None")
        if not user_turn_silence > 0:
            raise ValueError("user_turn_silence must be positive (seconds)")
        if not connect_timeout > 0 or not close_timeout > 0:
            raise ValueError("connect_timeout and close_timeout must be positive")
        if max_reconnect_attempts < 0 or reconnect_backoff < 0:
            raise ValueError("max_reconnect_attempts and reconnect_backoff must be >= 0")
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        host = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or DEFAULT_BASE_URL
        self._model = model_resource(model)
        self._settings = Settings(
            url=live_url(host, key),
            setup=SetupOptions(
                model=self._model,
                voice=voice,
                language=language,
                temperature=temperature,
                activity_detection=(
                    dict(activity_detection) if activity_detection is not None else None
                ),
                input_transcription=input_transcription,
                output_transcription=output_transcription,
                context_window_compression=(
                    dict(context_window_compression)
                    if context_window_compression is not None
                    else None
                ),
                non_blocking=MappingProxyType(blocking_modes),
            ),
            vad=vad,
            user_turn_silence=user_turn_silence,
            connect_timeout=connect_timeout,
            close_timeout=close_timeout,
            max_reconnect_attempts=max_reconnect_attempts,
            reconnect_backoff=reconnect_backoff,
            recycle_after=recycle_after,
            retry=retry,
        )

    @property
    def model(self) -> str:
        return self._model.removeprefix("models/")

    @property
    def provider(self) -> str:
        return "google"

    @property
    def url(self) -> str:
        """The WebSocket URL sessions connect to, without its key."""
        return redact(self._settings.url)

    def session(self) -> GeminiLiveSession:
        return GeminiLiveSession(self._settings)

    def __repr__(self) -> str:
        return f"google.Live(model={self.model!r}, url={self.url!r})"
