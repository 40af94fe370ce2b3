"""Client delegations in random interleavings, over the loopback GPT-Live server: several
delegations at once, answers that take random times (or fail), speech from the voice
model, dropped connections, mute toggles. Whatever happens, the promises hold:

- while an answer is owed (being made, or sent and not yet voiced) the user is never
  marked away and the agent is never ``listening``;
- every delegation ends: its answer is sent once (with its id on its own connection,
  without one after a drop), or it failed with an ``error`` event — never both, never
  neither;
- once everything has settled nothing is owed and the agent is ``listening``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.providers.openai import GPTLive
from rejoinder.testing import Delay, Fail, GPTLiveServer, ScriptedLLM, advance

from .._virtual_time import virtual_loop
from .realtime_rig import start_rig

steps = st.lists(
    st.one_of(
        st.tuples(st.just("delegate"), st.floats(0.1, 4.0), st.booleans()),
        st.tuples(st.just("speak"), st.floats(0.2, 1.5)),
        st.tuples(st.just("wait"), st.floats(0.05, 3.0)),
        st.tuples(st.just("drop")),
        st.tuples(st.just("mute"), st.booleans()),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@example(ops=[("delegate", 2.0, False), ("drop",), ("wait", 0.5)])
@example(ops=[("delegate", 3.0, False), ("delegate", 0.5, True), ("speak", 0.5), ("drop",)])
@example(ops=[("mute", True), ("delegate", 1.0, False), ("drop",), ("mute", False)])
@given(ops=steps)
def test_client_delegations_keep_every_promise(ops: list[tuple[Any, ...]]) -> None:
    loop = virtual_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(ops), 3600))
    finally:
        loop.close()


async def scenario(ops: list[tuple[Any, ...]]) -> None:
    answers: list[list[Any]] = []
    for op in ops:
        if op[0] == "delegate":
            seconds, fails = op[1], op[2]
            answers.append([Delay(seconds), Fail("down")] if fails else [Delay(seconds), "Done."])
    async with GPTLiveServer() as server:
        model = GPTLive(api_key="test", base_url=server.base_url, delegation="client")
        agent = rj.Agent(instructions="Helper.", llm=ScriptedLLM(answers))
        rig = await start_rig(model, agent, user_away_timeout=1.0)
        away: list[float] = []
        rig.session.on(
            "user_state_changed",
            lambda ev: away.append(ev.created_at) if ev.new_state == "away" else None,
        )
        owed_while_away: list[list[str]] = []

        def check_away(ev: Any) -> None:
            if ev.new_state == "away":
                owed_while_away.append([o.kind for o in rig.session.owed()])

        rig.session.on("user_state_changed", check_away)
        try:
            n = 0
            for op in ops:
                if op[0] == "delegate":
                    n += 1
                    await server.delegation(f"dlg_{n}", "client")
                    await rig.settle(0.05)
                    assert rig.session.agent_state == "thinking", rig.session.owed()
                elif op[0] == "speak":
                    await server.speech(op[1], then_silence=1.0)
                    await rig.settle(op[1])
                elif op[0] == "wait":
                    await rig.settle(op[1])
                elif op[0] == "drop":
                    await server.drop()
                    await rig.settle(0.5)
                else:
                    rig.session.mute_input(op[1])
                # Never away while something is owed.
                assert not [kinds for kinds in owed_while_away if kinds], owed_while_away
            await advance(12.0)  # every answer made (<= 4 s), sent, given up on if unvoiced (5 s)
            await rig.settle(0.5)
            assert rig.owed == 0, rig.session.owed()
            assert rig.session.agent_state == "listening"
            # Each delegation ended exactly one way.
            sent = [
                e
                for c in range(1, server.connections + 1)
                for e in server.received_on(c)
                if e.get("type") == "session.commentary.append"
            ]
            failures = [e for e in rig.errors if e.source == "delegation"]
            assert len(sent) == n, (sent, failures)
            failed_notes = [e for e in sent if "failed" in str(e["content"])]
            assert len(failed_notes) == len(failures)
            assert not [kinds for kinds in owed_while_away if kinds], owed_while_away
        finally:
            await rig.aclose()
