"""FallbackRealtime: ordered realtime/duplex models behind one ``RealtimeModel``.

The session talks to the first model that starts. When that connection is lost for good
(the provider's own reconnects ran out, or a fatal error such as a revoked key), the model
is marked unavailable and the next one takes over:

- it starts with the *current* agent's instructions and tools (the latest
  ``update_instructions`` / ``update_tools``), the history as the session recorded it —
  which holds what the user actually heard, not what was generated — and the silent
  context added so far;
- the swap is reported as ``ConnectionLost(reconnecting=True)`` then ``Reconnected``, so
  the session closes the failed connection's obligations (nothing stays owed on a
  connection that no longer exists);
- audio already received keeps playing; nothing is replayed, so the user never hears a
  sentence twice;
- a tool output for a call made on the failed connection cannot be delivered as an
  output any more: it becomes silent context on the new one.

A model that failed to start, or whose connection was lost for good, comes back as with
the other fallbacks (``rejoinder.models.fallback``):

- ``probe=True`` (the default): a background task probes it ``probe_interval`` seconds
  (default: ``retry_after``) after the failure, then with exponential backoff up to 8 ×
  ``probe_interval``, until a probe succeeds. A probe opens a real session on it
  (``model.session()``, ``start(RealtimeConfig(instructions="probe"))``) and closes it
  at once, whether it started or not: it costs a connection, and whatever the provider
  bills for a session that lasted a moment. Each probe is bounded by ``probe_timeout``.
  Pass ``probe=False`` to turn probing off, or an async function of the model for a
  cheaper check. ``FallbackRealtime.aclose()`` cancels and awaits the probes.
- ``probe=False``: the first session start (or swap) after ``retry_after`` seconds tries
  it again.

A model that is back is used by *new* sessions (``session()`` starts on the first
available model, in order). A session already running on a backup stays there: swapping
back mid-conversation would be audible (a cut, a new voice), so it only moves on if the
backup's own connection is lost for good.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .chat import FunctionCallOutput
from .fallback import _Breaker, _probe_fn
from .realtime import (
    ConnectionLost,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    RealtimeModel,
    RealtimeSession,
    Reconnected,
    ToolCallRequested,
    ToolOutputFate,
)
from .tools import ToolDefinition

if TYPE_CHECKING:
    from .audio import AudioFrame

logger = logging.getLogger("rejoinder")


async def probe_realtime(model: RealtimeModel) -> None:
    """The default realtime probe: start a session on ``model``, then close it (always)."""
    session = model.session()
    try:
        await session.start(RealtimeConfig(instructions="probe"))
    finally:
        await session.aclose()


class FallbackRealtime(RealtimeModel):
    """Realtime models in order; see the module docstring for how a session moves to the
    next one and how a failed model comes back (``probe``, ``probe_interval``,
    ``probe_timeout``, ``retry_after``)."""

    def __init__(
        self,
        models: Sequence[RealtimeModel],
        *,
        retry_after: float = 60.0,
        probe: bool | Callable[[RealtimeModel], Awaitable[None]] = True,
        probe_interval: float | None = None,
        probe_timeout: float = 10.0,
    ) -> None:
        self._breaker = _Breaker(
            models,
            retry_after,
            "realtime model",
            probe=_probe_fn(probe, probe_realtime),
            probe_interval=probe_interval,
            probe_timeout=probe_timeout,
        )
        self.models = self._breaker.instances
        rates = {m.sample_rate for m in self.models}
        if len(rates) > 1:
            raise ValueError(f"fallback models must share one output rate, got {sorted(rates)}")
        self.sample_rate = rates.pop()
        self.duplex = self.models[0].duplex

    @property
    def model(self) -> str:
        return "fallback(" + ", ".join(m.model for m in self.models) + ")"

    @property
    def provider(self) -> str:
        return "fallback"

    def available(self, model: RealtimeModel) -> bool:
        return self._breaker.available(model)

    def probing(self, model: RealtimeModel) -> bool:
        """A background probe is watching ``model`` (it failed and has not worked since)."""
        return self._breaker.probing(model)

    def session(self) -> FallbackRealtimeSession:
        """A new session; ``start`` picks the first available model."""
        return FallbackRealtimeSession(self._breaker)

    async def aclose(self) -> None:
        """Stop the probes, then close every model (sessions are closed by their owners)."""
        await self._breaker.aclose()
        for model in self.models:
            await model.aclose()


class FallbackRealtimeSession(RealtimeSession):
    def __init__(self, breaker: _Breaker[RealtimeModel]) -> None:
        self._breaker = breaker
        self._model: RealtimeModel | None = None
        self._active: RealtimeSession | None = None
        self._config: RealtimeConfig | None = None
        self._context: list[str] = []
        self._calls: set[str] = set()
        """Calls made on the active connection (others can only become context)."""
        self._closed = False

    @property
    def duplex(self) -> bool:
        return self._model.duplex if self._model is not None else self._breaker.instances[0].duplex

    @property
    def active_model(self) -> RealtimeModel | None:
        return self._model

    async def start(self, config: RealtimeConfig) -> None:
        self._config = config
        await self._start_next(skip=None)

    async def _start_next(self, *, skip: RealtimeModel | None) -> None:
        assert self._config is not None
        errors: list[str] = []
        for model in self._breaker.candidates():
            if model is skip and len(self._breaker.instances) > 1:
                continue
            session = model.session()
            try:
                await session.start(self._config)
            except RealtimeError as exc:
                self._breaker.down(model, exc)
                errors.append(f"{model.model}: {exc}")
                await session.aclose()
                continue
            self._breaker.up(model)
            self._model, self._active = model, session
            self._calls.clear()
            for text in self._context:
                session.add_context(text)
            return
        raise RealtimeError("no realtime model could start: " + "; ".join(errors), fatal=True)

    async def events(self) -> AsyncIterator[RealtimeEvent]:
        while self._active is not None:
            active, model = self._active, self._model
            assert model is not None
            failure = "the connection ended"
            async for event in active.events():
                if isinstance(event, ToolCallRequested):
                    self._calls.add(event.call.call_id)
                elif isinstance(event, ProviderError) and event.error.fatal:
                    # Fatal for this provider, not for the session: report it as such.
                    failure = str(event.error)
                    event = ProviderError(
                        RealtimeError(f"{model.model}: {event.error}", code=event.error.code)
                    )
                elif isinstance(event, ConnectionLost) and not event.reconnecting:
                    failure = event.reason
                    break
                yield event
            if self._closed:
                return
            self._breaker.down(model, RealtimeError(failure))
            await active.aclose()
            yield ConnectionLost(f"{model.model}: {failure}", reconnecting=True)
            try:
                await self._start_next(skip=model)
            except RealtimeError as exc:
                self._active = self._model = None
                yield ProviderError(exc)
                yield ConnectionLost(str(exc), reconnecting=False)
                return
            assert self._model is not None
            logger.warning("realtime fallback: now on %s", self._model.model)
            yield Reconnected(session_id=None)

    def _require(self) -> RealtimeSession:
        if self._active is None:
            raise RuntimeError("the realtime session is not running")
        return self._active

    def push_audio(self, frame: AudioFrame) -> None:
        if self._active is not None:
            self._active.push_audio(frame)

    def submit_tool_output(
        self, output: FunctionCallOutput, *, reply_required: bool
    ) -> ToolOutputFate:
        active = self._require()
        if output.call_id not in self._calls:
            active.add_context(f"Result of {output.name}: {output.output}")
            return "silent"
        return active.submit_tool_output(output, reply_required=reply_required)

    def add_context(self, text: str) -> None:
        self._context.append(text)
        self._require().add_context(text)

    def update_instructions(self, instructions: str) -> None:
        assert self._config is not None
        self._config = replace(self._config, instructions=instructions)
        self._require().update_instructions(instructions)

    def update_tools(self, tools: Sequence[ToolDefinition]) -> None:
        assert self._config is not None
        self._config = replace(self._config, tools=list(tools))
        self._require().update_tools(tools)

    def generate_reply(self, instructions: str | None = None) -> None:
        self._require().generate_reply(instructions)

    def send_user_text(self, text: str) -> None:
        self._require().send_user_text(text)

    def audio_interrupted(self, heard_seconds: float) -> None:
        if self._active is not None:
            self._active.audio_interrupted(heard_seconds)

    async def aclose(self) -> None:
        self._closed = True
        if self._active is not None:
            await self._active.aclose()
