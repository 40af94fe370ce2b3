"""The SIP core under any interleaving of a caller's messages, retransmissions, our
answer and the timers (hypothesis): it never raises, offers the call at most once, gives
the INVITE one final answer (however often repeated), never both confirms and cancels a
call, and reports its end at most once."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.sip.events import (
    CallCancelled,
    CallConfirmed,
    CallEnded,
    CallOffered,
)

from .test_sip_core import PEER, core, invite, request, sent

STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "invite",
                "invite_again",
                "cancel",
                "ack",
                "bye",
                "accept",
                "reject",
                "hangup",
                "reinvite",
                "options",
                "poll",
            ]
        ),
        st.floats(min_value=0.0, max_value=8.0),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_any_interleaving_keeps_the_call_consistent(steps: list[tuple[str, float]]) -> None:
    sip = core()
    now = 0.0
    events: list[Any] = []
    invite_finals: set[int] = set()
    offered: CallOffered | None = None
    tag = "none"
    cseq = 1
    for action, wait in steps:
        now += wait
        out: list[Any] = []
        if action in ("invite", "invite_again"):
            if now >= 31.0:  # a caller retransmits its INVITE until Timer B (32 s) at most
                continue
            out = sip.receive(invite(), PEER, now)
        elif action == "cancel":
            out = sip.receive(request("CANCEL", branch="z9hG4bKinv1"), PEER, now)
        elif action == "ack":
            out = sip.receive(request("ACK", branch="z9hG4bKack", to_tag=tag), PEER, now)
        elif action == "bye":
            cseq += 1
            out = sip.receive(
                request("BYE", branch=f"z9hG4bKbye{cseq}", cseq=cseq, to_tag=tag), PEER, now
            )
        elif action == "reinvite":
            cseq += 1
            out = sip.receive(invite(branch=f"z9hG4bKre{cseq}", cseq=cseq, to_tag=tag), PEER, now)
        elif action == "options":
            out = sip.receive(request("OPTIONS", branch=f"z9hG4bKo{now}"), PEER, now)
        elif action == "poll":
            out = sip.poll(now)
        elif offered is not None and action == "accept":
            out = sip.accept(offered.dialog, offered.negotiated, ("127.0.0.1", 4000), now)
        elif offered is not None and action == "reject":
            out = sip.reject(offered.dialog, 486, "Busy Here", now)
        elif offered is not None and action == "hangup":
            out = sip.hangup(offered.dialog, now)
        for message in sent(out):
            if message.status and message.status >= 200 and message.cseq == (1, "INVITE"):
                invite_finals.add(message.status)
        for item in out:
            if isinstance(item, CallOffered):
                assert offered is None, "the call was offered twice"
                offered = item
                tag = item.dialog.local_tag
        events.extend(out)
    assert len(invite_finals) <= 1, f"the INVITE got {invite_finals}"
    kinds = [type(e) for e in events]
    assert not (CallCancelled in kinds and CallConfirmed in kinds)
    assert kinds.count(CallEnded) + kinds.count(CallCancelled) <= 1
