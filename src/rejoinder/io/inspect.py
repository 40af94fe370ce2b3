"""``GET /sessions``: what each live session owes and why, and its timeline — the
operator's view of "why is it stuck thinking" on a running server.

- ``GET /sessions``: every live connection's session: ids, transport, the current agent,
  the agent and user states, and ``owed`` (``session.owed()``: kind, owner, label, age,
  deadline, committed, audible).
- ``GET /sessions/{id}/timeline``: that session's timeline as JSON lines (the format of
  ``rejoinder.session.timeline``), ready for ``rejoinder timeline FILE -o turn.png``;
  ``?since=T`` keeps the entries from loop time ``T`` on.

Transcripts and tool arguments are in there, so the routes are mounted only when asked
(``create_app(..., inspect=True)``; ``rejoinder dev`` does, ``rejoinder serve`` with
``--inspect``): put them behind your own authentication on a public server.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from aiohttp import web

from ..session.timeline import json_safe
from .admission import SessionGate
from .connection import Connection
from .hosting import HttpAnswer
from .socket_loop import respond

__all__ = ["add_inspect_routes"]


def sessions_answer(gate: SessionGate[Connection]) -> HttpAnswer:
    """``GET /sessions``, as data for either host."""
    return HttpAnswer.json({"sessions": [describe_session(c) for c in gate.connections]})


def timeline_answer(gate: SessionGate[Connection], wanted: str, since: str | None) -> HttpAnswer:
    """``GET /sessions/{wanted}/timeline?since=...``, as data for either host."""
    conn = next(
        (c for c in gate.connections if c.session is not None and c.session.id == wanted),
        None,
    )
    if conn is None or conn.session is None:
        return HttpAnswer.json({"error": f"no live session {wanted!r}"}, status=404)
    try:
        start = float(since if since is not None else "-inf")
    except ValueError:
        return HttpAnswer.json({"error": "since must be a number"}, status=400)
    lines = [
        json.dumps(json_safe(e), separators=(",", ":"))
        for e in conn.session.timeline.entries()
        if e["t"] >= start
    ]
    return HttpAnswer(200, "\n".join(lines) + ("\n" if lines else ""), "application/x-ndjson")


def add_inspect_routes(app: web.Application, gate: SessionGate[Connection]) -> None:
    async def sessions(_request: web.Request) -> web.Response:
        return respond(sessions_answer(gate))

    async def timeline(request: web.Request) -> web.Response:
        return respond(timeline_answer(gate, request.match_info["id"], request.query.get("since")))

    app.router.add_get("/sessions", sessions)
    app.router.add_get("/sessions/{id}/timeline", timeline)


def describe_session(conn: Connection) -> dict[str, Any]:
    session = conn.session
    row: dict[str, Any] = {"connection": conn.id, "transport": conn.transport}
    if session is None:
        return {**row, "session": None}
    try:
        agent: str | None = session.current_agent.id
    except RuntimeError:
        agent = None
    return {
        **row,
        "session": session.id,
        "agent": agent,
        "agent_state": session.agent_state,
        "user_state": session.user_state,
        "owed": [dataclasses.asdict(o) for o in session.owed()],
    }
