"""Random interleavings of provider facts against ProviderObligations (hypothesis).

A reference model, written from gpt-live.md §5.2's derived rule rather than from the
code, says after every step what the agent must report:

- ``speaking`` while a burst of agent audio is audible;
- else ``thinking`` while a response runs, a call of a live response awaits its output,
  a continuation was asked for and has not started or failed, or a completed response's
  answer is still to be voiced (bounded by the answer timeout);
- else ``listening``.

And at the end, once the connection is gone and the tools returned, nothing is open.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rejoinder.floor import SESSION_OWNER, Floor, Obligation, ObligationKind
from rejoinder.models.realtime import (
    BackendResponseEnded,
    BackendResponseStarted,
    ContinuationFailed,
)
from rejoinder.session.events import EventEmitter
from rejoinder.session.realtime.provider_obligations import ProviderObligations
from rejoinder.session.turn_state import TurnState

from .._virtual_time import virtual_loop

ANSWER_TIMEOUT = 2.0
DELEGATIONS = ["d1", "d2"]


@dataclass
class Model:
    running: dict[str, tuple[str, int]] = field(default_factory=dict)  # resp → (dlg, bursts)
    calls: dict[str, tuple[str, str | None, bool]] = field(default_factory=dict)
    """call → (delegation, response it came from, still owed)"""
    continuations: set[str] = field(default_factory=set)
    answer_until: float | None = None
    audible: int = 0
    bursts: int = 0

    def kinds(self) -> dict[str, int]:
        counts = {
            "backend_response": len(self.running),
            "tool (committed)": sum(owed for _, _, owed in self.calls.values()),
            "tool": len(self.calls),
            "provider_continuation": len(self.continuations),
            "answer": int(self.answer_until is not None),
            "reply": self.audible,
        }
        return {k: v for k, v in counts.items() if v}

    def expected(self, now: float) -> str:
        if self.audible:
            return "speaking"
        owed = (
            self.running
            or any(owed for _, _, owed in self.calls.values())
            or self.continuations
            or (self.answer_until is not None and now < self.answer_until)
        )
        return "thinking" if owed else "listening"


delegation = st.sampled_from(["d1", "d1", "d2"])  # mostly one, sometimes interleaved
start = st.tuples(st.just("start"), delegation)
call = st.tuples(st.just("call"), delegation)
end = st.tuples(
    st.just("end"), st.sampled_from(["completed", "failed", "incomplete"]), st.booleans()
)
answer = st.tuples(st.just("answer"), st.sampled_from(["continue", "continue", "silent"]))
# Repeated branches weight the facts that make the interesting interleavings.
step = st.one_of(
    start,
    start,
    call,
    call,
    end,
    end,
    answer,
    answer,
    st.tuples(st.just("cont_failed"), delegation),
    st.tuples(st.just("burst")),
    st.tuples(st.just("burst_end")),
    st.tuples(st.just("lost")),
    st.tuples(st.just("wait"), st.sampled_from([0.5, 1.0, 3.0])),
)


def open_kinds(floor: Floor) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ob in floor.open_obligations():
        counts[ob.kind.value] = counts.get(ob.kind.value, 0) + 1
        if ob.kind is ObligationKind.TOOL and ob.committed:
            counts["tool (committed)"] = counts.get("tool (committed)", 0) + 1
    return counts


async def run(steps: list[tuple[object, ...]]) -> None:
    loop = asyncio.get_running_loop()
    floor = Floor(user_away_timeout=None)
    events = EventEmitter()
    changes: list[str] = []
    events.on("agent_state_changed", lambda ev: changes.append(ev.new_state))
    state = TurnState(floor, events, loop)
    state.start()
    state.entered()  # no agent enters here: the session listens at once
    obligations = ProviderObligations(state, answer_timeout=ANSWER_TIMEOUT)
    model = Model()
    ids = itertools.count(1)
    bursts: list[Obligation] = []

    for op in steps:
        kind = op[0]
        changes.clear()
        if kind == "start":
            dlg = str(op[1])
            resp = f"r{next(ids)}"
            obligations.response_started(BackendResponseStarted(resp, dlg))
            model.running[resp] = (dlg, model.bursts)
            model.continuations.discard(dlg)
        elif kind == "call":
            dlg = str(op[1])
            call = f"c{next(ids)}"
            obligations.tool_called(call, "tool", dlg, owner=SESSION_OWNER)
            live = [r for r, (d, _) in model.running.items() if d == dlg]
            model.calls[call] = (dlg, live[-1] if live else None, True)
        elif kind == "end" and model.running:
            resp = next(iter(model.running))
            dlg, bursts_before = model.running.pop(resp)
            status, answer = str(op[1]), bool(op[2])
            voicing = bool(bursts) and model.bursts > bursts_before
            obligations.response_ended(
                BackendResponseEnded(resp, status, dlg, expects_answer=answer),  # type: ignore[arg-type]
                audio_playing=bool(bursts),
            )
            if status != "completed":
                for call, (d, r, _) in list(model.calls.items()):
                    if r == resp:
                        model.calls[call] = (d, r, False)
            elif answer and not voicing:
                model.answer_until = loop.time() + ANSWER_TIMEOUT
        elif kind == "answer" and model.calls:
            call = next(iter(model.calls))
            dlg, _, owed = model.calls.pop(call)
            fate = "continue" if owed and op[1] == "continue" else "silent"
            obligations.tool_answered(call, fate)  # type: ignore[arg-type]
            if fate == "continue":
                model.continuations.add(dlg)
        elif kind == "cont_failed":
            obligations.continuation_failed(ContinuationFailed(str(op[1]), "refused"))
            model.continuations.discard(str(op[1]))
        elif kind == "burst":
            # Owed from the start, as a burst of a running response is.
            reply = obligations.audio_starting(owed=True)
            state.set_audible(reply, True)
            bursts.append(reply)
            model.bursts += 1
            model.audible += 1
            model.answer_until = None
        elif kind == "burst_end" and bursts:
            obligations.audio_finished(bursts.pop(0), interrupted=False)
            model.audible -= 1
        elif kind == "lost":
            obligations.connection_lost()
            model.running.clear()
            model.continuations.clear()
            model.answer_until = None
            model.calls = {c: (d, None, False) for c, (d, _, _) in model.calls.items()}
        elif kind == "wait":
            await asyncio.sleep(float(str(op[1])))  # virtual time: lets the answer bound run out
            if model.answer_until is not None and loop.time() >= model.answer_until:
                model.answer_until = None
        assert floor.agent_state == model.expected(loop.time()), (op, model)
        # Stronger than the state: each kind of debt matches the model one for one.
        assert open_kinds(floor) == model.kinds(), (op, model)
        # No pulse through listening while one fact is handled.
        assert "listening" not in changes[:-1], (op, changes)

    obligations.connection_lost()
    for call in list(model.calls):
        obligations.tool_answered(call, "silent")
    for reply in bursts:
        state.close(reply, "played")
    assert floor.open_count == 0
    assert floor.agent_state == "listening"


@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(steps=st.lists(step, max_size=25))
def test_provider_facts_in_any_order_report_what_is_owed(steps: list[tuple[object, ...]]) -> None:
    loop = virtual_loop()
    try:
        loop.run_until_complete(run(steps))
    finally:
        loop.close()
