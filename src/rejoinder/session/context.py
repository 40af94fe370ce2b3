"""SessionContext: what the parts of a session may touch, and nothing more.

The agent stack, each agent's activity, the tool runner, the user-turn detector and the
engines are handed this object instead of the ``AgentSession``: the floor driver
(``state``), the event emitter, the history, the options, the output slots, the models,
and the session's task scope. What a part may do is visible from what it is handed
(a small interface each). ``session`` is the public object, only for user code a part calls
(a tool's ``RunContext.session``, ``Agent.session``); parts never use its privates.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from ..models import LLM, ChatContext, ChatItem, ImageContent
from .events import ConversationItemAddedEvent, ErrorEvent, EventEmitter
from .turn_state import TurnState

if TYPE_CHECKING:
    from ..models.tts import TTS
    from .options import SessionOptions, SessionOutput
    from .public_session import PublicSession
    from .tools.tool import Tool, Toolset

logger = logging.getLogger("rejoinder")

MAX_PENDING_IMAGES = 4
"""The most images one user message carries (``session.add_image`` keeps the latest)."""


class SessionContext:
    def __init__(
        self,
        *,
        session: PublicSession[Any],
        state: TurnState,
        events: EventEmitter,
        history: ChatContext,
        options: SessionOptions,
        output: SessionOutput,
        tools: Sequence[Tool | Toolset],
        context: contextvars.Context,
    ) -> None:
        self.session = session
        self.state = state
        self.events = events
        self.history = history
        self.options = options
        self.output = output
        self.tools = tools
        """Session-scoped tools, offered to every agent."""
        self._context = context
        self._tg: asyncio.TaskGroup | None = None
        self._closing = False
        self.meter: Any = None
        """The session's metrics meter (``metrics_emit.meter_for`` makes it on first use)."""
        self.input_muted = False
        """``session.mute_input()``: the microphone is heard as silence."""
        self._pending: tuple[tuple[str | None, ImageContent], ...] = ()
        """``session.add_image()``: (key, image) shown with the user's next message (a
        tuple: an idle session keeps no list)."""

    # ------------------------------------------------------------- models

    @property
    def llm(self) -> object:
        return self.session.llm

    @property
    def chat_llm(self) -> LLM | None:
        """The session's model when it is a chat model (a realtime one voices itself)."""
        llm = self.session.llm
        return llm if isinstance(llm, LLM) else None

    @property
    def tts(self) -> TTS | None:
        return self.session.tts

    # ---------------------------------------------------------- the scope

    def open_scope(self, tg: asyncio.TaskGroup) -> None:
        self._tg = tg

    def close_scope(self) -> None:
        self._tg = None

    @property
    def running(self) -> bool:
        return self._tg is not None

    @property
    def closing(self) -> bool:
        return self._closing

    def mark_closing(self) -> None:
        self._closing = True

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task in the session's scope and context (it outlives any one agent)."""
        if self._tg is None:
            coro.close()
            raise RuntimeError("the session is not running")
        return self.start_in(self._tg, coro, context=self._context.copy())

    def start_in(
        self,
        tg: asyncio.TaskGroup,
        coro: Coroutine[Any, Any, None],
        *,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[None]:
        """Start ``coro`` guarded in ``tg`` (the session's scope or an agent's), named
        after it for debugging."""
        task = tg.create_task(
            self.guarded(coro), name=getattr(coro, "__qualname__", None), context=context
        )
        task.add_done_callback(lambda _: coro.close())  # cancelled before it ever ran
        return task

    async def guarded(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro``; a failure that escapes it (a bug of ours or in an application
        callback) is reported as an ``error`` event (source ``internal``) instead of
        tearing down the task scope, and with it the whole session."""
        try:
            await coro
        except Exception as exc:
            logger.exception("a session task failed: %s", coro)
            self.emit_error(exc, source="internal", recoverable=True)

    # --------------------------------------------------------- the record

    @property
    def pending_images(self) -> tuple[ImageContent, ...]:
        """The images the user's next message will carry, oldest first."""
        return tuple(image for _, image in self._pending)

    def show_image(self, image: ImageContent, key: str | None = None) -> None:
        """Keep ``image`` for the user's next message. One with a ``key`` replaces a
        pending one with the same key (a camera's still: the latest is the one). Past
        ``MAX_PENDING_IMAGES`` the oldest goes: a request must not grow without bound."""
        kept = self._pending if key is None else tuple(p for p in self._pending if p[0] != key)
        pending = (*kept, (key, image))
        if len(pending) > MAX_PENDING_IMAGES:
            logger.debug(
                "an image shown earlier was dropped: at most %d go with a message",
                MAX_PENDING_IMAGES,
            )
            pending = pending[-MAX_PENDING_IMAGES:]
        self._pending = pending

    def take_images(self) -> tuple[ImageContent, ...]:
        """The images for the user message being recorded (and none left pending)."""
        images, self._pending = self.pending_images, ()
        return images

    def record(self, item: ChatItem, *, at: int | None = None) -> None:
        """Append ``item`` to the history (or insert it at index ``at``: speech recorded
        once played goes where it began, before what the user said over it)."""
        if at is None:
            self.history.append(item)
        else:
            self.history.items.insert(at, item)
        self.events.emit("conversation_item_added", ConversationItemAddedEvent(item))

    def emit_error(self, error: BaseException, *, source: str, recoverable: bool) -> None:
        self.events.emit("error", ErrorEvent(error, source=source, recoverable=recoverable))

    async def bounded(self, work: Any, what: str, limit: float | None = None) -> None:
        """Await ``work`` for at most ``limit`` seconds (``close_timeout`` by default);
        a timeout or a failure is logged (and reported) and the caller goes on."""
        limit = self.options.close_timeout if limit is None else limit
        try:
            await asyncio.wait_for(work, limit)
        except TimeoutError:
            logger.warning("%s took longer than %.1f s; going on without it", what, limit)
        except Exception as exc:
            logger.exception("%s failed", what)
            self.emit_error(exc, source=what, recoverable=True)
