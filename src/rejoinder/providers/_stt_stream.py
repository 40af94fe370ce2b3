"""Streaming speech to text over one long-lived WebSocket: how the session's utterances map
onto the stream, decided once for the providers that work this way (Deepgram, AssemblyAI).

``push`` only queues the frame; a background task (started on the first push) connects
(``_ws.Dialer``, with the retry policy), sends each utterance's audio in order as 16-bit
mono PCM at the wire's rate, and reads the server's messages. Each utterance notes the
stream time its first audio went out at, so a result is credited to the utterance whose
audio it covers (``_owner``), and a late answer for the previous utterance never leaks
into the next. ``recognize`` queues the utterance's end, which the provider sends as its
end-of-utterance message, and waits (bounded, even if the task is stuck) until the
provider settles the utterance (``_finish``).

Failures. An utterance whose connection could not be opened fails, and so does what was
queued behind it. A connection lost or closed with an error while an utterance is open
makes that utterance fail with ``STTError`` (retryable unless the close code says the
request itself was wrong) rather than return a partial transcript that would read as the
whole turn; the next utterance opens a new connection.

A provider says what its messages mean: ``_new_utterance``, ``_end_utterance`` (its
end-of-utterance message and how long it waits for the answer), ``_on_text`` (one server
message) and, when it has them, ``_set_up`` (a set-up exchange after the upgrade),
``_next_item`` (what it sends while idle), control items (``Control``: a message for the
open connection, in order with the audio) and ``_send_pcm`` (how audio is cut into
messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from ..models.stt import StreamingSTT, STTError
from . import _ws
from ._audio_chunks import pcm16_mono, resampler_tail
from ._retry import RetryPolicy

if TYPE_CHECKING:
    import aiohttp

    from ..models.audio import AudioFrame
    from ..models.audio_utils import Resampler

__all__ = ["CLOSE", "Control", "Utterance", "UtteranceStreamSTT", "check_seconds"]

CLOSE = object()
"""Queued by ``aclose``: send the provider's closing message and stop."""
_EPSILON = 1e-3  # seconds: stream times are floats rounded by the server


def check_seconds(**limits: float) -> None:
    """Each limit must be a positive number of seconds; the error names the one that is not."""
    for name, value in limits.items():
        if not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value}")


class Control(Protocol):
    """A queued item for the open connection only (a connection opened later carries it
    in its URL already): sent in order with the audio, kept when a connect fails."""

    def message(self) -> str: ...


class Utterance:
    """One utterance of the session on the stream: where its audio went, and how it
    ended. A provider's subclass adds what it heard of it."""

    def __init__(self, on_interim: Callable[[str], None] | None) -> None:
        self.on_interim = on_interim
        self.connection: int | None = None  # the connection its audio went out on
        self.start = 0.0  # stream time of its first audio on that connection
        self.resampler: Resampler | None = None
        self.end_sent = False  # the provider's end-of-utterance message went out
        self.dropped = False  # reset(): what comes for it is ignored
        self.error: STTError | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None


U = TypeVar("U", bound=Utterance)


class UtteranceStreamSTT(StreamingSTT, Generic[U]):
    """The session's utterances on one long-lived stream; see the module docstring."""

    provider: ClassVar[str]
    """``deepgram``: in log lines, and as ``deepgram.STT`` in errors."""
    _server: ClassVar[str]
    """``Deepgram``: the server, in messages."""
    _log: ClassVar[logging.Logger]
    _closing_message: ClassVar[str]
    """Sent by ``aclose`` to end the stream the documented way."""
    _fatal_close_codes: ClassVar[frozenset[int]] = _ws.FATAL_CLOSE_CODES
    """Close codes that fail the open utterances as not retryable."""
    _key_variable: ClassVar[str]
    """``DEEPGRAM_API_KEY``: where the key is found when none is given."""
    _url_variable: ClassVar[str]
    """``DEEPGRAM_BASE_URL``: where the base URL is found when none is given."""
    _default_base_url: ClassVar[str]
    """The cloud API's, which needs a key (a self-hosted server may do without)."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        auth: Callable[[str], Mapping[str, str]],
        url: Callable[[str], str],
        sample_rate: int,
        timeout: float,
        finalize_timeout: float,
        close_timeout: float,
        max_retries: int,
        retry_backoff: float,
        retry_backoff_cap: float,
        http_session: aiohttp.ClientSession | None,
        reason_header: str | None = None,
    ) -> None:
        """The options every such provider takes, checked. ``auth`` gives the headers that
        carry the key, ``url`` the stream's URL under the base URL."""
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        check_seconds(
            timeout=timeout, finalize_timeout=finalize_timeout, close_timeout=close_timeout
        )
        key = _ws.api_key_from(api_key, self._key_variable)
        self._base_url = _ws.ws_base_url(base_url, self._url_variable, self._default_base_url)
        if key is None and self._base_url == self._default_base_url:
            raise ValueError(
                f"{self.provider}.STT needs an API key: pass api_key=... or set "
                f"{self._key_variable}"
            )
        self._url = url(self._base_url)
        self._dialer = _ws.Dialer(
            who=self._server,
            owner=f"{self.provider}.STT",
            headers=auth(key) if key else {},
            timeout=timeout,
            close_timeout=close_timeout,
            policy=RetryPolicy(max_retries, retry_backoff, retry_backoff_cap),
            http_session=http_session,
            error=STTError,
            log=self._log,
            reason_header=reason_header,
        )
        self._connect_timeout = timeout
        self._sample_rate = sample_rate
        self._finalize_timeout = finalize_timeout
        self._close_timeout = close_timeout
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: U | None = None  # the utterance push() adds to
        self._open: list[U] = []  # sent on this connection, not finished
        self._connection = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._stream_time = 0.0
        self._closing = False

    @property
    def url(self) -> str:
        """The URL with its query, as connected to."""
        return self._url

    @property
    def retries(self) -> int:
        """How many times a connection attempt was retried so far."""
        return self._dialer.retries

    # -- what a provider says -----------------------------------------------------------------

    def _new_utterance(self, on_interim: Callable[[str], None] | None) -> U:
        raise NotImplementedError

    async def _end_utterance(self, ws: aiohttp.ClientWebSocketResponse, utterance: U) -> None:
        """Send the end of ``utterance`` (its audio is all out) and set ``end_sent``."""
        raise NotImplementedError

    def _on_text(self, text: str) -> tuple[str, int | None] | None:
        """Handle one server message; returns the error it reports (why, and the code it
        gives, if any), which ends the connection."""
        raise NotImplementedError

    async def _set_up(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """After the upgrade, within the connect timeout: nothing, unless the provider
        has a set-up exchange."""

    def _connection_opened(self) -> None:
        """A new connection starts: forget what belonged to the last one."""

    async def _next_item(self, ws: aiohttp.ClientWebSocketResponse) -> Any:
        """The next item to send, or None after sending something of the provider's own
        (a keep-alive) while waiting."""
        return await self._queue.get()

    async def _send_pcm(self, ws: aiohttp.ClientWebSocketResponse, pcm: bytes) -> None:
        """Send an utterance's audio (the provider may cut it into messages)."""
        await self._send_audio(ws, pcm)

    def _position(self) -> float:
        """The stream time the next audio queued for sending starts at."""
        return self._stream_time

    # -- the session's side ------------------------------------------------------------------

    def push(self, frame: AudioFrame, on_interim: Callable[[str], None]) -> None:
        if self._closing:
            return
        utterance = self._current
        if utterance is None:
            utterance = self._current = self._new_utterance(on_interim)
        utterance.on_interim = on_interim
        if utterance.error is None:  # a failed utterance's audio goes nowhere
            self._queue.put_nowait((utterance, frame))
            self._ensure_running()

    def reset(self) -> None:
        utterance, self._current = self._current, None
        if utterance is not None:
            utterance.dropped = True
            # End what was sent, so the server does not run it into the next utterance.
            self._queue.put_nowait((utterance, None))

    async def _settle(self, frames: Sequence[AudioFrame]) -> U | None:
        """The utterance pushed so far (or ``frames``, when nothing was pushed), once the
        provider settled it; None when there was nothing to hear. Raises its error."""
        if self._closing:
            raise STTError(f"{self.provider}.STT is closed")
        utterance, self._current = self._current, None  # the next push starts another
        if utterance is None:  # nothing was pushed: stream the utterance now
            if all(frame.samples_per_channel == 0 for frame in frames):
                return None
            utterance = self._new_utterance(None)
            for frame in frames:
                self._queue.put_nowait((utterance, frame))
        self._queue.put_nowait((utterance, None))
        self._ensure_running()
        # Bounded even if the task is stuck: every connection attempt and backoff, then
        # the wait for the answer.
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
                f"no transcript from {self._server} within {bound:g} s", retryable=True
            ) from None
        except asyncio.CancelledError:
            utterance.dropped = True  # nobody will read it: ignore what comes
            raise
        if utterance.error is not None:
            raise utterance.error
        return utterance

    async def aclose(self) -> None:
        if self._closing:
            return
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            if self._ws is not None:  # connected: end the stream the documented way
                self._queue.put_nowait(CLOSE)
                await asyncio.wait({task}, timeout=self._close_timeout * 2)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._fail_all(STTError(f"{self.provider}.STT was closed", retryable=True))
        with contextlib.suppress(Exception):
            await self._dialer.aclose()

    # -- the background task -----------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._task.add_done_callback(self._log_crash)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if item is CLOSE:
                return
            if not isinstance(item, tuple) or self._settled_without_sending(item):
                continue  # a control item: the next connection's URL carries it already
            try:
                ws = await self._dialer.connect(
                    self._url, setup=self._set_up, may_retry=lambda: not self._closing
                )
            except STTError as error:
                item[0].error = error
                self._finish(item[0], error)
                self._fail_queued(error)
                continue
            await self._serve(ws, item)
            if self._closing:
                return

    def _settled_without_sending(self, item: tuple[U, AudioFrame | None]) -> bool:
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
        self._connection_opened()
        connection = self._connection
        self._ws = ws
        reader = asyncio.create_task(self._read(ws))
        sender = asyncio.create_task(self._send(ws, connection, first))
        try:
            await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and not reader.done():  # the closing message sent: let it answer
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
                why or f"the connection to {self._server} ended",
                code if code is not None else ws.close_code,
            )

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, connection: int, item: Any) -> None:
        while True:
            if item is CLOSE:
                await ws.send_str(self._closing_message)
                return
            if isinstance(item, tuple):
                await self._send_item(ws, connection, item)
            elif item is not None:
                control: Control = item
                await ws.send_str(control.message())
            item = await self._next_item(ws)

    async def _send_item(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        connection: int,
        item: tuple[U, AudioFrame | None],
    ) -> None:
        if self._settled_without_sending(item):
            return
        utterance, frame = item
        if utterance.connection is None:
            utterance.connection, utterance.start = connection, self._position()
            self._open.append(utterance)
        if frame is not None:
            pcm, utterance.resampler = pcm16_mono(frame, self._sample_rate, utterance.resampler)
            await self._send_pcm(ws, pcm)
            return
        resampler, utterance.resampler = utterance.resampler, None
        # What the resampler still holds ends the utterance.
        await self._send_pcm(ws, resampler_tail(resampler))
        await self._end_utterance(ws, utterance)

    async def _send_audio(self, ws: aiohttp.ClientWebSocketResponse, pcm: bytes) -> None:
        if pcm:  # an empty binary frame may read as the end of the stream
            await ws.send_bytes(pcm)
            self._stream_time += len(pcm) / (2 * self._sample_rate)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> tuple[str, int | None]:
        """Read until the connection ends; returns why it did, and the code it gave."""
        import aiohttp

        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT:
                error = self._on_text(message.data)
                if error is not None:
                    return error
            elif (ended := _ws.ended_by(ws, message, self._server)) is not None:
                return ended
            else:
                self._log.debug("%s: ignoring a %s message", self.provider, message.type.name)

    def _owner(self, end: float) -> U | None:
        """The open utterance whose audio a result ending at ``end`` covers (the latest
        one it reaches)."""
        owner = None
        for utterance in self._open:
            if utterance.start < end - _EPSILON:
                owner = utterance
        return owner

    def _report(self, utterance: U, text: str) -> None:
        """Tell the session what was heard of the utterance so far."""
        if utterance.on_interim is None:
            return
        try:
            utterance.on_interim(text)
        except Exception:
            self._log.exception("%s: the interim transcript callback failed", self.provider)

    # -- settling utterances -----------------------------------------------------------------

    def _finish(self, utterance: U, error: STTError | None = None) -> None:
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
            if isinstance(item, tuple):
                item[0].error = item[0].error or error
                self._finish(item[0], error)
            else:
                kept.append(item)
        for item in kept:
            self._queue.put_nowait(item)

    def _connection_ended(self, why: str, close_code: int | None) -> None:
        if self._closing and close_code in (1000, None):
            error = STTError(f"{self.provider}.STT was closed", retryable=True)
        else:
            error = STTError(why, retryable=close_code not in self._fatal_close_codes)
            if self._open:
                self._log.warning("%s: %s; open utterances fail", self.provider, why)
        for utterance in list(self._open):
            if not utterance.done.done():
                self._finish(utterance, error)
        self._open.clear()

    def _fail_all(self, error: STTError) -> None:
        self._connection_ended("closed", None)
        self._fail_queued(error)
        if self._current is not None:
            self._finish(self._current, error)

    def _log_crash(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log.error(
                "%s: the connection task failed", self.provider, exc_info=task.exception()
            )
