"""Listening to a placed call for who answered, and waiting (bounded) for the answer.

    session = rj.AgentSession(...)
    rj.detect_answered_by(session)          # before session.start() / conn.serve()
    ...
    kind = await rj.wait_answered_by(session, timeout=3.0)   # in the agent's on_enter

``detect_answered_by`` puts an ``AnsweredByDetector`` (``detector.py``) on the session's
microphone and its transcripts, and pushes each verdict as an ``answered_by`` event with
``source="audio"``. It needs no hook in the session: when the session starts it emits
``session_started`` just before its engine takes ``session.input.audio``, and that is
where the microphone is wrapped (``tap.LineTap``: read from then on, frames passed on
unchanged and in order; the detector's failure never reaches them). The detector hears
the line even while the session's hearing is muted (``mute_input``); transcripts need
it unmuted.

Which verdict wins (``more_specific``): the first decision of any source stands, and a
later one is pushed only if it says more. The provider's own detection (Twilio's AMD
and the like, ``source="provider"``) usually decides first; ours is then pushed only
when it is more specific: a beep (the moment to leave a message) where the provider
heard none, screening words where the provider said human or machine, or anything where
it said unknown. Ours is never withheld for a provider verdict that comes later: both
are events, and ``wait_answered_by`` takes the first decisive one.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any

from ...events import AnsweredBy, AnsweredByEvent, SessionStartedEvent, UserInputTranscribedEvent

if TYPE_CHECKING:
    from ....models.audio import AudioFrame
    from ...agents.agent import Agent
    from ...public_session import PublicSession
    from .detector import AnsweredByDetector, DetectorOptions, Verdict
    from .tap import LineTap

    Session = PublicSession[Agent]

__all__ = ["AnsweredByListener", "detect_answered_by", "more_specific", "wait_answered_by"]

logger = logging.getLogger("rejoinder")

_listeners: weakref.WeakKeyDictionary[Any, AnsweredByListener] = weakref.WeakKeyDictionary()


def more_specific(ours: Verdict, theirs: AnsweredByEvent) -> bool:
    """Does our verdict say more than the provider's ``theirs``?"""
    if ours.beep and not theirs.beep:
        return True  # when to speak: the provider did not say
    if ours.answered_by == "screening" and theirs.answered_by != "screening":
        return True  # words beat the provider's guess from the sound
    return theirs.answered_by == "unknown" and ours.answered_by != "unknown"


class AnsweredByListener:
    """One session's detector, wired: see the module's docstring."""

    def __init__(self, session: Session, options: DetectorOptions | None = None) -> None:
        # Weakly: the registry maps each session to its listener weakly, and a listener
        # holding its session would keep both alive for the life of the process.
        self._session = weakref.ref(session)
        self.options = options
        self.detector: AnsweredByDetector | None = None
        self.events: list[AnsweredByEvent] = []
        """Every ``answered_by`` event of the session since this was attached."""
        self.withheld: list[Verdict] = []
        """Our verdicts not pushed: the provider had said as much first."""
        self._timer: asyncio.TimerHandle | None = None
        self._tap: LineTap | None = None
        self._broken = False
        session.on("session_started", self._started)
        session.on("user_input_transcribed", self._transcribed)
        session.on("answered_by", self.events.append)
        session.on("close", self._closed)

    # ---------------------------------------------------------------- reading

    @property
    def session(self) -> Session:
        session = self._session()
        if session is None:
            raise RuntimeError("the session is gone")
        return session

    def decision(self) -> AnsweredBy | None:
        """The first decisive answer (``human``, ``machine``, ``screening``) of any
        source; ``unknown`` when our detector gave up first; ``None``: none yet."""
        for event in self.events:
            if event.answered_by != "unknown":
                return event.answered_by
            if event.source == "audio":
                return "unknown"
        return None

    @property
    def beep_heard(self) -> bool:
        return any(event.beep for event in self.events)

    def quiet_for(self, now: float) -> float | None:
        """Seconds since the callee's voice was last heard (``None``: not listening)."""
        return None if self.detector is None else self.detector.quiet_for(now)

    # ---------------------------------------------------------------- wiring

    def _started(self, event: SessionStartedEvent) -> None:
        # numpy: only once a call is listened to, never for waiting on a provider
        from .detector import AnsweredByDetector
        from .tap import LineTap

        self.detector = AnsweredByDetector(event.created_at, self.options)
        microphone = self.session.input.audio
        if microphone is not None:
            self._tap = LineTap(microphone, self._frame)
            self.session.input.audio = self._tap
            self._tap.start()
        self._arm()

    def _frame(self, frame: AudioFrame) -> None:
        if self._broken or self.detector is None:
            return
        try:
            verdicts = self.detector.push(frame, asyncio.get_running_loop().time())
        except Exception:  # the detector's bug must never cost the call its audio
            logger.exception("answering-machine detection failed; it stops listening")
            self._broken = True
            return
        self._publish(verdicts)

    def _transcribed(self, event: UserInputTranscribedEvent) -> None:
        if self.detector is not None and not self._broken:
            self._publish(self.detector.heard(event.transcript, self._now()))

    def _due(self) -> None:
        self._timer = None
        if self.detector is not None and not self._broken:
            self._publish(self.detector.due(self._now()))

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = None if self.detector is None else self.detector.next_deadline()
        if deadline is not None:
            self._timer = asyncio.get_running_loop().call_at(deadline, self._due)

    def _publish(self, verdicts: list[Verdict]) -> None:
        for verdict in verdicts:
            provider = next((e for e in self.events if e.source == "provider"), None)
            if provider is not None and not more_specific(verdict, provider):
                logger.info(
                    "answered by %s (audio) withheld: the provider said %s first",
                    verdict.answered_by,
                    provider.answered_by,
                )
                self.withheld.append(verdict)
                continue
            self.session.push_answered_by(
                verdict.answered_by, source="audio", beep=verdict.beep, detail=verdict.detail
            )
        if verdicts:
            self._arm()

    def _closed(self, _: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._broken = True  # nothing more to push into a closed session
        if self._tap is not None:
            self._tap.stop()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()


def detect_answered_by(
    session: Session, options: DetectorOptions | None = None
) -> AnsweredByListener:
    """Listen to ``session``'s call for who answered (call before ``session.start()``
    or ``conn.serve()``): ``answered_by`` events with ``source="audio"``. Once per
    session; returns the listener (its ``events``, ``decision()``)."""
    if session.started:
        raise RuntimeError("detect_answered_by() must come before the session starts")
    if session in _listeners:
        raise RuntimeError("this session already has answering-machine detection")
    listener = _listeners[session] = AnsweredByListener(session, options)
    return listener


def listener_of(session: Session) -> AnsweredByListener | None:
    return _listeners.get(session)


async def wait_answered_by(session: Session, *, timeout: float = 3.0) -> AnsweredBy:  # noqa: ASYNC109
    """Who answered, waiting at most ``timeout`` seconds: the first decisive
    ``answered_by`` (``human``, ``machine``, ``screening``) from any source, or
    ``"unknown"`` when our detector gave up, when the provider said unknown and no
    detector listens, when the session closes, or when ``timeout`` passes. Never raises
    for a timeout: greet on ``human`` and ``unknown``, leave a message on ``machine``
    (``rj.LeaveVoicemail``), say who is calling and why on ``screening``.

    Without ``detect_answered_by`` on the session, only events from now on count."""
    if not timeout >= 0:
        raise ValueError("timeout must be >= 0")
    listener = _listeners.get(session)
    known = None if listener is None else listener.decision()
    if known is not None:
        return known
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[AnsweredBy] = loop.create_future()

    def seen(event: AnsweredByEvent) -> None:
        if answer.done():
            return
        if event.answered_by != "unknown":
            answer.set_result(event.answered_by)
        elif event.source == "audio" or listener is None:
            answer.set_result("unknown")

    def closed(_: object) -> None:
        if not answer.done():
            answer.set_result("unknown")

    session.on("answered_by", seen)
    session.on("close", closed)
    try:
        async with asyncio.timeout(timeout):
            return await answer
    except TimeoutError:
        return "unknown"
    finally:
        session.off("answered_by", seen)
        session.off("close", closed)
