"""SIP messages (RFC 3261 §7, §20, §25): bytes in, a ``SipMessage`` out, and back.

``parse(data)`` returns a request or a response, or raises ``SipParseError`` naming what
was wrong (``kind``) and, when the message got far enough to be answered (a request whose
Via, From, To, Call-ID and CSeq were read), the partial request to answer 400 with
(``error.request``). Nothing else escapes it: any bytes are either a message or that
error (a hypothesis test feeds it junk).

Headers keep their order and their compact forms are expanded (``v`` is ``Via``);
values that may be comma-joined lists (Via, Contact, Route...) are split outside quotes
and angle brackets. ``response_to`` builds the answer to a request as §8.2.6 says: the
Vias, From, To (with our tag), Call-ID and CSeq copied.

Reference: RFC 3261 https://www.rfc-editor.org/rfc/rfc3261 (§7 message format, §8.2.6
responses, §20 header fields, §25 the grammar).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "MAX_MESSAGE_BYTES",
    "NameAddress",
    "SipMessage",
    "SipParseError",
    "new_branch",
    "new_tag",
    "parse",
    "parse_name_address",
    "response_to",
    "uri_user",
]

MAX_MESSAGE_BYTES = 16 * 1024
"""Larger datagrams are dropped unread (a UDP SIP message stays well under 1300 bytes)."""
MAX_HEADERS = 128
BRANCH_COOKIE = "z9hG4bK"
"""RFC 3261 §8.1.1.7: branches that start with it are unique per transaction."""

_COMPACT = {
    "i": "Call-ID",
    "m": "Contact",
    "e": "Content-Encoding",
    "l": "Content-Length",
    "c": "Content-Type",
    "f": "From",
    "s": "Subject",
    "k": "Supported",
    "t": "To",
    "v": "Via",
    "o": "Event",
    "r": "Refer-To",
    "b": "Referred-By",
    "u": "Allow-Events",
}
_CANONICAL = {
    name.lower(): name
    for name in (
        "Call-ID",
        "CSeq",
        "WWW-Authenticate",
        "Max-Forwards",
        "Record-Route",
        "Content-Length",
        "Content-Type",
        "Refer-To",
        "Referred-By",
        "Subscription-State",
        "Retry-After",
        "User-Agent",
    )
}
_LIST_HEADERS = frozenset(
    {
        "via",
        "contact",
        "route",
        "record-route",
        "allow",
        "supported",
        "require",
        "accept",
        "unsupported",
    }
)
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~")


class SipParseError(ValueError):
    """Bytes that are not a SIP message we can take. ``kind`` names the fault for the
    logs (one line per kind); ``request`` is set when a 400 can still be answered."""

    def __init__(self, kind: str, detail: str, request: SipMessage | None = None) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.request = request


@dataclass(slots=True)
class SipMessage:
    """A request (``method`` and ``uri`` set) or a response (``status`` set)."""

    method: str | None = None
    uri: str | None = None
    status: int | None = None
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def is_request(self) -> bool:
        return self.method is not None

    # ----------------------------------------------------------- headers

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (case-insensitive), or ``default``."""
        key = name.lower()
        for header, value in self.headers:
            if header.lower() == key:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        """Every value of header ``name``, in order, comma-joined lists split."""
        key = name.lower()
        values: list[str] = []
        for header, value in self.headers:
            if header.lower() == key:
                values.extend(split_list(value) if key in _LIST_HEADERS else [value])
        return values

    def set(self, name: str, value: str) -> None:
        """Replace every ``name`` header with one (appended when absent)."""
        self.remove(name)
        self.headers.append((name, value))

    def remove(self, name: str) -> None:
        key = name.lower()
        self.headers = [(h, v) for h, v in self.headers if h.lower() != key]

    @property
    def call_id(self) -> str:
        return self.get("Call-ID") or ""

    @property
    def cseq(self) -> tuple[int, str]:
        """(number, method) of the CSeq header; (0, "") when absent or bad."""
        parts = (self.get("CSeq") or "").split()
        if len(parts) != 2 or not parts[0].isdigit() or len(parts[0]) > 10:
            return 0, ""
        return int(parts[0]), parts[1].upper()

    @property
    def branch(self) -> str:
        """The top Via's branch parameter ("" without one)."""
        vias = self.get_all("Via")
        return header_params(vias[0]).get("branch", "") if vias else ""

    @property
    def from_tag(self) -> str:
        return parse_name_address(self.get("From") or "").params.get("tag", "")

    @property
    def to_tag(self) -> str:
        return parse_name_address(self.get("To") or "").params.get("tag", "")

    # ----------------------------------------------------------- writing

    def to_bytes(self) -> bytes:
        """The message on the wire (Content-Length always written, from the body)."""
        if self.method is not None:
            start = f"{self.method} {self.uri} SIP/2.0"
        else:
            start = f"SIP/2.0 {self.status} {self.reason}"
        lines = [start]
        lines.extend(f"{h}: {v}" for h, v in self.headers if h.lower() != "content-length")
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + self.body

    def describe(self) -> str:
        """A short label for logs: ``INVITE (call-id)`` or ``200 INVITE (call-id)``."""
        what = self.method if self.method is not None else f"{self.status} {self.cseq[1]}"
        return f"{what} ({self.call_id[:40]})"


@dataclass(frozen=True, slots=True)
class NameAddress:
    """``"Alice" <sip:alice@host>;tag=x``: the display name, the URI, the parameters."""

    display: str
    uri: str
    params: dict[str, str]


def parse(data: bytes) -> SipMessage:
    """Read one SIP message from a datagram (see the module docstring)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise SipParseError("oversized", f"{len(data)} bytes")
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = data.partition(b"\n\n")  # bare LF line ends (tolerated, §7.5)
        if not sep:
            raise SipParseError("truncated", "no blank line after the headers")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SipParseError("encoding", "headers are not UTF-8") from exc
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0].strip():  # keep-alive CRLFs before a message
        lines.pop(0)
    if not lines:
        raise SipParseError("empty", "no start line")
    message = _start_line(lines[0])
    headers = _headers(lines[1:])
    message.headers = headers
    length_text = message.get("Content-Length")
    if length_text is not None:
        length_text = length_text.strip()
        if not length_text.isdigit() or len(length_text) > 6:
            raise SipParseError("content-length", "not a number", _answerable(message))
        length = int(length_text)
        if length > len(body):
            raise SipParseError(
                "truncated", "body shorter than Content-Length", _answerable(message)
            )
        body = body[:length]
    message.body = body
    if message.is_request:
        missing = [h for h in ("Via", "From", "To", "Call-ID", "CSeq") if message.get(h) is None]
        if missing:
            raise SipParseError("missing-header", ", ".join(missing), _answerable(message))
        number, method = message.cseq
        if not number and not method:
            raise SipParseError("cseq", "bad CSeq", _answerable(message))
        if method != message.method:
            raise SipParseError("cseq", "CSeq method differs", _answerable(message))
    return message


def _start_line(line: str) -> SipMessage:
    parts = line.strip().split(" ", 2)
    if len(parts) < 3 and not (len(parts) == 2 and parts[0] == "SIP/2.0"):
        raise SipParseError("start-line", "not a request or status line")
    if parts[0] == "SIP/2.0":
        code = parts[1]
        if len(code) != 3 or not code.isdigit() or not 100 <= int(code) <= 699:
            raise SipParseError("start-line", "bad status code")
        return SipMessage(status=int(code), reason=parts[2] if len(parts) > 2 else "")
    method, uri, version = parts
    if version.strip() != "SIP/2.0":
        raise SipParseError("version", "not SIP/2.0")
    if not method or not set(method) <= _TOKEN_CHARS or not uri or " " in uri.strip():
        raise SipParseError("start-line", "bad method or request URI")
    return SipMessage(method=method.upper(), uri=uri.strip())


def _headers(lines: Sequence[str]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (" ", "\t") and headers:  # folded continuation (§7.3.1)
            name, value = headers[-1]
            headers[-1] = (name, f"{value} {line.strip()}")
            continue
        name, colon, value = line.partition(":")
        name = name.strip()
        if not colon or not name or not set(name) <= _TOKEN_CHARS:
            raise SipParseError("header", "a line that is not a header")
        headers.append((_canonical(name), value.strip()))
        if len(headers) > MAX_HEADERS:
            raise SipParseError("header", "too many headers")
    return headers


def _canonical(name: str) -> str:
    lower = name.lower()
    if lower in _COMPACT:
        return _COMPACT[lower]
    return _CANONICAL.get(lower) or "-".join(p.capitalize() for p in lower.split("-"))


def _answerable(message: SipMessage) -> SipMessage | None:
    """The message, when it is a request we can answer a 400 to."""
    if not message.is_request or message.method == "ACK":
        return None
    if all(message.get(h) for h in ("Via", "From", "To", "Call-ID", "CSeq")):
        return message
    return None


# --------------------------------------------------------------- values


def split_list(value: str) -> list[str]:
    """Split a comma-joined header value outside quotes and angle brackets."""
    items: list[str] = []
    current: list[str] = []
    quoted = bracket = False
    escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "<" and not quoted:
            bracket = True
        elif char == ">" and not quoted:
            bracket = False
        elif char == "," and not quoted and not bracket:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip())
    return [item for item in items if item]


def header_params(value: str) -> dict[str, str]:
    """``;name=value`` parameters after the first element of a header value (names
    lower-cased; a bare ``;lr`` maps to "")."""
    params: dict[str, str] = {}
    for part in value.split(";")[1:]:
        name, _, param = part.partition("=")
        if name.strip():
            params[name.strip().lower()] = param.strip().strip('"')
    return params


def parse_name_address(value: str) -> NameAddress:
    """From/To/Contact/Refer-To: ``"Name" <uri>;params`` or ``uri;params``."""
    value = value.strip()
    if "<" in value and ">" in value.split("<", 1)[1]:
        display, rest = value.split("<", 1)
        uri, after = rest.split(">", 1)
        return NameAddress(display.strip().strip('"'), uri.strip(), header_params("x" + after))
    uri, _, _ = value.partition(";")
    return NameAddress("", uri.strip(), header_params(value))


def uri_user(uri: str) -> str | None:
    """The user part of a ``sip:``/``sips:``/``tel:`` URI (``+15551234567``), or None."""
    scheme, colon, rest = uri.partition(":")
    if not colon:
        return None
    if scheme.lower() == "tel":
        return rest.split(";", 1)[0] or None
    if "@" not in rest:
        return None
    user = rest.split("@", 1)[0].split(";", 1)[0].split(":", 1)[0]
    return user or None


def new_tag() -> str:
    return secrets.token_hex(6)


def new_branch() -> str:
    return BRANCH_COOKIE + secrets.token_hex(8)


def response_to(
    request: SipMessage,
    status: int,
    reason: str,
    *,
    to_tag: str | None = None,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
) -> SipMessage:
    """The response to ``request`` (§8.2.6): its Vias, From, Call-ID and CSeq copied,
    its To with ``to_tag`` added when it had none (100 Trying carries no tag)."""
    copied = [
        (name, value)
        for name, value in request.headers
        if name.lower() in ("via", "from", "call-id", "cseq", "record-route")
        and not (name.lower() == "record-route" and not 100 < status < 300)
    ]
    to = request.get("To") or ""
    if to_tag and "tag" not in parse_name_address(to).params and status != 100:
        to = f"{to};tag={to_tag}"
    copied.insert(_after_from(copied), ("To", to))
    return replace(
        SipMessage(status=status, reason=reason, body=body),
        headers=copied + list(headers),
    )


def _after_from(headers: list[tuple[str, str]]) -> int:
    for index, (name, _) in enumerate(headers):
        if name.lower() == "from":
            return index + 1
    return len(headers)
