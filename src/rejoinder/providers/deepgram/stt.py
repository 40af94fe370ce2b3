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

How the session's utterances map onto one long-lived stream. ``push`` only queues the
frame; a background task (started on the first push) connects, sends audio in order,
sends KeepAlive while no utterance is spoken, and reads results. Each utterance notes the
stream time its first frame went out at, so a result is credited to the utterance whose
audio it covers, and a late answer for the previous utterance never leaks into the next.
``recognize`` sends Finalize after the utterance's audio and returns the joined
``is_final`` transcripts once the answer with ``from_finalize`` arrives, or at once when
the last result already was ``speech_final`` (Deepgram's endpointing found the end); it
waits ``finalize_timeout`` at most, then returns what it has (the interim included).

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
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...models.stt import StreamingSTT, STTError
from .. import _ws
from .._audio_chunks import pcm16_mono, resampler_tail
from .._retry import RetryPolicy
from . import _wire

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler

__all__ = ["STT"]

logger = logging.getLogger("rejoinder.providers.deepgram")

_CLOSE = object()  # queued by aclose: send CloseStream and stop
_EPSILON = 1e-3  # seconds: stream times are floats rounded by the server


class _Utterance:
    """One utterance of the session on the stream: what was heard of it so far."""

    def __init__(self, on_interim: Callable[[str], None] | None) -> None:
        self.on_interim = on_interim
        self.finals: list[str] = []
        self.interim = ""
        self.speech_final = False  # the latest final result ended with speech_final
        self.connection: int | None = None  # the connection its audio went out on
        self.start = 0.0  # stream time of its first audio on that connection
        self.resampler: Resampler | None = None
        self.finalize_sent = False
        self.dropped = False  # reset(): its results are ignored
        self.error: STTError | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None

    def text(self) -> str:
        return " ".join(part for part in (*self.finals, self.interim) if part)


class STT(StreamingSTT):
    """Deepgram live transcription: ``deepgram.STT(model="nova-3", language="en")``."""

    provider = "deepgram"

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
            model, language: Deepgram's ``model`` and ``language`` (BCP-47; None lets a
                multilingual model decide).
            api_key: sent as ``Authorization: Token``; defaults to ``$DEEPGRAM_API_KEY``.
                Required for the cloud API; a self-hosted ``base_url`` may do without.
            base_url: the API root, up to but excluding ``/listen``; defaults to
                ``$DEEPGRAM_BASE_URL``, then ``wss://api.deepgram.com/v1``.
            sample_rate: the rate audio is sent at (frames at other rates are resampled,
                multi-channel frames mixed down to mono).
            interim_results: ask for interim transcripts (reported to ``on_interim``).
            endpointing_ms: Deepgram's endpointing silence; None turns it off.
            utterance_end_ms, vad_events, smart_format, punctuate: as documented by
                Deepgram (``utterance_end_ms`` needs ``interim_results``).
            keepalive_interval: seconds without audio after which a KeepAlive is sent
                (Deepgram closes an idle stream after about 10 s).
            timeout: seconds for each connection attempt (TCP, TLS and the upgrade).
            finalize_timeout: seconds ``recognize`` waits for the final results once
                Finalize is sent.
            close_timeout: seconds ``aclose`` waits for the server to close the stream.
            max_retries, retry_backoff, retry_backoff_cap: the retry policy for a
                connection that cannot be opened (unreachable, HTTP 429 or 5xx).
            extra_query: more query parameters (e.g. ``{"keyterm": "rejoinder"}``).
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
        """
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if not 0 < keepalive_interval < 10:
            raise ValueError("keepalive_interval must be between 0 and 10 seconds")
        if utterance_end_ms is not None and not interim_results:
            raise ValueError("utterance_end_ms needs interim_results=True (Deepgram's rule)")
        for name, value in (
            ("timeout", timeout),
            ("finalize_timeout", finalize_timeout),
            ("close_timeout", close_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        key = _ws.api_key_from(api_key, _wire.KEY_VARIABLE)
        self._base_url = _ws.ws_base_url(base_url, _wire.URL_VARIABLE, _wire.DEFAULT_BASE_URL)
        if key is None and self._base_url == _wire.DEFAULT_BASE_URL:
            raise ValueError(
                "deepgram.STT needs an API key: pass api_key=... or set DEEPGRAM_API_KEY"
            )
        self._model = model
        self._sample_rate = sample_rate
        self._url = _wire.listen_url(
            self._base_url,
            {
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
            },
        )
        self._dialer = _ws.Dialer(
            who="Deepgram",
            owner="deepgram.STT",
            headers={"Authorization": f"Token {key}"} if key else {},
            timeout=timeout,
            close_timeout=close_timeout,
            policy=RetryPolicy(max_retries, retry_backoff, retry_backoff_cap),
            http_session=http_session,
            error=STTError,
            log=logger,
            reason_header=_wire.REASON_HEADER,
        )
        self._connect_timeout = timeout
        self._keepalive_interval = keepalive_interval
        self._finalize_timeout = finalize_timeout
        self._close_timeout = close_timeout
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: _Utterance | None = None  # the utterance push() adds to
        self._open: list[_Utterance] = []  # sent on this connection, not finished
        self._connection = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._stream_time = 0.0
        self._closing = False

    @property
    def model(self) -> str:
        return self._model

    @property
    def url(self) -> str:
        """The ``/listen`` URL with its query, as connected to."""
        return self._url

    @property
    def retries(self) -> int:
        """How many times a connection attempt was retried so far."""
        return self._dialer.retries

    def __repr__(self) -> str:
        return f"deepgram.STT(model={self._model!r}, base_url={self._base_url!r})"

    # -- the session's side ------------------------------------------------------------------

    def push(self, frame: AudioFrame, on_interim: Callable[[str], None]) -> None:
        if self._closing:
            return
        utterance = self._current
        if utterance is None:
            utterance = self._current = _Utterance(on_interim)
        utterance.on_interim = on_interim
        if utterance.error is None:  # a failed utterance's audio goes nowhere
            self._queue.put_nowait((utterance, frame))
            self._ensure_running()

    def reset(self) -> None:
        utterance, self._current = self._current, None
        if utterance is not None:
            utterance.dropped = True
            # Finalize what was sent, so the server does not run it into the next utterance.
            self._queue.put_nowait((utterance, None))

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        if self._closing:
            raise STTError("deepgram.STT is closed")
        utterance, self._current = self._current, None  # the next push starts another
        if utterance is None:  # nothing was pushed: stream the utterance now
            if all(frame.samples_per_channel == 0 for frame in frames):
                return ""
            utterance = _Utterance(None)
            for frame in frames:
                self._queue.put_nowait((utterance, frame))
        self._queue.put_nowait((utterance, None))
        self._ensure_running()
        # Bounded even if the task is stuck: every connection attempt and backoff, then
        # the wait for the final results.
        policy = self._dialer.policy
        bound = (
            self._connect_timeout * (policy.max_retries + 1)
            + policy.retry_backoff_cap * policy.max_retries
            + self._finalize_timeout
            + self._close_timeout
        )
        try:
            async with asyncio.timeout(bound):
                await asyncio.shield(utterance.done)
        except TimeoutError:
            utterance.dropped = True
            raise STTError(
                f"no transcript from Deepgram within {bound:g} s", retryable=True
            ) from None
        except asyncio.CancelledError:
            utterance.dropped = True  # nobody will read it: ignore what comes
            raise
        if utterance.error is not None:
            raise utterance.error
        return " ".join(utterance.finals)

    async def aclose(self) -> None:
        if self._closing:
            return
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            if self._ws is not None:  # connected: end the stream the documented way
                self._queue.put_nowait(_CLOSE)
                await asyncio.wait({task}, timeout=self._close_timeout * 2)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._fail_all(STTError("deepgram.STT was closed", retryable=True))
        with contextlib.suppress(Exception):
            await self._dialer.aclose()

    # -- the background task -----------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._task.add_done_callback(_log_crash)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if item is _CLOSE:
                return
            if self._settled_without_sending(item):
                continue
            try:
                ws = await self._dialer.connect(self._url, may_retry=lambda: not self._closing)
            except STTError as error:
                item[0].error = error
                self._finish(item[0], error)
                self._fail_queued(error)
                continue
            await self._serve(ws, item)
            if self._closing:
                return

    def _settled_without_sending(self, item: tuple[_Utterance, AudioFrame | None]) -> bool:
        """Items that need no (new) connection: a failed or dropped utterance's audio, the
        Finalize of an utterance none of whose audio went out, and anything of an
        utterance begun on an earlier connection."""
        utterance, frame = item
        if utterance.error is not None:
            return True
        if utterance.connection is None:
            if frame is None and not utterance.dropped:
                self._finish(utterance)  # only empty frames: nothing was said
            return utterance.dropped or frame is None
        # Its audio went out on a connection since lost: it is settled with that one.
        return utterance.connection != self._connection or self._ws is None

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse, first: Any) -> None:
        self._connection += 1
        self._stream_time = 0.0
        connection = self._connection
        self._ws = ws
        reader = asyncio.create_task(self._read(ws))
        sender = asyncio.create_task(self._send(ws, connection, first))
        try:
            await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and not reader.done():  # CloseStream sent: let it answer
                await asyncio.wait({reader}, timeout=self._close_timeout)
        finally:
            for task in (sender, reader):
                task.cancel()
            ended = await asyncio.gather(reader, sender, return_exceptions=True)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._close_timeout):
                    await ws.close()
            self._ws = None
            why = ended[0] if isinstance(ended[0], str) else None
            if isinstance(ended[1], Exception) and not isinstance(ended[1], asyncio.CancelledError):
                why = why or f"sending failed: {_ws.describe(ended[1])}"
            self._connection_ended(why or "the connection to Deepgram ended", ws.close_code)

    async def _send(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        connection: int,
        item: Any,
    ) -> None:
        while True:
            if item is _CLOSE:
                await ws.send_str(_wire.CLOSE_STREAM)
                return
            if item is not None:
                await self._send_item(ws, connection, item)
            try:
                async with asyncio.timeout(self._keepalive_interval):
                    item = await self._queue.get()
            except TimeoutError:
                await ws.send_str(_wire.KEEPALIVE)
                item = None

    async def _send_item(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        connection: int,
        item: tuple[_Utterance, AudioFrame | None],
    ) -> None:
        if self._settled_without_sending(item):
            return
        utterance, frame = item
        if utterance.connection is None:
            utterance.connection, utterance.start = connection, self._stream_time
            self._open.append(utterance)
        if frame is not None:
            pcm, utterance.resampler = pcm16_mono(frame, self._sample_rate, utterance.resampler)
            await self._send_pcm(ws, pcm)
            return
        resampler, utterance.resampler = utterance.resampler, None
        # What the resampler still holds ends the utterance.
        await self._send_pcm(ws, resampler_tail(resampler))
        await ws.send_str(_wire.FINALIZE)
        utterance.finalize_sent = True
        utterance.timer = asyncio.get_running_loop().call_later(
            self._finalize_timeout, self._finalize_timed_out, utterance
        )
        self._maybe_finish(utterance)

    async def _send_pcm(self, ws: aiohttp.ClientWebSocketResponse, pcm: bytes) -> None:
        if pcm:  # an empty binary frame would end the stream
            await ws.send_bytes(pcm)
            self._stream_time += len(pcm) / (2 * self._sample_rate)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        """Read until the connection ends; returns why it did."""
        import aiohttp

        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT:
                error = self._on_text(message.data)
                if error is not None:
                    return f"Deepgram reported an error: {error}"
            elif (ended := _ws.ended_by(ws, message, "Deepgram")) is not None:
                return ended[0]
            else:
                logger.debug("deepgram: ignoring a %s message", message.type.name)

    def _on_text(self, text: str) -> str | None:
        """Handle one server message; returns the error it reports, if any."""
        try:
            message = _wire.parse(text)
        except ValueError as exc:
            logger.warning("deepgram: ignoring a malformed message (%s): %.200r", exc, text)
            return None
        if isinstance(message, _wire.ServerError):
            return message.message
        if isinstance(message, _wire.Other):
            if message.type == "Metadata":
                logger.debug("deepgram: request %s", message.data.get("request_id"))
            elif message.type not in ("SpeechStarted", "UtteranceEnd"):
                logger.info("deepgram: ignoring a message of type %s", message.type)
            return None
        utterance = self._owner(message)
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
        if message.from_finalize and utterance.finalize_sent:
            self._finish(utterance)
            return None
        # Once Finalize is sent the session waits for recognize(): no more interims.
        report = not (utterance.dropped or utterance.finalize_sent)
        if utterance.on_interim is not None and report:
            try:
                utterance.on_interim(utterance.text())
            except Exception:
                logger.exception("deepgram: the interim transcript callback failed")
        self._maybe_finish(utterance)
        return None

    def _owner(self, result: _wire.Result) -> _Utterance | None:
        """The open utterance whose audio the result covers (the latest one it reaches)."""
        owner = None
        for utterance in self._open:
            if utterance.start < result.end - _EPSILON:
                owner = utterance
        return owner

    # -- settling utterances -----------------------------------------------------------------

    def _maybe_finish(self, utterance: _Utterance) -> None:
        if utterance.finalize_sent and utterance.speech_final and not utterance.interim:
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

    def _finish(self, utterance: _Utterance, error: STTError | None = None) -> None:
        if utterance.timer is not None:
            utterance.timer.cancel()
        if error is not None and utterance.error is None:
            utterance.error = error
        if not utterance.done.done():
            utterance.done.set_result(None)
        if utterance in self._open:  # and the dropped ones before it: nothing will come
            index = self._open.index(utterance)
            self._open[: index + 1] = [u for u in self._open[:index] if not u.dropped]

    def _fail_queued(self, error: STTError) -> None:
        """Fail what waits in the queue (the connection it needed could not be opened)."""
        kept = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is _CLOSE:
                kept.append(item)
            else:
                item[0].error = item[0].error or error
                self._finish(item[0], error)
        for item in kept:
            self._queue.put_nowait(item)

    def _connection_ended(self, why: str, close_code: int | None) -> None:
        if self._closing and close_code in (1000, None):
            error = STTError("deepgram.STT was closed", retryable=True)
        else:
            retryable = close_code not in _ws.FATAL_CLOSE_CODES
            error = STTError(why, retryable=retryable)
            if self._open:
                logger.warning("deepgram: %s; open utterances fail", why)
        for utterance in list(self._open):
            if not utterance.done.done():
                self._finish(utterance, error)
        self._open.clear()

    def _fail_all(self, error: STTError) -> None:
        self._connection_ended("closed", None)
        self._fail_queued(error)
        if self._current is not None:
            self._finish(self._current, error)


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("deepgram: the connection task failed", exc_info=task.exception())
