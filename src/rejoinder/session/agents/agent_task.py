"""AgentTask[T]: an agent that runs until it has a result for the agent that awaited it.

    class GetEmail(rj.AgentTask[str]):
        def __init__(self) -> None:
            super().__init__(instructions="Ask for the user's email address.")

        @rj.function_tool
        async def record(self, email: str) -> None:
            \"\"\"Record the address.\"\"\"
            self.complete(email)

    # inside a tool or on_enter of the current agent:
    email = await GetEmail()

Awaiting it pauses the calling agent (its tools keep running, but it says nothing and
its work does not count as owed while the task is current), makes the task current,
and resumes the caller with the result once the task calls ``complete``. The task's
conversation is merged into the caller's in speaking order, however the task ended: it
comes before the caller's waiting call and that call's output, so the caller's model
reads the result last and answers it (``task_conversation``). Tasks nest.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Generator
from typing import Any, Generic, Protocol, TypeVar

from ...models import ToolError
from .agent import Agent

T = TypeVar("T")


class TaskHost(Protocol):
    """What a task needs from the session that runs it (the agent stack)."""

    async def run_task(self, task: AgentTask[T]) -> T: ...

    def task_completing(self, task: AgentTask[Any]) -> None: ...


# Set by each session for everything it runs, so `await SomeTask()` finds its host.
running_host: contextvars.ContextVar[TaskHost | None] = contextvars.ContextVar(
    "rejoinder_task_host", default=None
)


class AgentTask(Agent, Generic[T]):
    """An agent that is awaited for a result: ``email = await GetEmail()`` in a tool or
    hook of the current agent pauses that agent, makes the task current, and returns
    what the task passes to ``complete`` (or raises the exception it passes). The task's
    conversation is merged into the caller's when it ends; tasks nest. It takes the
    arguments of ``Agent``.

    While the task is current the caller says nothing and its waiting tool does not
    count as owed; when it completes, the caller resumes with no ``listening`` in
    between. ``cancel()`` ends it with a ``ToolError`` for the caller."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._outcome: asyncio.Future[T] | None = None
        self._host: TaskHost | None = None

    def _future(self) -> asyncio.Future[T]:
        if self._outcome is None:
            self._outcome = asyncio.get_running_loop().create_future()
        return self._outcome

    @property
    def done(self) -> bool:
        """Whether the task has its result (or its failure)."""
        return self._outcome is not None and self._outcome.done()

    def complete(self, result: T | BaseException) -> None:
        """Finish with ``result`` (or raise it in the awaiting agent if it is an exception).
        Later calls are ignored."""
        future = self._future()
        if future.done():
            return
        if self._host is not None:
            # In the same step, before whatever this call is part of closes: the caller's
            # pending work must count again with no listening gap in between.
            self._host.task_completing(self)
        if future.done():
            return  # the host ended it already (the session is closing)
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    def cancel(self) -> None:
        """End the task without a result: the awaiting agent gets a ``ToolError``."""
        self.complete(ToolError(f"the task {self.id} was cancelled"))

    def __await__(self) -> Generator[Any, None, T]:
        return self._run().__await__()

    async def _run(self) -> T:
        host = running_host.get()
        if host is None:
            raise RuntimeError(
                f"await {self.id} from a tool or hook of an agent running in a session"
            )
        self._host = host
        try:
            return await host.run_task(self)
        finally:
            self._host = None
