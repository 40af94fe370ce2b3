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

How the session's utterances map onto one long-lived stream is ``.._stt_stream``'s (shared
with Deepgram): ``push`` only queues the frame; a background task connects, sends audio in
order (here in ``chunk_ms`` messages), and reads turns. AssemblyAI bills the time a
session is open, not the audio: the stream stays open between utterances (no audio, no
keep-alive needed) until ``aclose`` sends Terminate. Each turn is credited to the
utterance its first word was spoken in (by the words' stream times), so a late answer for
one utterance never leaks into the next. ``recognize`` pads the utterance's last chunk
with silence, sends ForceEndpoint and returns the utterance's ended turns (formatted, with
``format_turns``) once the turn it forced has ended, or at once when every turn of it had
ended already (AssemblyAI's own turn detection found the end). An utterance the server
reported no words of (a cough) may get no answer at all — the documentation does not
promise one to a ForceEndpoint with no turn in progress — so it settles as ``""`` after
``no_words_timeout``; otherwise ``recognize`` waits ``finalize_timeout`` at most, then
returns what it has (the words of a turn still open included).

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
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ...models.stt import STTError, Transcript
from .._stt_stream import Utterance, UtteranceStreamSTT, check_seconds
from . import _wire

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame

__all__ = ["STT"]

logger = logging.getLogger("rejoinder.providers.assemblyai")


class _Utterance(Utterance):
    """One utterance on the stream: the turns heard in it so far."""

    def __init__(self, on_interim: Callable[[str], None] | None) -> None:
        super().__init__(on_interim)
        self.turns: dict[int, _wire.Turn] = {}  # by turn_order: the latest message of each
        self.ended: set[int] = set()  # turns settled: ended (and formatted, if asked)
        self.reported = ""  # the last interim text reported
        self.endpoint_at = 0.0  # loop time ForceEndpoint went out

    def settled(self) -> bool:
        """Every turn of it ended (and there is at least one)."""
        return bool(self.turns) and self.ended == self.turns.keys()

    def text(self) -> str:
        return _wire.text_of(self.turns[order] for order in sorted(self.turns))

    def transcript(self) -> Transcript:
        return _wire.transcript_of([self.turns[order] for order in sorted(self.turns)])


class STT(UtteranceStreamSTT[_Utterance]):
    """AssemblyAI Universal-Streaming: ``assemblyai.STT()``, key from ``$ASSEMBLYAI_API_KEY``."""

    provider = "assemblyai"
    _server = "AssemblyAI"
    _log = logger
    _closing_message = _wire.TERMINATE
    _fatal_close_codes = _wire.FATAL_CLOSE_CODES
    _key_variable, _url_variable = "ASSEMBLYAI_API_KEY", "ASSEMBLYAI_BASE_URL"
    _default_base_url = _wire.DEFAULT_BASE_URL

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
            end_of_turn_confidence_threshold: AssemblyAI's turn detection: how sure its
                model must be that the turn ended (None: its default, 0.4); see also
                ``update_turn_detection``.
            min_end_of_turn_silence_when_confident: ... the silence, in ms, it waits for
                when it is that sure (None: its default, 400 ms).
            max_turn_silence: ... the silence, in ms, that ends a turn however unsure it
                is (None: its default, 1280 ms).
            keyterms_prompt: words and phrases to recognize better.
            chunk_ms: the length of each audio message, 50 to 1000 ms.
            timeout: seconds for each connection attempt (TCP, TLS, the upgrade, Begin).
            finalize_timeout: seconds ``recognize`` waits for the utterance's turns to end
                once ForceEndpoint is sent.
            no_words_timeout: ... when the server reported no words of the utterance yet.
            close_timeout: seconds ``aclose`` waits for the server to end the session.
            max_retries: how many times a connection that cannot be opened (unreachable,
                HTTP 429 or 5xx) is tried again (0: never).
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
            extra_query: more query parameters (e.g. ``{"language_detection": True}``).
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
        """
        if not 50 <= chunk_ms <= 1000:
            raise ValueError(f"chunk_ms must be 50 to 1000 (AssemblyAI's limits), got {chunk_ms}")
        check_seconds(no_words_timeout=no_words_timeout)
        turn_settings = _wire.turn_settings(
            end_of_turn_confidence_threshold,
            min_end_of_turn_silence_when_confident,
            max_turn_silence,
        )
        self._params: dict[str, _wire.QueryValue | None] = {
            "speech_model": speech_model,
            "sample_rate": sample_rate,
            "encoding": "pcm_s16le",
            "format_turns": format_turns,
            **turn_settings,
            "keyterms_prompt": list(keyterms_prompt) if keyterms_prompt else None,
            **dict(extra_query or {}),
        }
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            auth=lambda key: {"Authorization": key},  # the key itself, no scheme
            url=lambda root: _wire.streaming_url(root, self._params),
            sample_rate=sample_rate,
            timeout=timeout,
            finalize_timeout=finalize_timeout,
            close_timeout=close_timeout,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            retry_backoff_cap=retry_backoff_cap,
            http_session=http_session,
        )
        self._model = speech_model
        self._format_turns = format_turns
        self._session_id: str | None = None
        self._chunk_bytes = 2 * round(sample_rate * chunk_ms / 1000)
        self._chunker = _wire.Chunker(self._chunk_bytes)
        self._no_words_timeout = min(no_words_timeout, finalize_timeout)
        self._turn_owners: dict[int, _Utterance] = {}  # this connection's turns

    @property
    def model(self) -> str:
        return self._model

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

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        return (await self.transcribe(frames)).text

    async def transcribe(self, frames: Sequence[AudioFrame]) -> Transcript:
        """The utterance's words, their confidences and AssemblyAI's end-of-turn
        probability (``end_of_turn_probability``)."""
        utterance = await self._settle(frames)
        return utterance.transcript() if utterance is not None else Transcript("")

    # -- AssemblyAI's side of the stream -----------------------------------------------------

    def _new_utterance(self, on_interim: Callable[[str], None] | None) -> _Utterance:
        return _Utterance(on_interim)

    async def _set_up(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._session_id = await _wire.began(ws, self._url.split("?", 1)[0])

    def _connection_opened(self) -> None:
        self._chunker = _wire.Chunker(self._chunk_bytes)
        self._turn_owners.clear()

    def _position(self) -> float:
        # Audio still in the chunker goes out before this utterance's first audio.
        return self._stream_time + self._chunker.pending / (2 * self._sample_rate)

    async def _send_pcm(self, ws: aiohttp.ClientWebSocketResponse, pcm: bytes) -> None:
        for chunk in self._chunker.push(pcm):
            await self._send_audio(ws, chunk)

    async def _end_utterance(
        self, ws: aiohttp.ClientWebSocketResponse, utterance: _Utterance
    ) -> None:
        await self._send_audio(ws, self._chunker.tail())
        await ws.send_str(_wire.FORCE_ENDPOINT)
        loop = asyncio.get_running_loop()
        utterance.end_sent, utterance.endpoint_at = True, loop.time()
        wait = self._finalize_timeout if utterance.turns else self._no_words_timeout
        utterance.timer = loop.call_later(wait, self._finalize_timed_out, utterance)
        self._maybe_finish(utterance)

    def _on_text(self, text: str) -> tuple[str, int | None] | None:
        try:
            message = _wire.parse(text)
        except ValueError as exc:
            logger.warning("assemblyai: ignoring a malformed message (%s): %.200r", exc, text)
            return None
        if isinstance(message, _wire.ServerError):
            return f"AssemblyAI reported an error: {message.code} {message.message}", message.code
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
            if utterance.end_sent and not utterance.turns and utterance.timer is not None:
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
        if not (utterance.dropped or utterance.end_sent):
            self._report_new(utterance)
        self._maybe_finish(utterance)

    def _report_new(self, utterance: _Utterance) -> None:
        text = utterance.text()
        if text and text != utterance.reported:
            utterance.reported = text
            self._report(utterance, text)

    def _maybe_finish(self, utterance: _Utterance) -> None:
        if utterance.end_sent and utterance.settled():
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
        for order in utterance.turns:  # a late message of them finds no open utterance
            if self._turn_owners.get(order) is utterance:
                del self._turn_owners[order]
        super()._finish(utterance, error)

    def _connection_ended(self, why: str, close_code: int | None) -> None:
        super()._connection_ended(why, close_code)
        self._turn_owners.clear()
