"""One call's SIP dialog as the answering side (RFC 3261 §12): its ids, its sequence
numbers and how to write a request inside it.

A ``Dialog`` is made from the INVITE that opened it (``Dialog.from_invite``): its
Call-ID, the caller's tag and URI (From), ours (To, with a fresh tag), the caller's
Contact (the *remote target*, the Request-URI of what we send) and the Record-Route set
(our Route headers). ``request(method)`` writes a BYE, REFER or NOTIFY answer's
counterpart with the next local CSeq and a fresh branch.

Requests are sent to the address the INVITE came from, not resolved from the Contact:
a trunk or PBX sends from its signalling address and takes in-dialog requests there
(with Record-Route it is the proxy that routes them on), and no DNS lookup is needed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from .message import SipMessage, new_branch, new_tag, parse_name_address, uri_user
from .sdp import MediaOffer
from .transactions import ServerTransaction

__all__ = ["Address", "Dialog"]

Address = tuple[str, int]


@dataclass
class Dialog:
    """One call: the dialog and where it stands (see the module docstring)."""

    call_id: str
    local_tag: str
    remote_tag: str
    local_uri: str
    """The To header of the INVITE, as the caller wrote it (without our tag)."""
    remote_uri: str
    """The From header of the INVITE, with the caller's tag."""
    remote_target: str
    route_set: list[str]
    peer: Address
    """Where the INVITE came from: responses and our requests go there."""
    contact: str
    """Our Contact header value."""
    invite: SipMessage
    invite_transaction: ServerTransaction
    offer: MediaOffer
    remote_cseq: int
    local_cseq: int = field(default_factory=lambda: secrets.randbelow(10_000) + 1)
    state: str = "offered"
    """``offered`` (INVITE being answered), ``answered`` (200 sent, no ACK yet),
    ``confirmed``, ``ended``."""
    sdp_version: int = 1
    """Our SDP's ``o=`` version: one more with each answer that changes it."""
    answer_sdp: bytes = b""
    reinvite: ServerTransaction | None = None
    reinvite_cseq: int = 0
    hangup_wanted: bool = False
    """We hung up before the caller acknowledged our 200: the BYE goes with the ACK."""

    @classmethod
    def from_invite(
        cls,
        invite: SipMessage,
        peer: Address,
        contact: str,
        offer: MediaOffer,
        transaction: ServerTransaction,
    ) -> Dialog:
        remote = invite.get("From") or ""
        caller_contact = invite.get_all("Contact")
        target = parse_name_address(caller_contact[0]).uri if caller_contact else ""
        if not target:  # a Contact is required in an INVITE; fall back to the From URI
            target = parse_name_address(remote).uri
        return cls(
            call_id=invite.call_id,
            local_tag=new_tag(),
            remote_tag=invite.from_tag,
            local_uri=invite.get("To") or "",
            remote_uri=remote,
            remote_target=target,
            route_set=invite.get_all("Record-Route"),
            peer=peer,
            contact=contact,
            invite=invite,
            invite_transaction=transaction,
            offer=offer,
            remote_cseq=invite.cseq[0],
        )

    @property
    def key(self) -> tuple[str, str, str]:
        """Call-ID, local tag, remote tag: what an in-dialog request must match."""
        return self.call_id, self.local_tag, self.remote_tag

    @property
    def from_number(self) -> str | None:
        return uri_user(parse_name_address(self.remote_uri).uri)

    @property
    def to_number(self) -> str | None:
        return uri_user(parse_name_address(self.local_uri).uri) or uri_user(self.invite.uri or "")

    @property
    def local_address_header(self) -> str:
        """Our side's To/From value: the INVITE's To with our tag."""
        return f"{self.local_uri};tag={self.local_tag}"

    def matches(self, message: SipMessage) -> bool:
        """An in-dialog request from the caller: our tag in To, theirs in From."""
        return (
            message.call_id == self.call_id
            and message.to_tag == self.local_tag
            and message.from_tag == self.remote_tag
        )

    def request(
        self,
        method: str,
        *,
        host: str,
        port: int,
        headers: list[tuple[str, str]] | None = None,
        body: bytes = b"",
    ) -> SipMessage:
        """A new request of ours in this dialog (§12.2.1.1): next CSeq, fresh branch,
        the route set as Route headers."""
        self.local_cseq += 1
        sent_by = f"[{host}]" if ":" in host else host
        lines: list[tuple[str, str]] = [
            ("Via", f"SIP/2.0/UDP {sent_by}:{port};branch={new_branch()};rport"),
            ("Max-Forwards", "70"),
            ("From", self.local_address_header),
            ("To", self.remote_uri),
            ("Call-ID", self.call_id),
            ("CSeq", f"{self.local_cseq} {method}"),
            ("Contact", self.contact),
        ]
        lines.extend(("Route", route) for route in self.route_set)
        lines.extend(headers or [])
        return SipMessage(method=method, uri=self.remote_target, headers=lines, body=body)
