"""Leaving a voicemail: ``await rj.LeaveVoicemail(message)`` from a hook or a tool.

    class Reminder(rj.Agent):
        async def on_enter(self) -> None:
            kind = await rj.wait_answered_by(self.session, timeout=3.0)
            if kind == "machine":
                await rj.LeaveVoicemail("Hi, this is Dr. Lee's office ...")
                return  # it hung up (hang_up=True)
            ...

A task (like ``CollectDigits``), not a plain coroutine: while it waits for the beep the
calling agent is paused and nothing is owed to anyone (a greeting is playing, no person
waits for the agent), so the agent reports ``listening``; the greeting's words are not
answered (``on_user_turn_completed`` stops every reply); and the caller resumes with
what happened, as with any task.

When it speaks: at the beep (an ``answered_by`` event with ``beep=True``, from our own
detector or the provider's; one heard before the task began counts). With no beep by
``beep_timeout``, once the callee's line has been quiet for ``quiet`` seconds (the
greeting is over; machines without a beep record anyway), and at the latest
``give_up`` seconds after that bound whatever the line does. The message may not be
interrupted: the greeting's tail or line noise must not cut it. It is left when its audio
was played to the end (the speaker's own report, not when it was sent); then, with
``hang_up``, the session ends with the reason ``"voicemail left"``.

If screening words are heard before it speaks (``answered_by`` ``screening``: an
assistant asks who is calling, it records nothing), it says nothing and returns
``outcome="screening"``: the caller then says who it is and why.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from ...._dataclass import dataclass
from ....models import ChatContext, ChatMessage, StopResponse
from ...agents.agent_task import AgentTask
from ...events import AnsweredByEvent, UserStateChangedEvent
from ...speech.handle import SpeechHandle
from .listener import listener_of

__all__ = ["LeaveVoicemail", "Voicemail"]

Outcome = Literal["after beep", "after quiet", "after bound", "screening", "cut off"]

_LOOK_EVERY = 0.1  # how often the quiet of the line is checked after beep_timeout


@dataclass(frozen=True, slots=True)
class Voicemail:
    """What ``LeaveVoicemail`` did."""

    outcome: Outcome
    """``after beep``, ``after quiet`` (no beep by ``beep_timeout``, then the line went
    quiet), ``after bound`` (it never went quiet): the message was played to its end;
    ``screening``: nothing was said, a screening assistant answered; ``cut off``: the
    message did not play to its end (the session closed)."""
    waited: float
    """Seconds from the task's start to the message's first word (or to its end)."""

    @property
    def left(self) -> bool:
        return self.outcome.startswith("after")


class LeaveVoicemail(AgentTask[Voicemail]):
    """Wait for the beep (bounded), say ``message`` uninterrupted, wait until it was
    heard, and hang up (``hang_up``). See the module's docstring."""

    def __init__(
        self,
        message: str,
        *,
        beep_timeout: float = 10.0,
        quiet: float = 1.0,
        give_up: float = 10.0,
        hang_up: bool = True,
        instructions: str = "You are leaving a voicemail. Say nothing else.",
        **kwargs: Any,
    ) -> None:
        if not isinstance(message, str) or not message.strip():
            raise ValueError("LeaveVoicemail needs a message to say")
        for name, value in (("beep_timeout", beep_timeout), ("quiet", quiet), ("give_up", give_up)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0")
        super().__init__(instructions=instructions, **kwargs)
        self.message = message
        self.beep_timeout, self.quiet, self.give_up = beep_timeout, quiet, give_up
        self.hang_up = hang_up
        self._began = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._speech: SpeechHandle | None = None
        self._quiet_since: float | None = None  # without a detector: the session's VAD

    async def on_enter(self) -> None:
        loop = asyncio.get_running_loop()
        self._began = loop.time()
        session = self.session
        listener = listener_of(session)
        if listener is not None and listener.beep_heard:
            self._speak("after beep")
            return
        if listener is not None and listener.decision() == "screening":
            self._finish(Voicemail("screening", 0.0))
            return
        self._quiet_since = self._began if session.user_state != "speaking" else None
        session.on("answered_by", self._answered)
        session.on("user_state_changed", self._user_state)
        self._timer = loop.call_later(self.beep_timeout, self._look_for_quiet)

    async def on_exit(self) -> None:
        self._stop_waiting()

    async def on_user_turn_completed(self, turn_ctx: ChatContext, new_message: ChatMessage) -> None:
        raise StopResponse  # the greeting is not someone to answer

    # ------------------------------------------------------------ waiting

    def _answered(self, event: AnsweredByEvent) -> None:
        if self.done or self._speech is not None:
            return
        if event.beep:
            self._speak("after beep")
        elif event.answered_by == "screening":
            self._finish(Voicemail("screening", self._now() - self._began))

    def _user_state(self, event: UserStateChangedEvent) -> None:
        if event.new_state == "speaking":
            self._quiet_since = None
        elif event.old_state == "speaking":
            self._quiet_since = event.created_at

    def _quiet_for(self, now: float) -> float:
        listener = listener_of(self.session)
        heard = None if listener is None else listener.quiet_for(now)
        if heard is not None:
            return heard
        return 0.0 if self._quiet_since is None else now - self._quiet_since

    def _look_for_quiet(self) -> None:
        self._timer = None
        if self.done or self._speech is not None:
            return
        now = self._now()
        if self._quiet_for(now) >= self.quiet - 1e-9:
            self._speak("after quiet")
        elif now - self._began >= self.beep_timeout + self.give_up - 1e-9:
            self._speak("after bound")
        else:
            self._timer = asyncio.get_running_loop().call_later(_LOOK_EVERY, self._look_for_quiet)

    # ------------------------------------------------------------ speaking

    def _speak(self, outcome: Outcome) -> None:
        self._stop_waiting()
        waited = self._now() - self._began
        speech = self._speech = self.session.say(self.message, allow_interruptions=False)
        speech.add_done_callback(lambda s: self._spoken(s, outcome, waited))

    def _spoken(self, speech: SpeechHandle, outcome: Outcome, waited: float) -> None:
        left = not speech.interrupted
        self._finish(Voicemail(outcome if left else "cut off", waited))
        if left and self.hang_up:
            self.session.shutdown(reason="voicemail left")

    def _finish(self, result: Voicemail) -> None:
        self._stop_waiting()
        self.complete(result)

    def _stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.session.off("answered_by", self._answered)
        self.session.off("user_state_changed", self._user_state)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()
