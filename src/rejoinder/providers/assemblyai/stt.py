"""Streaming speech to text over AssemblyAI's Universal-Streaming WebSocket, ``/v3/ws``.

The protocol, as documented by AssemblyAI: the API reference
(https://www.assemblyai.com/docs/api-reference/streaming-api/universal-streaming, and the
AsyncAPI spec it is built from, ``usm-streaming.yml`` in
https://github.com/AssemblyAI/assemblyai-api-spec), the message sequence
(https://www.assemblyai.com/docs/streaming/universal-streaming/message-sequence), turn
detection (https://www.assemblyai.com/docs/speech-to-text/universal-streaming/turn-detection)
and session errors and closures
(https://www.assemblyai.com/docs/streaming/common-session-errors-and-closures). What the
client uses of it is summed up in ``_wire``'s docstring.

How the session's utterances map onto one long-lived stream. ``push`` only queues the
frame; a background task (started on the first push) connects, sends audio in order in
``chunk_ms`` messages, and reads turns. AssemblyAI bills the time a session is open, not
the audio: the stream stays open between utterances (no audio, no keep-alive needed) until
``aclose`` sends Terminate. Each turn is credited to the utterance its first word was
spoken in (by the words' stream times), so a late answer for one utterance never leaks into
the next. ``recognize`` pads the utterance's last chunk with silence, sends ForceEndpoint
and returns the utterance's ended turns (formatted, with ``format_turns``) once the turn
it forced has ended, or at once when every turn of it had ended already (AssemblyAI's own
turn detection found the end). An utterance the server reported no words of (a cough) may
get no answer at all — the documentation does not promise one to a ForceEndpoint with no
turn in progress — so it settles as ``""`` after ``no_words_timeout``; otherwise
``recognize`` waits ``finalize_timeout`` at most, then returns what it has (the words of
a turn still open included).

The turn-end signal. ``transcribe`` gives the session a ``Transcript`` with the words'
confidences and ``end_of_turn_probability``: the ``end_of_turn_confidence`` of the
utterance's last turn. The session's turn-end decision (``session/hearing/turn_end.py``)
takes it as one more signal, not as the decider.

Failures. A refused upgrade is retried on 429/5xx and when the server cannot be reached,
as ``max_retries`` and the backoff allow, and so is a session the server closes before
``Begin`` with a code that is not fatal; 401/403, 1008 and other refusals raise at once
(``retryable=False``). A connection lost or closed with an error while an utterance is
open makes that utterance's ``recognize`` raise ``STTError`` (retryable unless the code
says the request itself was wrong: 1008, 3006, 3007) rather than return a partial
transcript that would read as the whole turn; the next utterance opens a new connection.
Malformed or unknown server messages are logged and ignored. ``aiohttp`` is imported on
first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...models.stt import StreamingSTT, STTError, Transcript
from .. import _ws
from .._audio_chunks import pcm16_mono, resampler_tail
from .._retry import RetryPolicy
from . import _wire

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler

__all__ = ["STT"]

logger = logging.getLogger("rejoinder.providers.assemblyai")

_CLOSE = object()  # queued by aclose: send Terminate and stop
_EPSILON = 1e-3  # seconds: word times are whole milliseconds


class _Utterance:
    """One utterance of the session on the stream: the turns heard in it so far."""

    def __init__(self, on_interim: Callable[[str], None] | None) -> None:
        self.on_interim = on_interim
        self.turns: dict[int, _wire.Turn] = {}  # by turn_order: the latest message of each
        self.ended: set[int] = set()  # turns settled: ended (and formatted, if asked)
        self.reported = ""  # the last interim text reported
        self.connection: int | None = None  # the connection its audio went out on
        self.start = 0.0  # stream time of its first audio on that connection
        self.resampler: Resampler | None = None
        self.endpoint_sent = False
        self.endpoint_at = 0.0  # loop time ForceEndpoint went out
        self.dropped = False  # reset(): its turns are ignored
        self.error: STTError | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None

    def settled(self) -> bool:
        """Every turn of it ended (and there is at least one)."""
        return bool(self.turns) and self.ended == self.turns.keys()

    def text(self) -> str:
        return _wire.text_of(self.turns[order] for order in sorted(self.turns))

    def transcript(self) -> Transcript:
        return _wire.transcript_of([self.turns[order] for order in sorted(self.turns)])


class STT(StreamingSTT):
    """AssemblyAI Universal-Streaming: ``assemblyai.STT()``, key from ``$ASSEMBLYAI_API_KEY``."""

    provider = "assemblyai"

    def __init__(
        self,
        *,
        speech_model: str = "universal-streaming-english",
        api_key: str | None = None,
        base_url: str | None = None,
        sample_rate: int = 16000,
        format_turns: bool = True,
        end_of_turn_confidence_threshold: float | None = None,
        min_end_of_turn_silence_when_confident: int | None = None,
        max_turn_silence: int | None = None,
        keyterms_prompt: Sequence[str] | None = None,
        chunk_ms: int = 50,
        timeout: float = 10.0,
        finalize_timeout: float = 2.0,
        no_words_timeout: float = 0.5,
        close_timeout: float = 2.0,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
        extra_query: Mapping[str, _wire.QueryValue] | None = None,
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """
        Args:
            speech_model: ``universal-streaming-english`` or
                ``universal-streaming-multilingual``.
            api_key: sent as the ``Authorization`` header; defaults to
                ``$ASSEMBLYAI_API_KEY``. Required for the cloud API.
            base_url: the API root, up to but excluding ``/ws``; defaults to
                ``$ASSEMBLYAI_BASE_URL``, then ``wss://streaming.assemblyai.com/v3``.
            sample_rate: the rate audio is sent at (frames at other rates are resampled,
                multi-channel frames mixed down to mono).
            format_turns: ask for punctuated, cased transcripts (one more message at each
                turn's end, a little later than the unformatted one).
            end_of_turn_confidence_threshold, min_end_of_turn_silence_when_confident,
                max_turn_silence: AssemblyAI's turn detection (None: its defaults, 0.4,
                400 ms and 1280 ms); see also ``update_turn_detection``.
            keyterms_prompt: words and phrases to recognize better.
            chunk_ms: the length of each audio message, 50 to 1000 ms.
            timeout: seconds for each connection attempt (TCP, TLS, the upgrade, Begin).
            finalize_timeout: seconds ``recognize`` waits for the utterance's turns to end
                once ForceEndpoint is sent.
            no_words_timeout: ... when the server reported no words of the utterance yet.
            close_timeout: seconds ``aclose`` waits for the server to end the session.
            max_retries, retry_backoff, retry_backoff_cap: the retry policy for a
                connection that cannot be opened (unreachable, HTTP 429 or 5xx).
            extra_query: more query parameters (e.g. ``{"language_detection": True}``).
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
        """
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if not 50 <= chunk_ms <= 1000:
            raise ValueError(f"chunk_ms must be 50 to 1000 (AssemblyAI's limits), got {chunk_ms}")
        for name, value in (
            ("timeout", timeout),
            ("finalize_timeout", finalize_timeout),
            ("no_words_timeout", no_words_timeout),
            ("close_timeout", close_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        turn_settings = _wire.turn_settings(
            end_of_turn_confidence_threshold,
            min_end_of_turn_silence_when_confident,
            max_turn_silence,
        )
        key = _ws.api_key_from(api_key, _wire.KEY_VARIABLE)
        self._base_url = _ws.ws_base_url(base_url, _wire.URL_VARIABLE, _wire.DEFAULT_BASE_URL)
        if key is None and self._base_url == _wire.DEFAULT_BASE_URL:
            raise ValueError(
                "assemblyai.STT needs an API key: pass api_key=... or set ASSEMBLYAI_API_KEY"
            )
        self._model = speech_model
        self._sample_rate = sample_rate
        self._format_turns = format_turns
        self._params: dict[str, _wire.QueryValue | None] = {
            "speech_model": speech_model,
            "sample_rate": sample_rate,
            "encoding": "pcm_s16le",
            "format_turns": format_turns,
            **turn_settings,
            "keyterms_prompt": list(keyterms_prompt) if keyterms_prompt else None,
            **dict(extra_query or {}),
        }
        self._url = _wire.streaming_url(self._base_url, self._params)
        self._dialer = _ws.Dialer(
            who="AssemblyAI",
            owner="assemblyai.STT",
            headers={"Authorization": key} if key else {},  # the key itself, no scheme
            timeout=timeout,
            close_timeout=close_timeout,
            policy=RetryPolicy(max_retries, retry_backoff, retry_backoff_cap),
            http_session=http_session,
            error=STTError,
            log=logger,
        )
        self._connect_timeout = timeout
        self._session_id: str | None = None
        self._chunk_bytes = 2 * round(sample_rate * chunk_ms / 1000)
        self._finalize_timeout = finalize_timeout
        self._no_words_timeout = min(no_words_timeout, finalize_timeout)
        self._close_timeout = close_timeout
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: _Utterance | None = None  # the utterance push() adds to
        self._open: list[_Utterance] = []  # sent on this connection, not finished
        self._turn_owners: dict[int, _Utterance] = {}  # this connection's turns
        self._connection = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._chunker = _wire.Chunker(self._chunk_bytes)
        self._stream_time = 0.0
        self._closing = False

    @property
    def model(self) -> str:
        return self._model

    @property
    def url(self) -> str:
        """The ``/ws`` URL with its query, as connected to."""
        return self._url

    @property
    def retries(self) -> int:
        """How many times a connection attempt was retried so far."""
        return self._dialer.retries

    @property
    def session_id(self) -> str | None:
        """The id AssemblyAI gave the latest streaming session (its ``Begin`` message)."""
        return self._session_id

    def __repr__(self) -> str:
        return f"assemblyai.STT(speech_model={self._model!r}, base_url={self._base_url!r})"

    def update_turn_detection(
        self,
        *,
        end_of_turn_confidence_threshold: float | None = None,
        min_end_of_turn_silence_when_confident: int | None = None,
        max_turn_silence: int | None = None,
    ) -> None:
        """Change AssemblyAI's turn detection for the rest of the session (the settings
        given; None leaves one as it is): sent as ``UpdateConfiguration`` on the open stream,
        in order with the audio, and used by every connection opened later."""
        settings = _wire.turn_settings(
            end_of_turn_confidence_threshold,
            min_end_of_turn_silence_when_confident,
            max_turn_silence,
        )
        if not settings or self._closing:
            return
        self._params.update(settings)
        self._url = _wire.streaming_url(self._base_url, self._params)
        if self._task is not None and not self._task.done():
            self._queue.put_nowait(_wire.UpdateConfiguration(settings))

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
            # End the server's turn, so it does not run into the next utterance.
            self._queue.put_nowait((utterance, None))

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        return (await self.transcribe(frames)).text

    async def transcribe(self, frames: Sequence[AudioFrame]) -> Transcript:
        """The utterance's words, their confidences and AssemblyAI's end-of-turn
        probability (``end_of_turn_probability``)."""
        if self._closing:
            raise STTError("assemblyai.STT is closed")
        utterance, self._current = self._current, None  # the next push starts another
        if utterance is None:  # nothing was pushed: stream the utterance now
            if all(frame.samples_per_channel == 0 for frame in frames):
                return Transcript("")
            utterance = _Utterance(None)
            for frame in frames:
                self._queue.put_nowait((utterance, frame))
        self._queue.put_nowait((utterance, None))
        self._ensure_running()
        # Bounded even if the task is stuck: every connection attempt and backoff, then
        # the wait for the turns to end.
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
                f"no transcript from AssemblyAI within {bound:g} s", retryable=True
            ) from None
        except asyncio.CancelledError:
            utterance.dropped = True  # nobody will read it: ignore what comes
            raise
        if utterance.error is not None:
            raise utterance.error
        return utterance.transcript()

    async def aclose(self) -> None:
        if self._closing:
            return
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            if self._ws is not None:  # connected: end the session the documented way
                self._queue.put_nowait(_CLOSE)
                await asyncio.wait({task}, timeout=self._close_timeout * 2)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._fail_all(STTError("assemblyai.STT was closed", retryable=True))
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
            if isinstance(item, _wire.UpdateConfiguration) or self._settled_without_sending(item):
                continue  # a setting is in the URL of the next connection already
            try:
                ws = await self._dialer.connect(
                    self._url, setup=self._began, may_retry=lambda: not self._closing
                )
            except STTError as error:
                item[0].error = error
                self._finish(item[0], error)
                self._fail_queued(error)
                continue
            await self._serve(ws, item)
            if self._closing:
                return

    async def _began(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._session_id = await _wire.began(ws, self._url.split("?", 1)[0])

    def _settled_without_sending(self, item: tuple[_Utterance, AudioFrame | None]) -> bool:
        """Items that need no (new) connection: a failed or dropped utterance's audio, the
        end of an utterance none of whose audio went out, and anything of an utterance
        begun on an earlier connection."""
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
        self._chunker = _wire.Chunker(self._chunk_bytes)
        self._turn_owners.clear()
        connection = self._connection
        self._ws = ws
        reader = asyncio.create_task(self._read(ws))
        sender = asyncio.create_task(self._send(ws, connection, first))
        try:
            await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and not reader.done():  # Terminate sent: let it answer
                await asyncio.wait({reader}, timeout=self._close_timeout)
        finally:
            for task in (sender, reader):
                task.cancel()
            ended = await asyncio.gather(reader, sender, return_exceptions=True)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._close_timeout):
                    await ws.close()
            self._ws = None
            why, code = ended[0] if isinstance(ended[0], tuple) else (None, None)
            if isinstance(ended[1], Exception) and not isinstance(ended[1], asyncio.CancelledError):
                why = why or f"sending failed: {_ws.describe(ended[1])}"
            self._connection_ended(
                why or "the connection to AssemblyAI ended",
                code if code is not None else ws.close_code,
            )

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, connection: int, item: Any) -> None:
        while True:
            if item is _CLOSE:
                await ws.send_str(_wire.TERMINATE)
                return
            if isinstance(item, _wire.UpdateConfiguration):
                await ws.send_str(item.message())
            else:
                await self._send_item(ws, connection, item)
            item = await self._queue.get()

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
            utterance.connection = connection
            utterance.start = self._stream_time + self._chunker.pending / (2 * self._sample_rate)
            self._open.append(utterance)
        if frame is not None:
            rate = self._sample_rate
            pcm, utterance.resampler = pcm16_mono(frame, rate, utterance.resampler)
            for chunk in self._chunker.push(pcm):
                await self._send_audio(ws, chunk)
            return
        resampler, utterance.resampler = utterance.resampler, None
        # What the resampler still holds ends the utterance.
        for chunk in self._chunker.push(resampler_tail(resampler)):
            await self._send_audio(ws, chunk)
        await self._send_audio(ws, self._chunker.tail())
        await ws.send_str(_wire.FORCE_ENDPOINT)
        loop = asyncio.get_running_loop()
        utterance.endpoint_sent, utterance.endpoint_at = True, loop.time()
        wait = self._finalize_timeout if utterance.turns else self._no_words_timeout
        utterance.timer = loop.call_later(wait, self._finalize_timed_out, utterance)
        self._maybe_finish(utterance)

    async def _send_audio(self, ws: aiohttp.ClientWebSocketResponse, chunk: bytes) -> None:
        if chunk:
            await ws.send_bytes(chunk)
            self._stream_time += len(chunk) / (2 * self._sample_rate)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> tuple[str, int | None]:
        """Read until the connection ends; returns why it did, and the code it gave."""
        import aiohttp

        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT:
                error = self._on_text(message.data)
                if error is not None:
                    why = f"AssemblyAI reported an error: {error.code} {error.message}"
                    return why, error.code
            elif (ended := _ws.ended_by(ws, message, "AssemblyAI")) is not None:
                return ended
            else:
                logger.debug("assemblyai: ignoring a %s message", message.type.name)

    def _on_text(self, text: str) -> _wire.ServerError | None:
        """Handle one server message; returns the error it reports, if any."""
        try:
            message = _wire.parse(text)
        except ValueError as exc:
            logger.warning("assemblyai: ignoring a malformed message (%s): %.200r", exc, text)
            return None
        if isinstance(message, _wire.ServerError):
            return message
        if isinstance(message, _wire.Turn):
            self._on_turn(message)
        elif isinstance(message, _wire.Termination):
            logger.debug("assemblyai: session ended, %s s of audio", message.audio_seconds)
        elif isinstance(message, _wire.Other) and message.type != "SpeechStarted":
            logger.info("assemblyai: ignoring a message of type %s", message.type)
        return None

    def _on_turn(self, turn: _wire.Turn) -> None:
        utterance = self._turn_owners.get(turn.order)
        if utterance is None:
            if not turn.words:
                return  # nothing says which utterance it belongs to: nothing heard yet
            utterance = self._owner(turn.words[0].end)
            if utterance is None:
                return
            self._turn_owners[turn.order] = utterance
            if utterance.endpoint_sent and not utterance.turns and utterance.timer is not None:
                # The first answer after ForceEndpoint: there are words after all.
                utterance.timer.cancel()
                utterance.timer = asyncio.get_running_loop().call_at(
                    utterance.endpoint_at + self._finalize_timeout,
                    self._finalize_timed_out,
                    utterance,
                )
        if utterance.done.done() or turn.order in utterance.ended:
            return  # settled already: a late partial changes nothing
        utterance.turns[turn.order] = turn
        if turn.end_of_turn and (turn.formatted or not self._format_turns):
            utterance.ended.add(turn.order)
        # Once ForceEndpoint is sent the session waits for recognize(): no more interims.
        if not (utterance.dropped or utterance.endpoint_sent):
            self._report(utterance)
        self._maybe_finish(utterance)

    def _report(self, utterance: _Utterance) -> None:
        text = utterance.text()
        if utterance.on_interim is None or not text or text == utterance.reported:
            return
        utterance.reported = text
        try:
            utterance.on_interim(text)
        except Exception:
            logger.exception("assemblyai: the interim transcript callback failed")

    def _owner(self, word_end: float) -> _Utterance | None:
        """The open utterance a word ending there was spoken in (the latest it reaches)."""
        owner = None
        for utterance in self._open:
            if utterance.start < word_end - _EPSILON:
                owner = utterance
        return owner

    # -- settling utterances -----------------------------------------------------------------

    def _maybe_finish(self, utterance: _Utterance) -> None:
        if utterance.endpoint_sent and utterance.settled():
            self._finish(utterance)  # every turn of it ended: nothing more will come

    def _finalize_timed_out(self, utterance: _Utterance) -> None:
        if utterance.done.done():
            return
        if utterance.turns and not utterance.dropped:
            logger.warning(
                "assemblyai: the turn did not end within %g s of ForceEndpoint; "
                "using the transcript so far",
                self._finalize_timeout,
            )
        self._finish(utterance)

    def _finish(self, utterance: _Utterance, error: STTError | None = None) -> None:
        if utterance.timer is not None:
            utterance.timer.cancel()
        if error is not None and utterance.error is None:
            utterance.error = error
        if not utterance.done.done():
            utterance.done.set_result(None)
        for order in utterance.turns:  # a late message of them finds no open utterance
            if self._turn_owners.get(order) is utterance:
                del self._turn_owners[order]
        if utterance in self._open:  # and the dropped ones before it: nothing will come
            index = self._open.index(utterance)
            self._open[: index + 1] = [u for u in self._open[:index] if not u.dropped]

    def _fail_queued(self, error: STTError) -> None:
        """Fail what waits in the queue (the connection it needed could not be opened)."""
        kept = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is _CLOSE or isinstance(item, _wire.UpdateConfiguration):
                kept.append(item)
            else:
                item[0].error = item[0].error or error
                self._finish(item[0], error)
        for item in kept:
            self._queue.put_nowait(item)

    def _connection_ended(self, why: str, close_code: int | None) -> None:
        if self._closing and close_code in (1000, None):
            error = STTError("assemblyai.STT was closed", retryable=True)
        else:
            error = STTError(why, retryable=close_code not in _wire.FATAL_CLOSE_CODES)
            if self._open:
                logger.warning("assemblyai: %s; open utterances fail", why)
        for utterance in list(self._open):
            if not utterance.done.done():
                self._finish(utterance, error)
        self._open.clear()
        self._turn_owners.clear()

    def _fail_all(self, error: STTError) -> None:
        self._connection_ended("closed", None)
        self._fail_queued(error)
        if self._current is not None:
            self._finish(self._current, error)


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("assemblyai: the connection task failed", exc_info=task.exception())
