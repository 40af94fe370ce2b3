"""Collecting keypad digits (DTMF): ``await rj.CollectDigits(...)`` from a tool or hook.

    @rj.function_tool
    async def check_pin(self) -> str:
        \"\"\"Ask the caller for their PIN.\"\"\"
        pin = await rj.CollectDigits(
            "Please enter your four-digit PIN, then press pound.", max_digits=4
        )
        if pin.reason == "timeout":
            return "The caller entered no PIN."
        ...

A task, not a callback: while it waits the calling agent is paused and nothing is owed
to the user, so the agent reports ``listening`` (the user is the one to act), and the
caller's tool resumes with the digits. A key pressed during the prompt stops the prompt
(when it may be interrupted). The digits never go into the conversation history, which
an LLM reads: a PIN stays out of prompts. Keys come from ``session.push_dtmf`` (the phone
transports call it for each ``dtmf`` message; a test calls it directly).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from ..agents.agent_task import AgentTask
from ..events import DTMFEvent
from ..speech.handle import SpeechHandle

__all__ = ["CollectDigits", "Digits"]

DEFAULT_INSTRUCTIONS = (
    "The caller is entering digits on the phone keypad. If they speak instead, ask them "
    "briefly to use the keypad. Never repeat digits back."
)


@dataclass(frozen=True, slots=True)
class Digits:
    """What the caller entered, and why collection stopped."""

    digits: str
    """The keys pressed, without the terminator."""
    reason: Literal["terminator", "max_digits", "timeout"]

    @property
    def timed_out(self) -> bool:
        return self.reason == "timeout"


class CollectDigits(AgentTask[Digits]):
    """Say ``prompt`` (optional) and collect keys until the ``terminator`` key, until
    ``max_digits`` keys, or until no key came for ``timeout`` seconds (counted from the
    end of the prompt, and again from each key: ``inter_digit_timeout`` when given)."""

    def __init__(
        self,
        prompt: str | None = None,
        *,
        max_digits: int | None = None,
        terminator: str | None = "#",
        timeout: float = 10.0,
        inter_digit_timeout: float | None = None,
        instructions: str = DEFAULT_INSTRUCTIONS,
        **kwargs: Any,
    ) -> None:
        if max_digits is not None and max_digits < 1:
            raise ValueError("max_digits must be at least 1")
        if terminator is not None and (len(terminator) != 1 or terminator not in "*#"):
            raise ValueError("terminator must be '#', '*' or None")
        if max_digits is None and terminator is None:
            raise ValueError("give max_digits, a terminator, or both: otherwise it never ends")
        for name, value in (("timeout", timeout), ("inter_digit_timeout", inter_digit_timeout)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive")
        super().__init__(instructions=instructions, **kwargs)
        self.prompt = prompt
        self.max_digits = max_digits
        self.terminator = terminator
        self.timeout = timeout
        self.inter_digit_timeout = inter_digit_timeout
        self._keys: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._prompt: SpeechHandle | None = None

    async def on_enter(self) -> None:
        self.session.on("dtmf", self._on_key)
        if self.prompt is None:
            self._arm(self.timeout)
            return
        self._prompt = self.session.say(self.prompt)
        self._prompt.add_done_callback(self._prompt_done)

    async def on_exit(self) -> None:
        self._stop()

    def _prompt_done(self, _: SpeechHandle) -> None:
        if not self.done and self._timer is None and not self._keys:
            self._arm(self.timeout)

    def _on_key(self, event: DTMFEvent) -> None:
        if self.done:
            return
        prompt = self._prompt
        if prompt is not None and not prompt.done() and prompt.allow_interruptions:
            prompt.interrupt()  # a key answers the prompt: no need to hear the rest
        if event.digit == self.terminator:
            self._finish("terminator")
            return
        self._keys.append(event.digit)
        if self.max_digits is not None and len(self._keys) >= self.max_digits:
            self._finish("max_digits")
            return
        self._arm(self.inter_digit_timeout or self.timeout)

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(seconds, self._finish, "timeout")

    def _finish(self, reason: Literal["terminator", "max_digits", "timeout"]) -> None:
        digits = "".join(self._keys)
        self._stop()
        self.complete(Digits(digits, reason))

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.session.off("dtmf", self._on_key)
