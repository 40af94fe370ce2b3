"""RunContext: what a running tool can see and do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ...models import FunctionCall

if TYPE_CHECKING:
    from ..public_session import PublicSession
    from ..speech.handle import SpeechHandle

Userdata = TypeVar("Userdata")


class RunContext(Generic[Userdata]):
    def __init__(
        self,
        *,
        session: PublicSession[Any],
        speech_handle: SpeechHandle,
        function_call: FunctionCall,
        release: Callable[[str], Awaitable[None]],
    ) -> None:
        self._session = session
        self._speech_handle = speech_handle
        self._function_call = function_call
        self._release = release

    @property
    def session(self) -> PublicSession[Any]:
        """The ``AgentSession`` the tool runs in (typed by the members it offers; the
        agent type is not named here, so ``current_agent`` reads as ``Any``)."""
        return self._session

    @property
    def speech_handle(self) -> SpeechHandle:
        return self._speech_handle

    @property
    def function_call(self) -> FunctionCall:
        return self._function_call

    @property
    def userdata(self) -> Userdata:
        data: Any = self._session.userdata
        return data  # type: ignore[no-any-return]

    async def update(self, message: str) -> None:
        """Report progress. The first call releases the tool to the background: the model
        gets ``message`` as the interim result and the conversation goes on; the tool's
        final return value is spoken later as a deferred reply."""
        await self._release(message)

    def disallow_interruptions(self) -> None:
        """The reply carrying this call can no longer be interrupted."""
        self._speech_handle.allow_interruptions = False

    async def wait_for_playout(self) -> None:
        """Wait until the reply that carried this call has been delivered."""
        await self._speech_handle.wait_for_playout()
