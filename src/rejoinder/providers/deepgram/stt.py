"""Streaming speech to text over Deepgram's live transcription WebSocket, ``/v1/listen``.

The protocol, as documented by Deepgram: the API reference for live audio
(https://developers.deepgram.com/reference/speech-to-text/listen-streaming, formerly
https://developers.deepgram.com/reference/streaming), the pages on the control messages
(https://developers.deepgram.com/docs/audio-keep-alive, /docs/finalize,
/docs/close-stream), on endpointing and interim results
(https://developers.deepgram.com/docs/understand-endpointing-interim-results), on
UtteranceEnd (https://developers.deepgram.com/docs/utterance-end), and on errors
(https://developers.deepgram.com/docs/stt-troubleshooting-websocket-data-and-net-errors):

* the client opens ``wss://api.deepgram.com/v1/listen?model=...&encoding=linear16&
  sample_rate=...&channels=1&interim_results=...&endpointing=...`` with the header
  ``Authorization: Token <key>``; a refused upgrade is an HTTP 4xx/5xx whose ``dg-error``
  header says why;
* audio goes up as binary frames (never an empty one: the server takes it as the end);
  ``{"type": "KeepAlive"}`` keeps an idle socket open (it is closed with 1011
  ``NET-0001`` after about 10 s without audio or KeepAlive), ``{"type": "Finalize"}``
  flushes what the server holds, ``{"type": "CloseStream"}`` ends the stream;
* the server answers ``Results`` (``channel.alternatives[0].transcript``, ``is_final``,
  ``speech_final``, ``from_finalize``, ``start``/``duration`` in stream time),
  ``Metadata``, ``SpeechStarted`` and ``UtteranceEnd``; a failure is a close frame
  (1011 ``NET-0000``/``NET-0001``, 1008 ``DATA-0000``...), sometimes after an error message.

How the session's utterances map onto one long-lived stream is ``.._stt_stream``'s (shared
with AssemblyAI): ``push`` only queues the frame; a background task connects, sends audio
in order, sends KeepAlive while no utterance is spoken, and reads results, each credited
to the utterance whose audio it covers (by ``start``/``duration``), so a late answer for
the previous utterance never leaks into the next. ``recognize`` sends Finalize after the
utterance's audio and returns the joined ``is_final`` transcripts once the answer with
``from_finalize`` arrives, or at once when the last result already was ``speech_final``
(Deepgram's endpointing found the end); it waits ``finalize_timeout`` at most, then
returns what it has (the interim included).

Failures. A refused upgrade is retried on 429/5xx and when the server cannot be reached,
as ``max_retries`` and the backoff allow; 401/403 and other refusals raise at once
(``retryable=False``). A connection lost or closed with an error while an utterance is
open makes that utterance's ``recognize`` raise ``STTError(retryable=True)`` (1008 and
other "bad request" closes: ``retryable=False``) rather than return a partial transcript
that would read as the whole turn; the next utterance opens a new connection. Malformed
or unknown server messages are logged and ignored. ``aiohttp`` is imported on first use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._stt_stream import Utterance, UtteranceStreamSTT
from . import _wire

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame

__all__ = ["STT"]

logger = logging.getLogger("rejoinder.providers.deepgram")


class _Utterance(Utterance):
    """One utterance on the stream: what Deepgram heard of it so far."""

    def __init__(self, on_interim: Callable[[str], None] | None) -> None:
        super().__init__(on_interim)
        self.finals: list[str] = []
        self.interim = ""
        self.speech_final = False  # the latest final result ended with speech_final

    def text(self) -> str:
        return " ".join(part for part in (*self.finals, self.interim) if part)


class STT(UtteranceStreamSTT[_Utterance]):
    """Deepgram live transcription: ``deepgram.STT(model="nova-3", language="en")``."""

    provider = "deepgram"
    _server = "Deepgram"
    _log = logger
    _closing_message = _wire.CLOSE_STREAM
    _key_variable, _url_variable = "DEEPGRAM_API_KEY", "DEEPGRAM_BASE_URL"
    _default_base_url = _wire.DEFAULT_BASE_URL

    def __init__(
        self,
        *,
        model: str = "nova-3",
        language: str | None = "en",
        api_key: str | None = None,
        base_url: str | None = None,
        sample_rate: int = 16000,
        interim_results: bool = True,
        endpointing_ms: int | None = 300,
        utterance_end_ms: int | None = None,
        vad_events: bool = False,
        smart_format: bool = True,
        punctuate: bool = True,
        keepalive_interval: float = 4.0,
        timeout: float = 10.0,
        finalize_timeout: float = 2.0,
        close_timeout: float = 2.0,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
        extra_query: Mapping[str, _wire.QueryValue] | None = None,
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """
        Args:
            model: Deepgram's ``model``.
            language: Deepgram's ``language`` (BCP-47; None lets a multilingual model
                decide).
            api_key: sent as ``Authorization: Token``; defaults to ``$DEEPGRAM_API_KEY``.
                Required for the cloud API; a self-hosted ``base_url`` may do without.
            base_url: the API root, up to but excluding ``/listen``; defaults to
                ``$DEEPGRAM_BASE_URL``, then ``wss://api.deepgram.com/v1``.
            sample_rate: the rate audio is sent at (frames at other rates are resampled,
                multi-channel frames mixed down to mono).
            interim_results: ask for interim transcripts (reported to ``on_interim``).
            endpointing_ms: Deepgram's endpointing silence; None turns it off.
            utterance_end_ms: Deepgram's ``utterance_end_ms``, as it documents it (it
                needs ``interim_results``).
            vad_events: Deepgram's ``vad_events``, as it documents it.
            smart_format: Deepgram's ``smart_format``, as it documents it.
            punctuate: Deepgram's ``punctuate``, as it documents it.
            keepalive_interval: seconds without audio after which a KeepAlive is sent
                (Deepgram closes an idle stream after about 10 s).
            timeout: seconds for each connection attempt (TCP, TLS and the upgrade).
            finalize_timeout: seconds ``recognize`` waits for the final results once
                Finalize is sent.
            close_timeout: seconds ``aclose`` waits for the server to close the stream.
            max_retries: how many times a connection that cannot be opened (unreachable,
                HTTP 429 or 5xx) is tried again (0: never).
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
            extra_query: more query parameters (e.g. ``{"keyterm": "rejoinder"}``).
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
        """
        if not 0 < keepalive_interval < 10:
            raise ValueError("keepalive_interval must be between 0 and 10 seconds")
        if utterance_end_ms is not None and not interim_results:
            raise ValueError("utterance_end_ms needs interim_results=True (Deepgram's rule)")
        query: dict[str, _wire.QueryValue | None] = {
            "model": model,
            "language": language,
            "encoding": "linear16",
            "sample_rate": sample_rate,
            "channels": 1,
            "interim_results": interim_results,
            "endpointing": endpointing_ms if endpointing_ms is not None else False,
            "utterance_end_ms": utterance_end_ms,
            "vad_events": vad_events or None,
            "smart_format": smart_format,
            "punctuate": punctuate,
            **dict(extra_query or {}),
        }
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            auth=lambda key: {"Authorization": f"Token {key}"},
            url=lambda root: _wire.listen_url(root, query),
            sample_rate=sample_rate,
            timeout=timeout,
            finalize_timeout=finalize_timeout,
            close_timeout=close_timeout,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            retry_backoff_cap=retry_backoff_cap,
            http_session=http_session,
            reason_header=_wire.REASON_HEADER,
        )
        self._model = model
        self._keepalive_interval = keepalive_interval

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return f"deepgram.STT(model={self._model!r}, base_url={self._base_url!r})"

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        utterance = await self._settle(frames)
        return " ".join(utterance.finals) if utterance is not None else ""

    # -- Deepgram's side of the stream -------------------------------------------------------

    def _new_utterance(self, on_interim: Callable[[str], None] | None) -> _Utterance:
        return _Utterance(on_interim)

    async def _next_item(self, ws: aiohttp.ClientWebSocketResponse) -> Any:
        try:
            async with asyncio.timeout(self._keepalive_interval):
                return await self._queue.get()
        except TimeoutError:
            await ws.send_str(_wire.KEEPALIVE)
            return None

    async def _end_utterance(
        self, ws: aiohttp.ClientWebSocketResponse, utterance: _Utterance
    ) -> None:
        await ws.send_str(_wire.FINALIZE)
        utterance.end_sent = True
        utterance.timer = asyncio.get_running_loop().call_later(
            self._finalize_timeout, self._finalize_timed_out, utterance
        )
        self._maybe_finish(utterance)

    def _on_text(self, text: str) -> tuple[str, int | None] | None:
        try:
            message = _wire.parse(text)
        except ValueError as exc:
            logger.warning("deepgram: ignoring a malformed message (%s): %.200r", exc, text)
            return None
        if isinstance(message, _wire.ServerError):
            return f"Deepgram reported an error: {message.message}", None
        if isinstance(message, _wire.Other):
            if message.type == "Metadata":
                logger.debug("deepgram: request %s", message.data.get("request_id"))
            elif message.type not in ("SpeechStarted", "UtteranceEnd"):
                logger.info("deepgram: ignoring a message of type %s", message.type)
            return None
        utterance = self._owner(message.end)
        if utterance is None or utterance.done.done():
            return None
        if message.is_final:
            if message.transcript:
                utterance.finals.append(message.transcript)
            utterance.interim = ""
            utterance.speech_final = message.speech_final
        else:
            utterance.interim = message.transcript
            utterance.speech_final = utterance.speech_final and not message.transcript
        if message.from_finalize and utterance.end_sent:
            self._finish(utterance)
            return None
        # Once Finalize is sent the session waits for recognize(): no more interims.
        if not (utterance.dropped or utterance.end_sent):
            self._report(utterance, utterance.text())
        self._maybe_finish(utterance)
        return None

    def _maybe_finish(self, utterance: _Utterance) -> None:
        if utterance.end_sent and utterance.speech_final and not utterance.interim:
            self._finish(utterance)  # Deepgram's endpointing already closed the utterance

    def _finalize_timed_out(self, utterance: _Utterance) -> None:
        if utterance.done.done():
            return
        logger.warning(
            "deepgram: no answer to Finalize within %g s; using the transcript so far",
            self._finalize_timeout,
        )
        if utterance.interim:
            utterance.finals.append(utterance.interim)
        self._finish(utterance)
