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
    """What a running tool is given, when its function takes a parameter annotated
    ``rj.RunContext`` (it is not part of the tool's schema): the session, the call, the
    reply that carries it, the session's ``userdata``, and ``update`` to release a slow
    tool to the background."""

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
        """The reply the model made the call in."""
        return self._speech_handle

    @property
    def function_call(self) -> FunctionCall:
        """The call being run: its id, the tool's name and the raw arguments."""
        return self._function_call

    @property
    def userdata(self) -> Userdata:
        """The session's ``userdata``."""
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
