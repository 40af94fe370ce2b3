"""The framework-free half of Twilio's voice webhook: signatures, TwiML, URLs, stream tokens.

A call to a Twilio number makes Twilio POST a form-encoded webhook; the answer is TwiML
telling it to ``<Connect><Stream>`` the call's audio to a WebSocket (the media socket).
Nothing here imports aiohttp, so every piece is a pure function or a clock-free class.

* ``twilio_signature`` / ``validate_twilio_signature``: the ``X-Twilio-Signature`` check
  (https://www.twilio.com/docs/usage/security): the full URL Twilio requested, query string
  included, then each POST parameter's name and value, sorted by name, HMAC-SHA1 keyed with
  the auth token, base64. Twilio's helper libraries accept the URL both with and without
  the scheme's default port, since a proxy may add or drop ``:443``; so does this. Only the
  form-encoded variant is handled: the JSON-body variant (``bodySHA256`` in the query,
  https://www.twilio.com/docs/usage/webhooks/webhooks-security) is out of scope, as voice
  webhooks are form-encoded.
* ``twiml_connect_stream``: the ``<Connect><Stream>`` answer
  (https://www.twilio.com/docs/voice/twiml/stream), built with ElementTree so values escape.
* ``stream_url_for`` / ``webhook_url_for``: the media socket's URL, and the URL Twilio
  signed (the public URL behind a tunnel or proxy, which rewrites the scheme and Host).
* ``AnnouncedStreams``: one-time tokens from accepted webhooks, carried back to the media
  socket as a custom parameter in the ``start`` message's ``customParameters``
  (https://www.twilio.com/docs/voice/media-streams/websocket-messages), so that socket can
  refuse streams that no accepted webhook announced.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import xml.etree.ElementTree as ET
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from urllib.parse import SplitResult, urlsplit

__all__ = [
    "TOKEN_PARAMETER",
    "AnnouncedStreams",
    "stream_url_for",
    "twilio_signature",
    "twiml_connect_stream",
    "validate_twilio_signature",
    "webhook_url_for",
    "xml_can_carry",
]

TOKEN_PARAMETER = "rejoinder_token"
"""The ``<Parameter>`` name that carries an ``AnnouncedStreams`` token to the media socket."""

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_SECURE = {"http": False, "https": True, "ws": False, "wss": True}
# characters XML 1.0 cannot carry at all, not even escaped
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str | Sequence[str]]) -> str:
    """The ``X-Twilio-Signature`` Twilio sends for a form POST of ``params`` to ``url``.

    ``url`` is the full URL, query string included, exactly as Twilio requested it. A name
    given several values (a sequence) contributes name+value once per value, values sorted.
    """
    parts = [url]
    for name in sorted(params):
        value = params[name]
        values = [value] if isinstance(value, str) else sorted(value)
        parts.extend(name + v for v in values)
    mac = hmac.new(auth_token.encode(), "".join(parts).encode(), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def validate_twilio_signature(
    auth_token: str, url: str, params: Mapping[str, str | Sequence[str]], signature: str
) -> bool:
    """Whether ``signature`` is Twilio's for this request (constant-time comparisons).

    Tries ``url`` as given and, when it names no port, with the scheme's default port added,
    or, when it names the default port, without it. An empty ``signature`` never matches.
    """
    if not signature:
        return False
    given = signature.encode()
    matched = False
    for candidate in _port_variants(url):
        expected = twilio_signature(auth_token, candidate, params).encode()
        matched |= hmac.compare_digest(expected, given)
    return matched


def _port_variants(url: str) -> list[str]:
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme.lower())
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range: only the URL as given
        return [url]
    if default is None or not parts.hostname or port not in (None, default):
        return [url]
    userinfo, at, hostport = parts.netloc.rpartition("@")
    bare = hostport.rsplit(":", 1)[0] if port else hostport.rstrip(":")
    other = bare if port else f"{bare}:{default}"
    start = url.find("//") + 2  # splice, so the rest of the URL stays byte for byte
    if start < 2 or url[start : start + len(parts.netloc)] != parts.netloc:
        return [url]
    return [url, url[:start] + userinfo + at + other + url[start + len(parts.netloc) :]]


def twiml_connect_stream(stream_url: str, parameters: Mapping[str, str] | None = None) -> str:
    """TwiML connecting the call to a bidirectional Media Stream at ``stream_url``.

    ``stream_url`` must be ``ws://`` or ``wss://`` with a host (Twilio itself requires
    ``wss://`` for real calls; ``ws://`` is for local tests). Per Twilio's ``<Stream>``
    docs the URL takes no query string: data goes in ``parameters`` instead, each one a
    ``<Parameter name=.. value=..>`` that Twilio hands back in the media socket's ``start``
    message as ``customParameters``. Twilio caps their size, so keep them to a few short
    identifiers (a ``TOKEN_PARAMETER`` token is 22 characters); names must be non-empty.
    Characters XML cannot carry raise ``ValueError``; everything else is escaped.
    """
    try:
        parts = urlsplit(stream_url)
        _ = parts.port
    except ValueError:
        parts = urlsplit("")
    if parts.scheme.lower() not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"stream URL must be ws:// or wss:// with a host, not {stream_url!r}")
    response = ET.Element("Response")
    stream = ET.SubElement(ET.SubElement(response, "Connect"), "Stream", url=_xml_safe(stream_url))
    for name, value in (parameters or {}).items():
        if not name:
            raise ValueError("a <Parameter> name must not be empty")
        ET.SubElement(stream, "Parameter", name=_xml_safe(name), value=_xml_safe(value))
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(response, encoding="unicode")


def xml_can_carry(text: str | None) -> bool:
    """Whether ``text`` is a non-empty string XML 1.0 can carry (escaped as needed)."""
    return bool(text) and isinstance(text, str) and _NOT_XML.search(text) is None


def _xml_safe(text: str) -> str:
    if _NOT_XML.search(text):
        raise ValueError(f"{text!r} holds a character XML cannot carry")
    return text


def stream_url_for(request_url: str, public_url: str | None, path: str = "/twilio") -> str:
    """The ``ws(s)://`` URL Twilio should open the media socket on.

    From ``public_url`` when given (``https://abc.ngrok.app`` or ``wss://abc.ngrok.app/base``:
    ``path`` goes under its base path), else from the webhook's ``request_url`` (host kept,
    path replaced). ``http`` becomes ``ws`` and ``https`` becomes ``wss``; no query string.
    """
    parts = _public(public_url) if public_url is not None else _parsed(request_url, "request")
    base = parts.path.rstrip("/") if public_url is not None else ""
    scheme = "wss" if _SECURE[parts.scheme.lower()] else "ws"
    return f"{scheme}://{parts.netloc}{base}/{path.lstrip('/')}"


def webhook_url_for(request_url: str, public_url: str | None, path: str = "/twilio/twiml") -> str:
    """The URL Twilio signed for this webhook: the one to pass to the signature check.

    Without ``public_url`` that is ``request_url`` itself. Behind a proxy or tunnel, which
    rewrites the scheme and Host, it is ``public_url``'s scheme (``ws`` as ``http``, ``wss``
    as ``https``), host and base path, then ``path``, then ``request_url``'s query string.
    """
    if public_url is None:
        return request_url
    parts = _public(public_url)
    scheme = "https" if _SECURE[parts.scheme.lower()] else "http"
    query = urlsplit(request_url).query
    url = f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/{path.lstrip('/')}"
    return f"{url}?{query}" if query else url


def malformed_request_url(url: str) -> str | None:
    """Why the URL a webhook request was made to cannot be used (it is built from the
    request's ``Host`` header, which is whatever the sender wrote: a stray bracket, a port
    out of range), or None when it parses. The hosts answer such a request with 400
    before any webhook sees it."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        return str(exc)
    return None


def _public(public_url: str) -> SplitResult:
    parts = _parsed(public_url, "public")
    if parts.query or parts.fragment:
        raise ValueError(f"public URL must have no query or fragment, not {public_url!r}")
    return parts


def _parsed(url: str, what: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise ValueError(f"{what} URL {url!r} is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in _SECURE or not parts.hostname:
        raise ValueError(f"{what} URL must be http(s):// or ws(s):// with a host, not {url!r}")
    return parts


class AnnouncedStreams:
    """A bounded registry of calls announced by accepted webhooks, for the media socket.

    An accepted webhook for call X calls ``announce(X, now)`` and puts the returned token in
    its TwiML as ``<Parameter name=TOKEN_PARAMETER value=token>``; the media socket's
    ``start`` message brings it back in ``customParameters`` with the ``callSid``, and
    ``claim(callSid, token, now)`` accepts it once. A call has one token at a time (a new
    announcement replaces the old). A claim with the wrong token leaves the right one in
    place, so whoever knows only a call SID cannot spoil the real stream. Entries expire
    ``ttl`` seconds after their announcement; past ``max_entries`` the oldest goes first.
    Time is passed in: nothing here reads a clock.
    """

    def __init__(self, ttl: float = 60.0, max_entries: int = 10_000) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries!r}")
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()  # sid: token, expiry

    def __len__(self) -> int:
        return len(self._entries)

    def announce(self, call_sid: str, now: float) -> str:
        """A new one-time token for ``call_sid``, valid for ``ttl`` seconds from ``now``."""
        if not call_sid:
            raise ValueError("call_sid must not be empty")
        token = secrets.token_urlsafe(16)
        self._entries.pop(call_sid, None)
        self._entries[call_sid] = (token, now + self.ttl)
        self._drop_expired(now)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return token

    def claim(self, call_sid: str, token: str, now: float) -> bool:
        """Whether ``token`` is ``call_sid``'s live token; a successful claim uses it up."""
        self._drop_expired(now)
        entry = self._entries.get(call_sid)
        if entry is None or not token:
            return False
        expected, expires = entry
        if now >= expires:
            del self._entries[call_sid]
            return False
        if not hmac.compare_digest(expected.encode(), token.encode()):
            return False
        del self._entries[call_sid]
        return True

    def _drop_expired(self, now: float) -> None:
        # Entries sit in announcement order and share one ttl, so the expired ones lead.
        while self._entries:
            sid, (_, expires) = next(iter(self._entries.items()))
            if now < expires:
                return
            del self._entries[sid]
