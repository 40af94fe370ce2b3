"""Status callbacks in any order, duplicated or late (hypothesis): a placed call's status
only moves forward, the first final status it reaches stays, a repeated callback changes
nothing, and who answered is reported to the session once per new verdict."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.telephony.carriers.base import (
    FINAL_STATUSES,
    STATUS_ORDER,
    DialRequest,
    PlacedCall,
    StatusUpdate,
)
from rejoinder.io.telephony.outbound import OutboundCall


class NoCarrier:
    """A Dialing that must not be used: the calls here only read callbacks."""

    provider = "twilio"

    async def dial(self, request: DialRequest) -> PlacedCall:
        raise AssertionError("not dialing")

    async def transfer(self, call_id: str, target: str) -> None:
        raise AssertionError("not transferring")

    async def hangup(self, call_id: str) -> None:
        raise AssertionError("not hanging up")

    def read_status(self, form: Mapping[str, str] | None, body: bytes) -> StatusUpdate | None:
        return None

    async def aclose(self) -> None:
        pass


updates = st.one_of(
    st.sampled_from(sorted(STATUS_ORDER)).map(lambda s: StatusUpdate("CA1", s)),  # type: ignore[arg-type]
    st.tuples(st.sampled_from(["human", "machine", "unknown"]), st.booleans()).map(
        lambda kb: StatusUpdate("CA1", answered_by=kb[0], beep=kb[1])  # type: ignore[arg-type]
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(updates, max_size=12))
def test_status_only_moves_forward_and_repeats_change_nothing(sequence: list[StatusUpdate]) -> None:
    async def scenario() -> None:
        call = OutboundCall("k", to="+1", from_="+2", control=NoCarrier(), parameters={})
        seen: list[Any] = []
        call.on_event(seen.append)
        ranks = [STATUS_ORDER[call.status]]
        first_final = next((u.status for u in sequence if u.status in FINAL_STATUSES), None)
        for update in sequence:
            call.apply(update, 0.0)
            ranks.append(STATUS_ORDER[call.status])
            # the same callback again (a provider's retry, a replay that got through)
            assert not call.apply(update, 0.0)
        assert ranks == sorted(ranks)
        if first_final is not None:
            assert call.status == first_final and call.done
        statuses = [e.status for e in seen if e.status is not None]
        assert len(statuses) == len(set(statuses))  # each status reported once
        verdicts = [(e.answered_by, e.beep) for e in seen if e.answered_by is not None]
        assert all(a != b for a, b in itertools.pairwise(verdicts))
        call.close()

    asyncio.run(scenario())
