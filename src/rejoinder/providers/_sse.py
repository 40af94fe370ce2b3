"""``text/event-stream`` decoding, sans I/O: bytes in any pieces → each event's data.
The HTTP streams of the providers (Chat Completions, Anthropic Messages, OpenAI's
streamed transcriptions) are read through it."""

from __future__ import annotations

import re

__all__ = ["SSEDecoder"]

_MAX_LINE_BYTES = 16 * 1024 * 1024

_EOL = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    """Incremental ``text/event-stream`` decoder: bytes in any pieces → event data strings.

    Follows the SSE spec: lines end in CRLF, LF or CR; ``:`` starts a comment; an event's
    ``data:`` lines are joined with newlines and the event is dispatched at a blank line.
    At end of stream an event that lacks its blank line is still dispatched (lenient).
    Raises ``ValueError`` for bytes that are not UTF-8 or for an absurdly long line.
    """

    __slots__ = ("_buffer", "_data", "_started")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[str] = []
        self._started = False

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        events: list[str] = []
        start = 0
        while True:
            match = _EOL.search(self._buffer, start)
            if match is None:
                break
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # a CR at the end may be the first half of a CRLF split across reads
            self._line(bytes(self._buffer[start : match.start()]), events)
            start = match.end()
        del self._buffer[:start]
        if len(self._buffer) > _MAX_LINE_BYTES:
            raise ValueError(f"a line longer than {_MAX_LINE_BYTES} bytes")
        return events

    def flush(self) -> list[str]:
        """End of stream: dispatch what is left."""
        events: list[str] = []
        if self._buffer:
            line = bytes(self._buffer).removesuffix(b"\r")
            self._buffer.clear()
            self._line(line, events)
        self._line(b"", events)
        return events

    def _line(self, raw: bytes, events: list[str]) -> None:
        if not self._started:
            self._started = True
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw:
            if self._data:
                events.append("\n".join(self._data))
                self._data.clear()
            return
        if raw.startswith(b":"):
            return  # comment / keep-alive
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"a line that is not UTF-8 ({exc.reason})") from exc
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
        # `event`, `id` and `retry`: every stream we read names its event in the data.
