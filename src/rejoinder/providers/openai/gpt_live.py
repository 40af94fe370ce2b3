"""GPT-Live: OpenAI's full-duplex voice API over a WebSocket, as a ``RealtimeModel``.

``from rejoinder.providers.openai.gpt_live import GPTLive``;
``AgentSession(llm=GPTLive(backend_model="gpt-5.6-luna"), ...)``.

The voice model hears and speaks continuously and hands work that needs tools to a
backend Responses model (``delegation="responses"``). This module does the I/O: one
WebSocket per session (``_gpt_live_session``: reconnected when lost, recycled when
asked), a writer that keeps client events in order, and a reader that hands server frames
to the sans-I/O ``ConnectionState`` (``_gpt_live_state``), which turns them into
``RealtimeEvent`` facts. Wire formats live in ``_gpt_live_protocol``, socket helpers in
``_gpt_live_io``. This module is the model: its settings, checked up front.

``aiohttp`` and numpy are imported on first use, so importing this module is cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...models.realtime import (
    RealtimeModel,
)
from .._retry import RetryPolicy
from ._auth import DEFAULT_BASE_URL as DEFAULT_BASE_URL  # kept importable from here
from ._auth import base_url_from, require_api_key
from ._gpt_live_protocol import (
    SAMPLE_RATE,
    BackendSettings,
    Delegation,
    Options,
    check_service_tier,
    handshake_headers,
    live_endpoint,
)
from ._gpt_live_session import GPTLiveSession
from ._realtime_wire import (
    G711_RATE,
    AudioFormatOption,
    check_audio_format,
)

if TYPE_CHECKING:
    pass

__all__ = ["GPTLive", "GPTLiveSession"]


class GPTLive(RealtimeModel):
    """The GPT-Live voice model with backend (Responses) delegation.

    ``backend_*``, ``tool_choice``, ``parallel_tool_calls``, ``reasoning``, ``text`` and
    ``max_output_tokens`` configure the backend model that runs the tools
    (``delegation.responses``); ``None`` leaves a setting to the service.
    ``service_tier`` is the voice session's processing tier (the ``OpenAI-Service-Tier``
    handshake header), ``backend_service_tier`` the backend's (its ``service_tier``; it
    defaults to ``service_tier``): ``"auto"``, ``"default"``, ``"flex"``, ``"priority"``
    or ``"ultrafast"``, ``None`` for the account default.

    ``audio_format`` is the wire audio, the same for input and output: ``"pcm"`` (24 kHz
    PCM16) or ``"pcmu"``/``"pcma"`` (8 kHz G.711 μ-law/A-law: 8 kHz microphone frames
    are encoded with no resampling, and agent audio comes out as 8 kHz frames, which a
    phone line plays as they are). ``"auto"``, the default, picks ``"pcmu"`` when the
    session's microphone runs at 8 kHz (``RealtimeConfig.input_sample_rate``: a phone
    call), else ``"pcm"``. On Azure,
    ``base_url`` is the resource endpoint and ``backend_model`` is required in practice.
    ``base_url`` defaults to ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.

    ``start`` tries the first connection again after a transient failure (cannot connect,
    connection cut, HTTP 429 or 5xx to the upgrade) up to ``max_retries`` times (0: never),
    waiting ``retry_backoff`` seconds, doubling each time up to ``retry_backoff_cap``, with
    jitter; a ``Retry-After`` of up to 30 s is honoured instead. 401/403/404, a timeout, or
    a refused session fail at once. The session counts them in ``connect_retries``. A lost
    connection is reconnected by ``max_reconnect_attempts`` and ``reconnect_backoff``.

    ``recycle_after`` (seconds, off by default) replaces the connection before the
    service's maximum session length: at the first quiet moment after it (the agent not
    speaking, the user not in a turn, nothing owed by the backend or by us for a client
    delegation) the session is closed with ``session.close`` and a new one opened with
    the history re-seeded and the mute re-applied; the user's audio in between is held
    for the new connection, and no ``ConnectionLost`` is reported (nothing was lost). An
    ``expired`` close from the service at a quiet moment is handled the same way.
    """

    duplex = True
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        *,
        model: str = "gpt-live-1",
        delegation: Delegation = "responses",
        api_key: str | None = None,
        base_url: str | None = None,
        voice: str | Mapping[str, str] = "marin",
        backend_model: str | None = None,
        backend_instructions: str | None = None,
        tool_choice: str | Mapping[str, Any] = "auto",
        parallel_tool_calls: bool | None = True,
        reasoning: Mapping[str, Any] | None = None,
        text: Mapping[str, Any] | None = None,
        service_tier: str | None = None,
        backend_service_tier: str | None = None,
        max_output_tokens: int | None = None,
        audio_format: AudioFormatOption = "auto",
        connect_timeout: float = 10.0,
        close_timeout: float = 5.0,
        max_reconnect_attempts: int = 3,
        reconnect_backoff: float = 0.5,
        recycle_after: float | None = None,
        user_turn_silence: float = 0.8,
        burst_threshold: float = 0.0006,
        burst_end_silence: float = 0.8,
        burst_pause_after: float = 0.2,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
    ) -> None:
        if recycle_after is not None and not recycle_after > 0:
            raise ValueError("recycle_after must be positive (seconds), or None")
        if not 0 < burst_pause_after <= burst_end_silence:
            raise ValueError("burst_pause_after must be > 0 and at most burst_end_silence")
        if delegation not in ("responses", "client"):
            raise ValueError(f"delegation must be 'responses' or 'client', got {delegation!r}")
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        check_service_tier(service_tier, "service_tier")
        check_service_tier(backend_service_tier, "backend_service_tier")
        check_audio_format(audio_format, "GPTLive")
        if audio_format in ("pcmu", "pcma"):
            self.sample_rate = G711_RATE  # "auto" decides per session
        key = require_api_key(api_key, "GPTLive")
        self._options = Options(
            model=model,
            api_key=key,
            endpoint=live_endpoint(base_url_from(base_url)),
            voice=voice,
            backend=BackendSettings(
                model=backend_model,
                instructions=backend_instructions,
                tool_choice=tool_choice,
                parallel_tool_calls=parallel_tool_calls,
                reasoning=reasoning,
                text=text,
                service_tier=(
                    backend_service_tier if backend_service_tier is not None else service_tier
                ),
                max_output_tokens=max_output_tokens,
            ),
            connect_timeout=connect_timeout,
            close_timeout=close_timeout,
            max_reconnect_attempts=max_reconnect_attempts,
            reconnect_backoff=reconnect_backoff,
            user_turn_silence=user_turn_silence,
            burst_threshold=burst_threshold,
            burst_end_silence=burst_end_silence,
            burst_pause_after=burst_pause_after,
            retry=retry,
            audio_format=audio_format,
            service_tier=service_tier,
            delegation=delegation,
            recycle_after=recycle_after,
        )

    @property
    def model(self) -> str:
        return self._options.model

    @property
    def provider(self) -> str:
        return "openai"

    @property
    def url(self) -> str:
        """The WebSocket URL sessions connect to."""
        return self._options.endpoint.url

    @property
    def headers(self) -> dict[str, str]:
        """The handshake headers (they carry the API key: do not log them)."""
        options = self._options
        return handshake_headers(
            options.api_key, azure=options.endpoint.azure, service_tier=options.service_tier
        )

    def session(self) -> GPTLiveSession:
        return GPTLiveSession(self._options)

    def __repr__(self) -> str:
        return f"GPTLive(model={self._options.model!r}, url={self.url!r})"
