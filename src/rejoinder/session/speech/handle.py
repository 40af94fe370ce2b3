"""SpeechHandle: one reply the agent will deliver, and everything that follows from it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol

from ..._dataclass import dataclass
from ...models import ChatItem, ChatMessage
from ...models.chat import new_id

if TYPE_CHECKING:
    from ..hearing.preemptive import Preemptive


@dataclass(frozen=True, slots=True)
class Mark:
    """Where the record stood when a speech began: the last item of the agent's context
    and of the history (its text is recorded there, see ``agent_record``)."""

    context_last: ChatItem | None
    history_last: ChatItem | None


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """How to produce a generated speech (absent for ``say``)."""

    user_message: ChatMessage | None = None
    instructions: str | None = None
    step: int = 0
    """Tool rounds already taken in this turn; tools are withheld at ``max_tool_steps``."""
    prepared: Preemptive | None = None
    """A speculative generation to use if what it saw still matches."""


class _Runtime(Protocol):
    """What a handle needs of the runtime side that delivers it (``SpeechRun``)."""

    def stop(self) -> None: ...


class SpeechHandle:
    """Awaitable: resolves once the reply, tool follow-ups included, was delivered or
    interrupted. ``wait_for_playout`` resolves when this speech's own output ended."""

    def __init__(
        self,
        *,
        allow_interruptions: bool,
        source: str,
        user_initiated: bool = False,
        text: str | None = None,
        request: ReplyRequest | None = None,
    ) -> None:
        self.id = new_id("speech")
        self.source = source
        self.user_initiated = user_initiated
        self.chat_items: list[ChatItem] = []
        self._allow_interruptions = allow_interruptions
        self._text = text
        self._request = request
        self._interrupted = False
        loop = asyncio.get_running_loop()
        self._playout: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._follow_up: SpeechHandle | None = None
        self._run: _Runtime | None = None
        """The runtime side when an agent delivers this speech (``speech/run.py``); a
        realtime provider's replies have none."""

    def __repr__(self) -> str:
        return f"<SpeechHandle {self.id} {self.source} done={self.done()}>"

    @classmethod
    def unsaid(cls, *, source: str, text: str | None = None) -> SpeechHandle:
        """A speech asked for while its session closes: resolved at once, interrupted,
        never heard."""
        handle = cls(allow_interruptions=True, source=source, text=text)
        handle._interrupted = True
        handle._mark_done()
        return handle

    @classmethod
    def played_out(cls, *, source: str) -> SpeechHandle:
        """A speech that is over before it began: what a tool sees when no speech of the
        session's carries its call (a realtime provider voices the answer itself; a
        delegated answer is the application's)."""
        handle = cls(allow_interruptions=True, source=source)
        handle._mark_done()
        return handle

    # ------------------------------------------------------------------ public

    @property
    def allow_interruptions(self) -> bool:
        return self._allow_interruptions

    @allow_interruptions.setter
    def allow_interruptions(self, value: bool) -> None:
        self._allow_interruptions = value

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def done(self) -> bool:
        return self._done.done()

    def interrupt(self, *, force: bool = False) -> SpeechHandle:
        """Stop this reply now. Raises if it is uninterruptible, unless ``force``."""
        if not self._allow_interruptions and not force:
            raise RuntimeError("this speech does not allow interruptions")
        self._interrupt()
        return self

    async def wait_for_playout(self) -> None:
        await asyncio.shield(self._playout)

    def add_done_callback(self, callback: Callable[[SpeechHandle], object]) -> None:
        self._done.add_done_callback(lambda _: callback(self))

    def __await__(self) -> Generator[Any, None, SpeechHandle]:
        yield from asyncio.shield(self._done).__await__()
        return self

    # ---------------------------------------------------------------- runtime

    def _interrupt(self) -> None:
        if self.done():
            return
        self._interrupted = True
        if self._follow_up is not None:
            self._follow_up._interrupt()
        if self._run is not None:
            self._run.stop()
        else:
            self._mark_done()

    def _mark_playout_done(self) -> None:
        if not self._playout.done():
            self._playout.set_result(None)

    def _mark_done(self) -> None:
        self._mark_playout_done()
        if not self._done.done():
            self._done.set_result(None)

    def _chain(self, follow_up: SpeechHandle) -> None:
        """This handle resolves only when ``follow_up`` does."""
        self._follow_up = follow_up
        follow_up._done.add_done_callback(lambda _: self._mark_done())
