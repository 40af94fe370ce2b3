"""MediaStreamPeer: one phone call's media stream, without the socket.

Fed the text frames the provider sends (``receive_text``) and told when the socket went
away (``client_left``); puts what must be written (media, marks, clear, a close) in its
``Outbox``. On the provider's ``start`` it builds the ``Connection`` the agent's entry
point receives: a microphone at the call's 8 kHz (G.711 decoded with numpy tables; the
VAD and STT resample with soxr), a ``MarkedPlayback`` as the speaker (the session's audio
is resampled to 8 kHz before it gets here, encoded, cut in 20 ms chunks and marked), and
the call's ids and custom parameters (``conn.call``) and its line (``conn.line``, a
``MediaStreamLine``: the agent's keys go out as tones after its queued audio; transfers go
through the ``CallControl`` given as ``control``). Keys pressed become ``dtmf`` session
events. ``stop`` ends the session with reason ``"call ended"``; a socket that drops
without it, with ``"connection lost"``.

A provider is trusted to speak its protocol, but nothing it sends can break a call:
junk frames are logged and dropped (``Ignored``), and a stream that floods (over
``max_messages_per_second`` sustained) or never starts is closed.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...models import g711
from ...models.audio import AudioFrame
from ..connection import Connection, PushAudioInput
from ..mic_clock import MIC_BATCH_INTERVAL
from ..outbox import Outbox
from ..protocol import CloseCode, ServerMessage
from .dialects import CallInfo, Dialect, Ignored, KeyPressed, MarkEchoed, Media, Started, Stopped
from .marks import MarkedPlayback
from .media_line import MediaStreamLine

if TYPE_CHECKING:
    from .carriers.base import CallControl

__all__ = ["MediaStreamPeer", "TelephonyOptions"]

logger = logging.getLogger("rejoinder.io.telephony")


@dataclass(frozen=True, slots=True)
class TelephonyOptions:
    """Settings of the phone media streams (every provider)."""

    public_url: str | None = None
    """The server's public base URL (``https://abc.ngrok.app``), used for the stream URL
    in the webhook answer and for checking Twilio's signature behind a proxy. Without it
    both come from the webhook request itself."""
    twilio_auth_token: str | None = field(default=None, repr=False)
    """With it, webhooks must carry a valid ``X-Twilio-Signature`` (else 403) and media
    sockets must belong to a call an accepted webhook announced."""
    telnyx_public_key: str | None = field(default=None, repr=False)
    """Base64, as Telnyx's portal shows it: with it, Telnyx webhooks must carry a valid
    Ed25519 signature no older than 300 s (else 403)."""
    plivo_auth_token: str | None = field(default=None, repr=False)
    """With it, Plivo webhooks must carry a valid V3 signature (else 403)."""
    mark_interval: float = 0.16
    """Audio between two marks: how fresh the playback truth is (0.1-0.2 s)."""
    lead: float = 1.0
    """Audio sent ahead of real time at most (what a clear has to drop)."""
    max_frame_bytes: int = 64 * 1024
    max_messages_per_second: float = 200.0
    """Sustained inbound rate allowed (a call sends ~50 media messages a second)."""
    burst_seconds: float = 2.0
    start_timeout: float = 10.0
    """Seconds the provider has to send ``start`` after connecting."""
    heartbeat: float | None = 30.0
    max_mic_seconds: float = 5.0
    mic_batch_interval: float = MIC_BATCH_INTERVAL
    """Seconds between two hand-overs of caller audio to the sessions, shared by all of
    them (see ``mic_clock``): a frame waits up to this long. 0: each at once."""
    max_queued_messages: int = 4000
    max_queued_audio_bytes: int = 256 * 1024
    close_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not 0.02 <= self.mark_interval <= 1.0:
            raise ValueError("mark_interval must be between 0.02 and 1.0 seconds")
        if self.max_messages_per_second <= 0 or self.burst_seconds <= 0:
            raise ValueError("max_messages_per_second and burst_seconds must be positive")


_DECODE = {"mulaw": g711.ulaw_decode, "alaw": g711.alaw_decode}
_ENCODE = {"mulaw": g711.ulaw_encode, "alaw": g711.alaw_encode}

Admit = Callable[[CallInfo], str | None]
"""Decides whether a started call may go on: None to accept, else the refusal's reason."""


class _RateLimit:
    """A token bucket on loop time passed in: ``rate`` a second, ``burst`` seconds deep."""

    def __init__(self, rate: float, burst: float) -> None:
        self._rate, self._capacity = rate, rate * burst
        self._tokens = self._capacity
        self._at: float | None = None

    def take(self, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class MediaStreamPeer:
    """One call's media stream in ``dialect``, without the socket."""

    def __init__(
        self,
        dialect: Dialect,
        options: TelephonyOptions | None = None,
        *,
        remote: str | None = None,
        query: Mapping[str, str] | None = None,
        admit: Admit | None = None,
        control: CallControl | None = None,
    ) -> None:
        """``control``: the provider's call control (REST) for this account, which the
        line transfers calls through (None: transfers fail with a clear message)."""
        self.dialect = dialect
        self.options = opts = options or TelephonyOptions()
        self.outbox = Outbox(
            max_messages=opts.max_queued_messages, max_audio_bytes=opts.max_queued_audio_bytes
        )
        self.connection: Connection | None = None
        self.line: MediaStreamLine | None = None
        """The call's phone line (``conn.line``), once it started."""
        self.call: CallInfo | None = None
        self.junk = 0
        """Frames ignored as junk (logged once each kind)."""
        self._remote = remote
        self._query = dict(query or {})
        self._admit = admit
        self._control = control
        self._limit = _RateLimit(opts.max_messages_per_second, opts.burst_seconds)
        self._playback: MarkedPlayback | None = None
        self._reported: set[str] = set()
        self._stopped = False

    # ---------------------------------------------------------- receiving

    def receive_text(self, text: str, now: float) -> Connection | None:
        """A text frame at loop time ``now``. Returns the ``Connection`` on ``start``."""
        if self.outbox.closing:
            return None
        if not self._limit.take(now):
            self._close(CloseCode.POLICY_VIOLATION, "message rate over the limit")
            return None
        if len(text) > self.options.max_frame_bytes:
            self._close(CloseCode.MESSAGE_TOO_BIG, "frame over the size limit")
            return None
        fact = self.dialect.parse(text)
        if isinstance(fact, Media):
            self._media(fact.audio)
        elif isinstance(fact, MarkEchoed):
            if self._playback is not None:
                self._playback.on_mark(fact.name)
        elif isinstance(fact, KeyPressed):
            if self.connection is not None:
                self.connection.keypad(fact.digit)
        elif isinstance(fact, Started):
            return self._start(fact.call)
        elif isinstance(fact, Stopped):
            self._stopped = True
            self.client_left("call ended")
        elif fact.event == "start" and self.call is None and fact.problem is not None:
            # The call cannot go on (a codec we do not speak, no call id): say why now
            # rather than wait for the start timeout.
            self._close(CloseCode.POLICY_VIOLATION, f"bad start: {fact.problem}")
        elif fact.problem is not None:
            self._junk(fact)
        return None

    def receive_bytes(self, data: bytes) -> None:
        """Providers speak JSON text only: a binary frame is someone else."""
        self._close(CloseCode.UNSUPPORTED_DATA, "binary frames are not part of this protocol")

    def client_left(self, reason: str = "connection lost") -> None:
        self.outbox.close(CloseCode.NORMAL, reason)
        if self.connection is not None:
            self.connection.client_left(reason)

    @property
    def stopped(self) -> bool:
        """The provider said ``stop`` (the call or the stream ended on its side)."""
        return self._stopped

    # ------------------------------------------------------------ internal

    def _start(self, call: CallInfo) -> Connection | None:
        if self.call is not None:
            self._junk(Ignored("start", "a second start"))
            return None
        refusal = self._admit(call) if self._admit is not None else None
        if refusal is not None:
            logger.warning("refusing %s stream %s: %s", call.provider, call.stream_id, refusal)
            self._close(CloseCode.POLICY_VIOLATION, refusal)
            return None
        self.call = call
        opts = self.options
        self._playback = MarkedPlayback(
            call.sample_rate,
            send_media=self._send_media,
            send_mark=self._send_mark,
            send_clear=self._send_clear,
            send_tail=self._send_tail,
            mark_interval=opts.mark_interval,
            lead=opts.lead,
        )
        self.connection = Connection(
            transport=call.provider,
            audio_input=PushAudioInput(
                call.sample_rate,
                max_seconds=opts.max_mic_seconds,
                batch_interval=opts.mic_batch_interval,
            ),
            audio_output=self._playback,
            send=_no_client_channel,
            remote=self._remote,
            query=self._query,
            id=f"{call.provider}-{call.stream_id}"[:96],
            call=call,
        )
        self.line = MediaStreamLine(self._playback, call, self._control)
        self.connection.line = self.line
        return self.connection

    def _media(self, audio: bytes) -> None:
        conn, call = self.connection, self.call
        if conn is None or call is None:
            self._junk(Ignored("media", "media before start"))
            return
        if audio and not conn.audio_input.push(
            AudioFrame(_DECODE[call.codec](audio), call.sample_rate)
        ):
            self._junk(Ignored("media", "caller audio arrives faster than it is heard"))

    async def _send_media(self, frame: AudioFrame) -> None:
        await self.outbox.put_audio(self._media_message(frame))

    def _send_tail(self, frame: AudioFrame) -> None:
        self.outbox.put_audio_now(self._media_message(frame))

    def _media_message(self, frame: AudioFrame) -> str:
        call = self.call
        assert call is not None
        payload = base64.b64encode(_ENCODE[call.codec](frame.data)).decode("ascii")
        return self.dialect.encode(self.dialect.media_message(call, payload))

    def _send_mark(self, name: str) -> None:
        assert self.call is not None
        self.outbox.put_text(self.dialect.encode(self.dialect.mark_message(self.call, name)))

    def _send_clear(self) -> None:
        assert self.call is not None
        self.outbox.clear_audio()  # what was not written yet is never sent
        self.outbox.put_text(self.dialect.encode(self.dialect.clear_message(self.call)))

    def _junk(self, fact: Ignored) -> None:
        self.junk += 1
        key = f"{fact.event}:{fact.problem}"
        if key not in self._reported and len(self._reported) < 32:
            self._reported.add(key)  # once per kind: a flood must not flood the log
            logger.warning("%s stream: ignoring %s", self.dialect.name, fact.problem)

    def _close(self, code: CloseCode, reason: str) -> None:
        logger.warning("%s stream: closing (%s)", self.dialect.name, reason)
        self.outbox.close(code, reason[:120])
        if self.connection is not None:
            self.connection.client_left(reason)


def _no_client_channel(_: ServerMessage) -> None:
    """A phone line has no event channel: states and transcripts stay on the server."""
