"""MediaStreamLine: the ``PhoneLine`` of a call carried by a provider's media stream.

Keys go out as in-band DTMF tones in the call's own audio (``keypad_tones.dtmf_tones``),
through the stream's ``MarkedPlayback``: after the agent audio already queued, paced at
real time, cut by a clear like any audio, and never counted as the agent's voice (no
``speaking``, no transcript). ``send_dtmf`` returns when the mark put after the tones
comes back: the provider echoes it once it has played the tones to the far end, which is
the same playback truth ``speaking`` is built on.

Why tones rather than a message: the media-stream protocols have no outbound keypad
message. Twilio's bidirectional stream takes ``media``, ``mark`` and ``clear`` only (its
REST alternative, ``<Play digits>``, replaces the call's TwiML and so ends the
``<Connect><Stream>``); Telnyx's stream takes ``media``, ``mark`` and ``clear``, and its
keypad command is Call Control's REST ``send_dtmf``, outside the stream's order and
untouched by a clear; Plivo documents ``playAudio``, ``checkpoint`` and ``clearAudio``
(a third-party AsyncAPI description lists a ``sendDTMF`` event that Plivo's own pages do
not). G.711 carries DTMF tones at the levels ``dtmf_tones`` uses, on every provider.

``transfer`` goes through the provider's call-control REST API (a ``CallControl`` given
to the ``MediaStreamPeer``), with the call's id. ``warm_transfer`` plays hold audio on
the line while the control calls a person, briefs them and joins the two calls
(``warm_transfer.py``; the control must be a ``warm_transfer.PersonDialer``, as the
service's is).

References:
- https://www.twilio.com/docs/voice/media-streams/websocket-messages
- https://developers.telnyx.com/api-reference/websockets/stream-call-media-over-websocket
- https://developers.telnyx.com/api-reference/call-commands/send-dtmf
- https://plivo.com/docs/voice/audio-streaming/audio-streaming
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...models.audio import AudioFrame
from .carriers.base import CarrierError
from .line import TransferFailed, WarmTransferLine

if TYPE_CHECKING:
    from .carriers.base import CallControl
    from .dialects import CallInfo
    from .marks import MarkedPlayback

__all__ = ["MAX_SUMMARY", "DTMFInterrupted", "MediaStreamLine", "check_transfer_target"]

_KEYS = re.compile(r"[0-9*#ABCDwW]+")
_E164 = re.compile(r"\+[1-9][0-9]{7,14}")
_SIP = re.compile(r"sips?:[^\s<>\"]{1,250}", re.IGNORECASE)
MAX_KEYS = 64
"""Keys and pauses in one ``send_dtmf`` (a long account number and its pauses fit)."""
MAX_SUMMARY = 1000
"""Characters in a warm transfer's briefing (about a minute of speech)."""


class DTMFInterrupted(RuntimeError):
    """A clear (a barge-in) or the end of the call cut the keys before they had all
    played: the far end may have heard some of them."""


def check_transfer_target(target: str) -> str:
    """``target`` if it is a phone number in E.164 form (``+`` and 8-15 digits) or a
    ``sip:``/``sips:`` URI; ``ValueError`` otherwise."""
    if not isinstance(target, str):
        raise ValueError(f"a transfer target is a string, not {type(target).__name__}")
    if _E164.fullmatch(target) or _SIP.fullmatch(target):
        return target
    raise ValueError(
        f"transfer target {target[:60]!r} is neither an E.164 number (+ and 8-15 digits, "
        "as +15551234567) nor a sip: URI"
    )


class MediaStreamLine(WarmTransferLine):
    """A ``WarmTransferLine`` for the call ``call`` whose agent audio plays through
    ``playback``; ``control`` is the provider's call control (None: no transfers)."""

    def __init__(
        self,
        playback: MarkedPlayback,
        call: CallInfo,
        control: CallControl | None = None,
    ) -> None:
        self._playback = playback
        self._call = call
        self._control = control
        self.keys_sent = ""
        """Keys (and pauses) whose tones the far end played, in order."""

    async def send_dtmf(self, digits: str) -> None:
        """Play ``digits`` as DTMF tones (``0-9 * # A-D``; ``w`` half a second of
        silence, ``W`` a second) after the agent audio already queued; return once the
        far end has played them. Raises ``ValueError`` for other characters and
        ``DTMFInterrupted`` when a clear or the call's end cut them."""
        if not isinstance(digits, str) or not _KEYS.fullmatch(digits):
            raise ValueError(f"DTMF digits are 0-9, *, #, A-D, w and W; got {digits!r:.40}")
        if len(digits) > MAX_KEYS:
            raise ValueError(f"at most {MAX_KEYS} keys and pauses at once; got {len(digits)}")
        if self._playback.closed:
            raise DTMFInterrupted("the call has ended: no keys can be sent")
        from .keypad_tones import dtmf_tones  # numpy tables: only when keys are pressed

        rate = self._call.sample_rate
        tones = AudioFrame(dtmf_tones(digits, sample_rate=rate), rate)
        if not await self._playback.play_signal(tones):
            raise DTMFInterrupted(f"the keys {digits!r} were cut before they all played")
        self.keys_sent += digits

    async def transfer(self, target: str) -> None:
        """Hand the caller to ``target`` (E.164 number or ``sip:`` URI) through the
        provider's call control; ``TransferFailed`` when there is none or the provider
        refuses (the caller stays with the agent), ``ValueError`` for a bad target."""
        check_transfer_target(target)
        control = self._control
        provider = self._call.provider
        if control is None:
            raise TransferFailed(
                f"this {provider} call has no call control: set the provider's REST "
                "credentials to transfer calls"
            )
        if self._playback.closed:
            raise TransferFailed("the call has ended: there is no caller to transfer")
        try:
            await control.transfer(self._call.call_id, target)
        except CarrierError as exc:
            status = f" (HTTP {exc.status})" if exc.status is not None else ""
            raise TransferFailed(
                f"{provider} did not transfer the call to {target}{status}: {exc}"
            ) from exc

    async def warm_transfer(self, target: str, *, summary: str, ring_timeout: float) -> bool:
        """Call ``target`` while the caller hears hold audio; brief the person who answers
        with ``summary``, join the two calls and return True; return False (hold audio
        stopped, that call hung up, the caller still here) when nobody, or a voicemail,
        answers within ``ring_timeout``. ``TransferFailed`` when it could not be tried
        (no call control, no caller ID, the provider refused the call); ``ValueError``
        for a bad target, summary or timeout."""
        check_transfer_target(target)
        if not isinstance(summary, str) or not summary.strip() or len(summary) > MAX_SUMMARY:
            raise ValueError(f"a warm transfer's summary is 1 to {MAX_SUMMARY} characters")
        if not isinstance(ring_timeout, (int, float)) or not 0 < ring_timeout <= 600:
            raise ValueError("ring_timeout is more than 0 and at most 600 seconds")
        control = self._control
        provider = self._call.provider
        if control is None or getattr(control, "call_person", None) is None:
            raise TransferFailed(
                f"this {provider} call has no call control for warm transfers: set the "
                "provider's REST credentials"
            )
        if self._playback.closed:
            raise TransferFailed("the call has ended: there is no caller to transfer")
        caller_id = getattr(control, "our_number", None) or _our_number(self._call)
        if caller_id is None:
            raise TransferFailed("the call's own number is unknown: no caller ID to call from")
        from .warm_transfer import HoldAudio, PersonDialer, run_warm_transfer

        dialer: PersonDialer = control  # type: ignore[assignment]
        return await run_warm_transfer(
            dialer=dialer,
            hold=HoldAudio(self._playback, self._call.sample_rate),
            caller_call_id=self._call.call_id,
            target=target,
            from_=caller_id,
            summary=summary.strip(),
            ring_timeout=float(ring_timeout),
        )


def _our_number(call: CallInfo) -> str | None:
    """The number of ours on this call: what was called (inbound) or called from
    (outbound): the person sees it as the caller ID."""
    if call.parameters.get("direction") == "outbound":
        return call.parameters.get("from") or call.from_number
    return call.to_number or call.parameters.get("To")
