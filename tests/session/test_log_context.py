"""Every log record a session's work makes carries the session's and the agent's id."""

from __future__ import annotations

import logging

import pytest

import rejoinder as rj
from rejoinder.session.log_context import SessionLogFilter
from rejoinder.testing import ScriptedLLM, ToolCall

from ..conftest import MakeSession

tool_logger = logging.getLogger("rejoinder.test_tool")


@rj.function_tool
async def noisy() -> str:
    """Logs a line."""
    tool_logger.warning("inside the tool")
    return "ok"


async def test_records_carry_the_session_and_agent_ids(
    make_session: MakeSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(SessionLogFilter())
    agent = rj.Agent(instructions="t", tools=[noisy], id="helper_agent")
    h = await make_session(ScriptedLLM([[ToolCall("noisy")], ["Done."]]), agent)
    with caplog.at_level(logging.WARNING, logger="rejoinder"):
        await h.session.run(user_input="go")
        logging.getLogger("rejoinder").warning("outside any session")
    inside = next(r for r in caplog.records if r.getMessage() == "inside the tool")
    assert inside.session_id == h.session.id and inside.session_id.startswith("session_")  # type: ignore[attr-defined]
    assert inside.agent_id == "helper_agent"  # type: ignore[attr-defined]
    outside = next(r for r in caplog.records if r.getMessage() == "outside any session")
    assert (outside.session_id, outside.agent_id) == ("-", "-")  # type: ignore[attr-defined]
