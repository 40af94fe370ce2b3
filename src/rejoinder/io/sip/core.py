"""SipCore: the answering side of SIP (a UAS), datagrams in, datagrams and call events out.

``receive(data, source, now)`` and ``poll(now)`` return ``Send``s (bytes for an address)
and events about calls (``CallOffered``, ``CallConfirmed``, ``CallCancelled``,
``CallEnded``, ``MediaChanged``, ``ReferAnswered``, ``TransferNotified``); the endpoint
acts on them and calls back ``accept``, ``reject``, ``hangup`` or ``refer``. No sockets,
no clock: ``deadline`` says when ``poll`` has something to do.

What it answers by itself: 100 Trying at once to an INVITE; 401 with a fresh nonce when
digest credentials are required and missing or wrong (``stale`` when only the nonce
expired); 403 to a source outside ``allow_from``; 488 to an offer without PCMU/PCMA;
487 to an INVITE its CANCEL caught (and 200 to the CANCEL); 200 to BYE, OPTIONS, a
transfer's NOTIFY and keys sent as INFO (``KeysPressed``; 415 to other INFO bodies);
200 with a new answer to a re-INVITE (hold, unhold, a new address);
420 to a request that requires an extension (100rel, session timers: we take none);
481 to a request for a dialog it does not know; 482 to a merged (looped) INVITE; 483 when
Max-Forwards ran out; 405 to methods it knows but does not take, 501 to others; 400 to a
request too broken to use but complete enough to answer. Retransmitted requests get the
same response again; the 200 to an INVITE is repeated until its ACK (Timer G), and a call
whose ACK never comes is ended with a BYE (Timer H). Flooding sources are rate limited.

Responses go back to the address the request came from (RFC 3581's symmetric response,
what a trunk behind NAT needs), not to the Via's sent-by. Only INVITEs are challenged:
a request inside a dialog is bound to it by our random tag, and CANCEL cannot be
challenged (RFC 3261 §22.1).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence

from .bodies import info_key, media_of, offer_of, sipfrag_status
from .dialog import Address, Dialog
from .digest import DigestAuthority
from .events import (
    CallCancelled,
    CallConfirmed,
    CallEnded,
    CallOffered,
    KeysPressed,
    MediaChanged,
    Output,
    Send,
    TransferNotified,
)
from .message import SipMessage, SipParseError, new_tag, parse, response_to
from .outgoing import OutgoingRequests
from .ratelimit import LogThrottle, RateLimiter
from .sdp import Negotiated, NotAcceptable, answer_sdp, negotiate
from .transactions import ServerTransaction, Timers

__all__ = ["ALLOW", "Network", "SipCore"]

logger = logging.getLogger("rejoinder.io.sip")

ALLOW = "INVITE, ACK, CANCEL, BYE, OPTIONS, NOTIFY, INFO"
_KNOWN = frozenset({"REGISTER", "SUBSCRIBE", "PUBLISH", "MESSAGE", "PRACK", "UPDATE", "REFER"})
MAX_TRANSACTIONS = 5000
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SipCore:
    """The UAS state machine (see the module docstring)."""

    def __init__(
        self,
        *,
        port: int,
        advertise: Callable[[Address], str],
        allow_from: Sequence[Network],
        authority: DigestAuthority | None = None,
        timers: Timers | None = None,
        rate_limit: RateLimiter | None = None,
        user_agent: str = "rejoinder",
    ) -> None:
        self.port = port
        self.advertise = advertise
        """Our address as the peer at ``Address`` should see it (Contact, Via, SDP)."""
        self.allow_from = tuple(allow_from)
        self.authority = authority
        self.timers = timers or Timers()
        self.rate_limit = rate_limit or RateLimiter()
        self.user_agent = user_agent
        self.dialogs: dict[tuple[str, str], Dialog] = {}
        """(Call-ID, our tag) -> the call."""
        self._server: dict[str, tuple[ServerTransaction, Address, Dialog | None]] = {}
        self._outgoing = OutgoingRequests(port=port, advertise=advertise, timers=self.timers)
        self._log = LogThrottle(logger)

    # ------------------------------------------------------------ receiving

    def allowed(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.allow_from)

    def receive(self, data: bytes, source: Address, now: float) -> list[Output]:
        """A datagram from ``source``: what to send and what happened."""
        if not self.rate_limit.allow(source[0], now):
            self._log.warn("flood", "SIP from %s over the rate limit: dropped", source[0])
            return []
        if not data.strip(b"\r\n"):
            return []  # a CRLF keep-alive (RFC 5626 §3.5.1)
        try:
            message = parse(data)
        except SipParseError as exc:
            self._log.warn(exc.kind, "malformed SIP from %s dropped: %s", source[0], exc)
            request = exc.request
            if request is not None and self.allowed(source[0]):
                return [
                    Send(
                        response_to(request, 400, "Bad Request", to_tag=new_tag()).to_bytes(),
                        source,
                    )
                ]
            return []
        if not self.allowed(source[0]):
            self._log.warn(
                f"refused {source[0]}",
                "SIP from %s refused with 403: not in SipOptions.allow_from (--sip-allow): %s",
                source[0],
                message.describe(),
            )
            if message.is_request and message.method != "ACK":
                return [
                    Send(
                        response_to(message, 403, "Forbidden", to_tag=new_tag()).to_bytes(), source
                    )
                ]
            return []
        if not message.is_request:
            return self._outgoing.answered(message, now)
        return self._on_request(message, source, now)

    def _on_request(self, request: SipMessage, source: Address, now: float) -> list[Output]:
        method = request.method or ""
        if method == "ACK":
            return self._on_ack(request, now)
        key = _transaction_key(request)
        known = self._server.get(key)
        if known is not None:  # a retransmission: the same answer again, nothing new
            again = known[0].retransmission()
            return [Send(again, source)] if again is not None else []
        if len(self._server) >= MAX_TRANSACTIONS:
            self._log.warn("busy", "too many SIP transactions: %s dropped", request.describe())
            return []
        forwards = (request.get("Max-Forwards") or "70").strip()
        if forwards == "0" and method != "CANCEL":
            return self._answer(request, source, 483, "Too Many Hops", now)
        required = request.get_all("Require")
        if required and method != "CANCEL":  # no extension is ours to require (§8.2.2.3)
            return self._answer(
                request, source, 420, "Bad Extension", now,
                headers=[("Unsupported", ", ".join(required))],
            )  # fmt: skip
        if method == "INVITE":
            if request.to_tag:
                return self._on_reinvite(request, source, now)
            return self._on_invite(request, source, now)
        if method == "CANCEL":
            return self._on_cancel(request, source, now)
        if method == "OPTIONS":
            headers = [("Allow", ALLOW), ("Accept", "application/sdp")]
            return self._answer(request, source, 200, "OK", now, headers=headers)
        if method in ("BYE", "NOTIFY", "INFO"):
            dialog = self._dialog_of(request)
            if dialog is None:
                return self._answer(request, source, 481, "Call/Transaction Does Not Exist", now)
            if method == "BYE":
                return self._on_bye(request, source, dialog, now)
            if method == "INFO":
                return self._on_info(request, source, dialog, now)
            return self._on_notify(request, source, dialog, now)
        if method in _KNOWN:
            return self._answer(
                request, source, 405, "Method Not Allowed", now, headers=[("Allow", ALLOW)]
            )
        return self._answer(
            request, source, 501, "Not Implemented", now, headers=[("Allow", ALLOW)]
        )

    def _on_invite(self, invite: SipMessage, source: Address, now: float) -> list[Output]:
        for dialog in self.dialogs.values():
            first = dialog.invite
            if (first.call_id, first.from_tag, first.cseq) == (
                invite.call_id,
                invite.from_tag,
                invite.cseq,
            ):
                if first.branch == invite.branch:
                    return []  # a late copy, after its transaction ended: nothing new
                # the same INVITE by another path (§8.2.2.2)
                return self._answer(invite, source, 482, "Loop Detected", now)
        if self.authority is not None:
            verdict = self.authority.verify("INVITE", invite.get("Authorization"), now)
            if verdict != "ok":
                if invite.get("Authorization") is not None and verdict != "stale":
                    self._log.warn(
                        f"auth {source[0]}",
                        "SIP INVITE from %s: credentials %s",
                        source[0],
                        verdict,
                    )
                challenge = self.authority.challenge(now, stale=verdict == "stale")
                headers = [("WWW-Authenticate", value) for value in challenge]
                return self._answer(invite, source, 401, "Unauthorized", now, headers=headers)
        try:
            offer = offer_of(invite)
            negotiated = negotiate(offer)
        except NotAcceptable as exc:
            self._log.warn(
                f"488 {source[0]}", "SIP INVITE from %s not acceptable: %s", source[0], exc
            )
            return self._answer(
                invite,
                source,
                488,
                "Not Acceptable Here",
                now,
                headers=[("Warning", f'304 rejoinder "{exc}"')],
            )
        transaction = ServerTransaction(invite=True, timers=self.timers)
        host = self.advertise(source)
        contact = f"<sip:rejoinder@{_host_port(host, self.port)}>"
        dialog = Dialog.from_invite(invite, source, contact, offer, transaction)
        self._server[_transaction_key(invite)] = (transaction, source, dialog)
        self.dialogs[(dialog.call_id, dialog.local_tag)] = dialog
        trying = response_to(invite, 100, "Trying")
        sent = transaction.respond(100, trying.to_bytes(), now)
        assert sent is not None
        return [Send(sent, source), CallOffered(dialog, negotiated)]

    def accept(
        self, dialog: Dialog, negotiated: Negotiated, media: Address, now: float
    ) -> list[Output]:
        """Answer the INVITE 200 OK with our SDP (media at ``media``)."""
        if dialog.state != "offered":
            return []
        dialog.answer_sdp = answer_sdp(
            negotiated,
            host=media[0],
            port=media[1],
            session_id=id(dialog) & 0xFFFFFFFF,
            version=dialog.sdp_version,
        )
        dialog.state = "answered"
        return self._final(
            dialog, dialog.invite, dialog.invite_transaction, 200, "OK", now, body=dialog.answer_sdp
        )

    def reject(
        self,
        dialog: Dialog,
        status: int,
        reason: str,
        now: float,
        headers: Sequence[tuple[str, str]] = (),
    ) -> list[Output]:
        """Refuse the INVITE (486 busy, 503 draining, 500 when the media failed...)."""
        if dialog.state != "offered":
            return []
        dialog.state = "ended"
        return self._final(
            dialog, dialog.invite, dialog.invite_transaction, status, reason, now, headers=headers
        )

    def _final(
        self,
        dialog: Dialog,
        request: SipMessage,
        transaction: ServerTransaction,
        status: int,
        reason: str,
        now: float,
        *,
        body: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
    ) -> list[Output]:
        extra = list(headers)
        if 200 <= status < 300:
            extra = [
                ("Contact", dialog.contact),
                ("Allow", ALLOW),
                *extra,
            ]
        if body:
            extra.append(("Content-Type", "application/sdp"))
        extra.append(("User-Agent", self.user_agent))
        response = response_to(
            request, status, reason, to_tag=dialog.local_tag, headers=extra, body=body
        )
        data = transaction.respond(status, response.to_bytes(), now)
        return [Send(data, dialog.peer)] if data is not None else []

    def _on_ack(self, ack: SipMessage, now: float) -> list[Output]:
        known = self._server.get(_transaction_key(ack))
        if known is not None and known[0].final_status and known[0].final_status >= 300:
            known[0].acknowledged(now)  # the ACK of a refusal: hop by hop, same branch
            return []
        dialog = self._dialog_of(ack)
        if dialog is None:
            return []
        out: list[Output] = []
        for transaction in (dialog.invite_transaction, dialog.reinvite):
            # a 2xx's ACK comes with a branch of its own; a refusal's was matched above
            if transaction is not None and (transaction.final_status or 0) // 100 == 2:
                transaction.acknowledged(now)
        if dialog.state == "answered":
            dialog.state = "confirmed"
            out.append(CallConfirmed(dialog))
            if dialog.hangup_wanted:
                out.extend(self.hangup(dialog, now))
        return out

    def _on_cancel(self, cancel: SipMessage, source: Address, now: float) -> list[Output]:
        found = self._server.get(_transaction_key(cancel, method="INVITE"))
        if found is None:
            return self._answer(cancel, source, 481, "Call/Transaction Does Not Exist", now)
        transaction, _, dialog = found
        out = self._answer(
            cancel, source, 200, "OK", now, to_tag=dialog.local_tag if dialog else None
        )
        if dialog is not None and dialog.state == "offered":
            dialog.state = "ended"
            out += self._final(dialog, dialog.invite, transaction, 487, "Request Terminated", now)
            out.append(CallCancelled(dialog))
        return out

    def _on_reinvite(self, invite: SipMessage, source: Address, now: float) -> list[Output]:
        dialog = self._dialog_of(invite)
        if dialog is None or dialog.state == "ended":
            return self._answer(invite, source, 481, "Call/Transaction Does Not Exist", now)
        if invite.cseq[0] <= dialog.remote_cseq or dialog.state == "offered":
            # out of order, or before our answer to the first INVITE (§14.2)
            return self._answer(
                invite, source, 500, "Server Internal Error", now, headers=[("Retry-After", "1")]
            )
        dialog.remote_cseq = invite.cseq[0]
        transaction = ServerTransaction(invite=True, timers=self.timers)
        self._server[_transaction_key(invite)] = (transaction, source, dialog)
        dialog.reinvite = transaction
        if not invite.body:  # no offer: ours again, unchanged (§14.2)
            return self._final(dialog, invite, transaction, 200, "OK", now, body=dialog.answer_sdp)
        try:
            offer = offer_of(invite)
            negotiated = negotiate(offer)
        except NotAcceptable as exc:  # the call goes on as it was (§14.2)
            return self._final(
                dialog,
                invite,
                transaction,
                488,
                "Not Acceptable Here",
                now,
                headers=[("Warning", f'304 rejoinder "{exc}"')],
            )
        if (offer.session_id, offer.session_version) != (
            dialog.offer.session_id,
            dialog.offer.session_version,
        ):
            dialog.sdp_version += 1
        dialog.offer = offer
        media = media_of(dialog.answer_sdp)
        dialog.answer_sdp = answer_sdp(
            negotiated,
            host=media[0],
            port=media[1],
            session_id=id(dialog) & 0xFFFFFFFF,
            version=dialog.sdp_version,
        )
        out = self._final(dialog, invite, transaction, 200, "OK", now, body=dialog.answer_sdp)
        out.append(MediaChanged(dialog, negotiated))
        return out

    def _on_bye(self, bye: SipMessage, source: Address, dialog: Dialog, now: float) -> list[Output]:
        out = self._answer(bye, source, 200, "OK", now, to_tag=dialog.local_tag)
        if dialog.state == "ended":
            return out
        if dialog.state == "offered":  # hung up before our answer (§15.1.2)
            out += self._final(
                dialog, dialog.invite, dialog.invite_transaction, 487, "Request Terminated", now
            )
        dialog.state = "ended"
        out.append(CallEnded(dialog, "call ended"))
        return out

    def _on_info(
        self, info: SipMessage, source: Address, dialog: Dialog, now: float
    ) -> list[Output]:
        """Keys as INFO (``application/dtmf-relay``'s ``Signal=5``, ``application/dtmf``);
        an empty INFO is a keep-alive; any other body is not ours (415)."""
        if not info.body.strip():
            return self._answer(info, source, 200, "OK", now, to_tag=dialog.local_tag)
        key = info_key(info)
        if key is None:
            headers = [("Accept", "application/dtmf-relay, application/dtmf")]
            return self._answer(
                info, source, 415, "Unsupported Media Type", now, headers=headers,
                to_tag=dialog.local_tag,
            )  # fmt: skip
        out = self._answer(info, source, 200, "OK", now, to_tag=dialog.local_tag)
        out.append(KeysPressed(dialog, key))
        return out

    def _on_notify(
        self, notify: SipMessage, source: Address, dialog: Dialog, now: float
    ) -> list[Output]:
        event = (notify.get("Event") or "").split(";", 1)[0].strip().lower()
        if event != "refer":
            return self._answer(notify, source, 489, "Bad Event", now, to_tag=dialog.local_tag)
        out = self._answer(notify, source, 200, "OK", now, to_tag=dialog.local_tag)
        status = sipfrag_status(notify.body)
        state = (notify.get("Subscription-State") or "").lower()
        if status is not None:
            final = status >= 200 or state.startswith("terminated")
            out.append(TransferNotified(dialog, status, final))
        return out

    # -------------------------------------------------------------- sending

    def hangup(self, dialog: Dialog, now: float) -> list[Output]:
        """End an answered call with a BYE (sent once its 200 was acknowledged, §15)."""
        if dialog.state == "answered":
            dialog.hangup_wanted = True
            return []
        if dialog.state != "confirmed":
            return []
        dialog.state = "ended"
        return self._outgoing.send(dialog, "BYE", now)

    def refer(self, dialog: Dialog, target: str, now: float) -> list[Output]:
        """Ask the caller's side to call ``target`` (a blind transfer, RFC 3515)."""
        if dialog.state != "confirmed":
            raise RuntimeError("a transfer needs an answered, acknowledged call")
        headers = [("Refer-To", f"<{target}>"), ("Referred-By", dialog.contact)]
        return self._outgoing.send(dialog, "REFER", now, headers)

    def _answer(
        self,
        request: SipMessage,
        source: Address,
        status: int,
        reason: str,
        now: float,
        *,
        headers: Sequence[tuple[str, str]] = (),
        to_tag: str | None = None,
    ) -> list[Output]:
        """A response through a new server transaction (so retransmissions get it too)."""
        transaction = ServerTransaction(invite=request.method == "INVITE", timers=self.timers)
        self._server[_transaction_key(request)] = (transaction, source, None)
        response = response_to(
            request,
            status,
            reason,
            to_tag=to_tag or new_tag(),
            headers=[*headers, ("User-Agent", self.user_agent)],
        )
        data = transaction.respond(status, response.to_bytes(), now)
        return [Send(data, source)] if data is not None else []

    # --------------------------------------------------------------- timers

    @property
    def deadline(self) -> float | None:
        times = [transaction.deadline for transaction, _, _ in self._server.values()]
        present = [t for t in times if t is not None]
        present += self._outgoing.deadlines
        return min(present) if present else None

    def poll(self, now: float) -> list[Output]:
        """Retransmissions and timeouts due at ``now``."""
        out: list[Output] = []
        for key, (transaction, peer, dialog) in list(self._server.items()):
            data = transaction.poll(now)
            if data is not None:
                out.append(Send(data, peer))
            if transaction.done:
                del self._server[key]
                if transaction.timed_out and dialog is not None and dialog.state == "answered":
                    dialog.state = "confirmed"  # to send the BYE §13.3.1.4 asks for
                    out.append(CallEnded(dialog, "no ACK"))
                    out.extend(self.hangup(dialog, now))
        out.extend(self._outgoing.poll(now))
        for ids, call in list(self.dialogs.items()):
            if call.state == "ended" and not self._busy(call):
                del self.dialogs[ids]
        self.rate_limit.prune(now)
        return out

    def _busy(self, dialog: Dialog) -> bool:
        return any(d is dialog for _, _, d in self._server.values()) or self._outgoing.involve(
            dialog
        )

    def _dialog_of(self, request: SipMessage) -> Dialog | None:
        dialog = self.dialogs.get((request.call_id, request.to_tag))
        return dialog if dialog is not None and dialog.matches(request) else None


def _transaction_key(request: SipMessage, method: str | None = None) -> str:
    """RFC 3261 §17.2.3: the top Via's branch and the method (ACK matches its INVITE);
    the older RFC 2543 peers without the magic cookie by Call-ID, CSeq and From tag."""
    kind = method or request.method or ""
    kind = "INVITE" if kind == "ACK" else kind
    branch = request.branch
    if branch.startswith("z9hG4bK"):
        return f"{branch}|{kind}"
    return f"{request.call_id}|{request.cseq[0]}|{request.from_tag}|{kind}"


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
