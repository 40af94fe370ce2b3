"""The call control a media stream's line uses: transfers, cold or warm, and hang-ups.

``LineControl`` is what ``TelephonyService`` gives each ``MediaStreamPeer``: an outbound
call's own control (chosen when its stream starts), else the service's for the provider.
It remembers a transfer, after which the call goes on without the agent and is not hung
up. For a warm transfer it is the ``warm_transfer.PersonDialer``: the person's leg is an
``OutboundCall`` that never streams (``streams=False``), registered with the service so
its status callbacks come to the usual status routes (``outbound.STATUS_PATHS``), and,
on Plivo, both legs fetch their conference XML from ``/plivo/conference``
(``CONFERENCE_PATH``), where ``WarmRooms`` keeps each room's briefing.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from .carriers.base import CallControl, CarrierError, PersonCall, WarmTransferring
from .outbound import CALL_QUERY, STATUS_PATHS, OutboundCall
from .twilio_webhook import webhook_url_for

if TYPE_CHECKING:
    from .service import TelephonyService

__all__ = ["CONFERENCE_PATH", "LineControl", "WarmRooms"]

CONFERENCE_PATH = "/plivo/conference"
"""Plivo's webhook answering a warm transfer's legs with the room (and the briefing)."""


class WarmRooms:
    """The briefing of each warm transfer's room, by room name (bounded: oldest first)."""

    def __init__(self, max_entries: int = 1000) -> None:
        self.max_entries = max_entries
        self._rooms: OrderedDict[str, str] = OrderedDict()

    def add(self, room: str, summary: str) -> None:
        self._rooms[room] = summary
        while len(self._rooms) > self.max_entries:
            self._rooms.popitem(last=False)

    def summary(self, room: str | None) -> str | None:
        return self._rooms.get(room) if room else None


class LineControl:
    """A call's control (see the module docstring)."""

    def __init__(
        self, provider: str, chosen: CallControl | None, *, service: TelephonyService
    ) -> None:
        self.provider = provider
        self.chosen = chosen
        self.transferred = False
        self.our_number: str | None = None
        """The number an outbound call was placed from (a warm transfer's caller ID)."""
        self._service = service

    def _control(self) -> CallControl:
        if self.chosen is None:
            raise CarrierError(
                f"{self.provider}: no call control: give the service the provider's REST "
                "credentials (TelephonyService(controls=...)) to transfer calls"
            )
        return self.chosen

    async def transfer(self, call_id: str, target: str) -> None:
        await self._control().transfer(call_id, target)
        self.transferred = True

    async def hangup(self, call_id: str) -> None:
        await self._control().hangup(call_id)

    # ------------------------------------------------------ warm transfers

    def _warm(self) -> WarmTransferring:
        control = self._control()
        if getattr(control, "call_person", None) is None:
            raise CarrierError(f"{self.provider}: this call control cannot call a person")
        return control  # type: ignore[return-value]

    @property
    def briefs_inline(self) -> bool:
        return bool(getattr(self.chosen, "briefs_inline", True))

    def _public_url(self, provider: str) -> str:
        service = self._service
        public = service.options.public_url
        if not public:
            raise CarrierError(
                "warm transfers need the server's public URL (TelephonyOptions.public_url): "
                "the person's call reports to our webhooks"
            )
        if provider not in service.providers:
            raise CarrierError(f"the service does not serve {provider}'s routes")
        missing = service.secrets.missing_for(provider)
        if missing:
            raise CarrierError(f"{provider} callbacks cannot be authenticated: set {missing}")
        return public

    async def call_person(
        self, *, to: str, from_: str, summary: str, room: str, ring_timeout: float
    ) -> OutboundCall:
        """Place the person's leg (``warm_transfer.PersonDialer``)."""
        control = self._warm()
        provider = control.provider
        public = self._public_url(provider)
        service = self._service
        key = secrets.token_urlsafe(12)
        person = OutboundCall(
            key, to=to, from_=from_, control=control, parameters={}, streams=False
        )
        query = urlencode({CALL_QUERY: key})
        answer = urlencode({"room": room, CALL_QUERY: key})
        request = PersonCall(
            to=to,
            from_=from_,
            status_url=webhook_url_for(public, public, STATUS_PATHS[provider]) + "?" + query,
            summary=summary,
            room=room,
            answer_url=webhook_url_for(public, public, CONFERENCE_PATH) + "?" + answer,
            ring_timeout=ring_timeout,
        )
        service.warm_rooms.add(room, summary)
        service.outbound.add(person)  # before dialing: the first callback may beat the answer
        try:
            placed = await control.call_person(request)
        except BaseException:
            person._end_locally("failed", "the provider refused the call")
            raise
        if person.call_id is None:  # (a Plivo callback may have named the call already)
            person.call_id = placed.call_id
        return person

    async def brief(self, person: OutboundCall, summary: str) -> None:
        if person.call_id is not None:
            await self._warm().brief(person.call_id, summary)

    async def join(self, caller_call_id: str, person: OutboundCall, room: str) -> None:
        control = self._warm()
        public = self._public_url(control.provider)
        if person.call_id is None:
            raise CarrierError(f"{control.provider}: the person's call has no id yet")
        room_url = webhook_url_for(public, public, CONFERENCE_PATH)
        room_url += "?" + urlencode({"room": room})
        await control.join(caller_call_id, person.call_id, room, room_url)
        self.transferred = True
