"""A text-only demo agent (no speech models): the load-balancer tests need sessions, not
voices."""

from __future__ import annotations

import rejoinder as rj
from rejoinder.demo import DemoAgent, DemoLLM
from rejoinder.io import Connection


async def entrypoint(conn: Connection) -> None:
    session: rj.AgentSession[None] = rj.AgentSession(llm=DemoLLM(), user_away_timeout=None)
    await conn.serve(session, DemoAgent())
