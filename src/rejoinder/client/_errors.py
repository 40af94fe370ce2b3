"""What can go wrong talking to a rejoinder server, as exceptions that say why."""

from __future__ import annotations

from ..io.protocol import CloseCode, ErrorMessage

__all__ = ["ClientError", "ConnectionClosed", "ReadyTimeout", "UpgradeRefused"]

# Close codes a client may meet that are not the protocol's own (docs/protocol.md,
# "Errors and close codes", and RFC 6455 for 1001 and 1006).
_OTHER_CODES = {
    1001: "the server is going away",
    1006: "the connection dropped without a closing handshake",
    1012: "the session was lost with the process that held it; reconnect for a new one",
    1013: "the server is full or draining; try again later",
}


class ClientError(Exception):
    """Base class of the errors ``rejoinder.client`` raises."""


class UpgradeRefused(ClientError):
    """The server refused the WebSocket upgrade: HTTP ``status`` (503 when it is full or
    shutting down), with the reason its response gave."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the server refused the connection: HTTP {status} {reason}".strip())
        self.status = status
        self.reason = reason


class ReadyTimeout(ClientError, TimeoutError):
    """The server accepted the connection but sent no ``ready`` in time."""


class ConnectionClosed(ClientError):
    """The connection is closed: by the server (``code`` is its close code, ``error`` the
    ``error`` message it sent just before, which says why), or dropped (``code`` 1006 or
    ``None``). Raised by whatever was waiting on the connection or sending on it; a normal
    end (``code`` 1000) ends ``events()`` without it."""

    def __init__(self, code: int | None, reason: str = "", error: ErrorMessage | None = None):
        self.code = code
        """The WebSocket close code (``CloseCode`` for the protocol's own), or ``None``."""
        self.reason = reason
        """The close frame's reason text, if any."""
        self.error = error
        """The server's ``error`` message that came with the close, if it sent one."""
        super().__init__(self._describe())

    @property
    def error_code(self) -> str | None:
        """The server's machine-readable reason (an ``ErrorCode`` value), if it gave one."""
        return self.error.code if self.error is not None else None

    @property
    def server_message(self) -> str | None:
        """The server's human-readable reason, if it gave one."""
        return self.error.message if self.error is not None else None

    @property
    def normal(self) -> bool:
        """True for a normal end of the session (close code 1000)."""
        return self.code == CloseCode.NORMAL

    def _describe(self) -> str:
        if self.code is None:
            head = "the connection closed"
        else:
            head = f"the connection closed with code {self.code} ({_meaning(self.code)})"
        if self.error is not None:
            return f"{head}: {self.error.code}: {self.error.message}"
        if self.reason:
            return f"{head}: {self.reason}"
        return head


def _meaning(code: int) -> str:
    try:
        return CloseCode(code).name.lower().replace("_", " ")
    except ValueError:
        return _OTHER_CODES.get(code, "not a code of the protocol")
