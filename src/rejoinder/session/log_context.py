"""Which session and agent a log record came from.

Everything a session runs starts in the session's own context, where ``session_id`` is
set, and each agent's work knows its activity (``activity.running_activity``). The
``SessionLogFilter`` reads both when a record is made and adds ``record.session_id`` and
``record.agent_id`` (``-`` outside a session), so a server log shows whose line it is::

    handler.addFilter(SessionLogFilter())
    handler.setFormatter(logging.Formatter(
        "%(levelname)s %(name)s [%(session_id)s %(agent_id)s] %(message)s"))

``rejoinder serve`` and ``dev`` set their handler up this way.
"""

from __future__ import annotations

import contextvars
import logging

__all__ = ["SessionLogFilter", "session_id"]

session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rejoinder_session_id", default=None
)


class SessionLogFilter(logging.Filter):
    """Adds ``session_id`` and ``agent_id`` to every record (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from .agents.activity import running_activity  # the activity module imports a lot

        record.session_id = session_id.get() or "-"
        activity = running_activity.get()
        record.agent_id = activity.agent.id if activity is not None else "-"
        return True
