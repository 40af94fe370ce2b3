"""Agent: instructions, tools and hooks (subclass it to build an assistant), and what
its hooks are handed: the session (``PublicSession``) and a ``ClientDelegation``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ...models import LLM, ChatContext, ChatMessage
from ..tools.function_tool import find_tools
from ..tools.tool import Tool, Toolset

if TYPE_CHECKING:
    from ..public_session import PublicSession


class Agent:
    """An assistant: instructions, tools and hooks.

    ``instructions`` may also be given as a class attribute, so a subclass needs no
    ``__init__``::

        class Assistant(rj.Agent):
            instructions = "You are a helpful assistant."

    Its methods decorated with ``@rj.function_tool`` are its tools. A tool that returns
    another agent hands the conversation over to it.

    Args:
        instructions: the system prompt (else the class attribute; an agent with
            neither raises ``TypeError``).
        tools: more tools, or toolsets (an MCP server), besides its own methods.
        chat_ctx: the conversation to start from (copied now): pass the previous agent's
            ``chat_ctx`` to carry the conversation over a handoff.
        llm: a model of its own instead of the session's.
        allow_interruptions: whether the user may interrupt it (``None``: the
            session's setting).
        id: its name in events, the history and the logs (default: the class name).
    """

    def __init__(
        self,
        *,
        instructions: str | None = None,
        tools: Sequence[Tool | Toolset] = (),
        chat_ctx: ChatContext | None = None,
        llm: LLM | None = None,
        allow_interruptions: bool | None = None,
        id: str | None = None,
    ) -> None:
        if instructions is None:
            instructions = getattr(type(self), "instructions", None)
        if not isinstance(instructions, str):
            raise TypeError(
                f"{type(self).__name__} needs instructions: pass instructions='...' to "
                "Agent.__init__, or set them as a class attribute"
                + ("" if instructions is None else f" (got {type(instructions).__name__})")
            )
        self.instructions: str = instructions
        self.id = id or type(self).__name__
        self.llm = llm
        self.allow_interruptions = allow_interruptions
        own = find_tools(self)
        names = [t.name for t in own] + [t.name for t in tools if isinstance(t, Tool)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"{self.id}: duplicate tool names {duplicates}")
        self.tools: list[Tool | Toolset] = [*own, *tools]
        """Its tools; a ``Toolset`` (an MCP server) is offered as it is when a reply starts."""
        self.chat_ctx = chat_ctx.copy() if chat_ctx is not None else ChatContext()
        self._session: PublicSession[Agent] | None = None

    @property
    def session(self) -> PublicSession[Agent]:
        """The ``AgentSession`` this agent runs in (typed by the members it offers)."""
        if self._session is None:
            raise RuntimeError(f"{self.id} is not running in a session")
        return self._session

    async def on_enter(self) -> None:
        """Called after the agent becomes current."""

    async def on_exit(self) -> None:
        """Called before the agent stops being current."""

    async def on_delegation(self, delegation: ClientDelegation) -> str | None:
        """A duplex voice model delegated work to the application (GPT-Live
        ``delegation="client"``): return the answer for it to say (``None`` or ``""``:
        nothing to say). By default the agent's own ``llm`` and tools answer, on the
        conversation so far. Raising reports an ``error`` and tells the model it failed."""
        return await delegation.answer_with_llm()

    async def on_user_turn_completed(self, turn_ctx: ChatContext, new_message: ChatMessage) -> None:
        """Called before replying to a user turn; raise ``StopResponse`` to stay silent.
        ``new_message`` may be edited in place."""


class ClientDelegation:
    """What an agent's ``on_delegation`` is given: the delegation and the conversation.

    ``chat_ctx`` is what the voice model heard and said so far (the agent's
    instructions first); ``answer_with_llm()`` is the default answer: the agent's own
    ``llm`` and tools on that context (the realtime engine supplies how, since it runs
    the tools)."""

    def __init__(
        self,
        session: PublicSession[Agent],
        agent: Agent,
        delegation_id: str,
        chat_ctx: ChatContext,
        *,
        answer_with_llm: Callable[[ClientDelegation], Awaitable[str]],
    ) -> None:
        self._session = session
        self.agent = agent
        self.id = delegation_id
        self.chat_ctx = chat_ctx
        self._answer_with_llm = answer_with_llm

    @property
    def session(self) -> PublicSession[Agent]:
        """The session the delegation came in."""
        return self._session

    async def answer_with_llm(self) -> str:
        """Run the agent's LLM with its tools (executed here, up to the session's
        ``max_tool_steps`` rounds) and return its final text."""
        return await self._answer_with_llm(self)
