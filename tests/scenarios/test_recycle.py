"""A recycled GPT-Live connection is invisible to the user (gpt-live §4.8): the states do
not move when the connection is replaced at a quiet moment, the new connection knows
the conversation, and the next question is answered on it."""

from __future__ import annotations

import pytest

from rejoinder.providers.openai import GPTLive
from rejoinder.testing import GPTLiveServer, now

from .realtime_rig import Rig, Weather, answer, start_rig, user_asks

pytestmark = pytest.mark.looptime(noop_cycles=2000)


async def test_the_conversation_goes_on_across_a_recycle(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    model = GPTLive(api_key="test", base_url=server.base_url, recycle_after=20.0)
    rig = await start_rig(model, Weather())
    rigs.append(rig)
    rig.session.mute_input()
    rig.session.unmute_input()
    await user_asks(server, rig, "Hello?")
    await answer(server, rig, "Hi, how can I help?")
    t_quiet = now()
    await rig.settle(22.0)
    assert server.connections == 2
    # Nothing moved while the connection was replaced.
    assert rig.timeline.agent_states(since=t_quiet) == ["listening"]
    assert rig.timeline.user_states(since=t_quiet) == ["listening"]
    assert not rig.errors and rig.owed == 0
    seeded = str(server.session_starts[1].get("input", []))
    assert "Hello?" in seeded and "Hi, how can I help?" in seeded
    t_turn = now()
    await user_asks(server, rig, "Thanks, bye.")
    await answer(server, rig, "Goodbye!")
    assert rig.timeline.agent_states(since=t_turn) == ["listening", "speaking", "listening"]
    assert rig.messages()[-1] == ("assistant", "Goodbye!")
    assert [t for t in (e["type"] for e in server.received_on(2)) if "mute" in t] == []
