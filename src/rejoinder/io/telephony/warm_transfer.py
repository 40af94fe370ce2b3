"""A warm transfer over a media stream, whatever the provider: hold, call, brief, join.

    hold audio ──▶ call the person ──▶ answered by a person? ──▶ brief ──▶ join ──▶ True
                                   └─ busy, no answer, voicemail, ring timeout,
                                      the person hanging up, a refused join ──▶ False

- The caller hears ``hold_sound`` (a soft two-note chime, generated) looped through the
  stream's ``MarkedPlayback.play_signal``: audio that is not the agent's voice (never
  ``speaking``, never in the transcript), stopped at once by ``stop_signals`` without
  touching the agent's audio.
- The person's leg is placed through a ``PersonDialer`` (the service's line control: it
  registers the leg like an outbound call, so its status callbacks arrive on the usual
  status routes and move it forward only) and followed by ``PersonProgress``: what the
  leg did so far, in any order and duplicated, decides the next step.
- A person (not a machine) answered: when the provider briefs inline (Twilio's TwiML,
  Plivo's answer XML), the caller is joined at once (Twilio and Plivo put the caller in
  the conference room, where they wait until the briefed person enters); else the
  briefing is requested and the join follows its end (Telnyx ``speak`` then ``bridge``).
- Every wait is bounded: ``ring_timeout`` for an answer, ``detect_timeout`` after it for
  the machine-detection verdict (none: taken as a person), ``brief_timeout`` for the
  briefing's end (none: joined anyway, the person heard it or most of it). Every way out
  but a join stops the hold audio and hangs up the person's leg.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from ...models.audio import PCM16, AudioFrame
from .carriers.base import FINAL_STATUSES, CarrierError
from .line import TransferFailed

if TYPE_CHECKING:
    from .marks import MarkedPlayback
    from .outbound import CallEvent, OutboundCall

__all__ = [
    "HoldAudio",
    "PersonDialer",
    "PersonProgress",
    "Step",
    "hold_sound",
    "run_warm_transfer",
]

logger = logging.getLogger("rejoinder.io.telephony.warm_transfer")

HOLD_LEVEL = 0.05
"""Peak amplitude of the hold chime, as a fraction of full scale (about -26 dBFS)."""


def hold_sound(sample_rate: int, *, period: float = 2.0) -> PCM16:
    """``period`` seconds of hold audio: two soft notes (a falling major third, 660 then
    523 Hz, with smooth attacks and decays), then quiet. Looped, it says "still here"
    without covering a line's noise or sounding like a ring tone."""
    if period < 1.0:
        raise ValueError("a hold period is at least a second")
    total = round(period * sample_rate)
    out = np.zeros(total, np.float64)
    note = round(0.35 * sample_rate)
    t = np.arange(note) / sample_rate
    # a raised-cosine attack and an exponential decay: no clicks at the edges
    attack = round(0.02 * sample_rate)
    envelope = np.exp(-t * 5.0)
    envelope[:attack] *= 0.5 - 0.5 * np.cos(np.pi * np.arange(attack) / attack)
    envelope[-attack:] *= 0.5 + 0.5 * np.cos(np.pi * np.arange(attack) / attack)
    for start, freq in ((0.0, 659.25), (0.4, 523.25)):
        at = round(start * sample_rate)
        tone = np.sin(2 * np.pi * freq * t) + 0.25 * np.sin(4 * np.pi * freq * t)
        out[at : at + note] += tone / 1.25 * envelope
    return np.round(out * HOLD_LEVEL * 32767).astype(np.int16)


class HoldAudio:
    """Hold audio looped on a call's playback until ``stop`` (see the module docstring).
    Two pieces are kept in flight, so the next is queued before the last is heard."""

    def __init__(self, playback: MarkedPlayback, sample_rate: int) -> None:
        self._playback = playback
        self._frame = AudioFrame(hold_sound(sample_rate), sample_rate)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.line_closed = asyncio.Event()
        """Set when the call's playback closed under the hold audio (the caller left)."""
        self.pieces_heard = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="hold-audio")

    async def _loop(self) -> None:
        playing: list[asyncio.Task[bool]] = []
        try:
            # A piece cut by a clear (the caller spoke: a barge-in clears the output) is
            # followed by the next: the hold goes on until stopped or the call ends.
            while not self._stopped and not self._playback.closed:
                playing.append(asyncio.create_task(self._playback.play_signal(self._frame)))
                if len(playing) < 2:
                    continue
                if await playing.pop(0):
                    self.pieces_heard += 1
        finally:
            for task in playing:
                task.cancel()
            await asyncio.gather(*playing, return_exceptions=True)
            if self._playback.closed:
                self.line_closed.set()

    async def stop(self) -> None:
        """Stop the hold audio now (the provider drops what it buffered of it)."""
        self._stopped = True
        self._playback.stop_signals()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


Step = Literal["wait", "brief", "join", "fail"]


@dataclass
class PersonProgress:
    """What the person's leg did, from its events: order and duplicates do not matter
    (every fact only ever becomes true), and ``step`` reads the next move from them."""

    briefs_inline: bool
    answered_at: float | None = None
    human: bool = False
    """A machine-detection verdict said a person (or could not tell)."""
    machine: bool = False
    briefed: bool = False
    ended: str | None = None
    """The leg's final status, once it ended."""
    details: list[str] = field(default_factory=list)

    def apply(self, event: CallEvent) -> None:
        if event.detail:
            self.details.append(event.detail)
        if event.status == "answered" and self.answered_at is None:
            self.answered_at = event.at
        if event.status in FINAL_STATUSES and self.ended is None:
            self.ended = event.status
        if event.answered_by == "machine":
            self.machine = True
        elif event.answered_by is not None:
            self.human = True
        if event.briefed:
            self.briefed = True

    def step(self, *, brief_asked: bool, detect_late: bool, brief_late: bool) -> tuple[Step, str]:
        """The next move and why. ``detect_late``: no verdict came in time after the
        answer (go on as with a person); ``brief_late``: the briefing's end never came."""
        if self.machine:
            return "fail", "voicemail answered"
        if self.ended is not None:
            return "fail", f"the call ended {self.ended}"
        if self.answered_at is None or not (self.human or detect_late):
            return "wait", "ringing" if self.answered_at is None else "detecting"
        if self.briefs_inline or self.briefed or brief_late:
            return "join", "a person answered"
        return ("wait", "briefing") if brief_asked else ("brief", "a person answered")


class PersonDialer(Protocol):
    """What the sequence needs from a call's control (the service's line control)."""

    @property
    def briefs_inline(self) -> bool: ...

    async def call_person(
        self, *, to: str, from_: str, summary: str, room: str, ring_timeout: float
    ) -> OutboundCall:
        """Place the person's leg, registered for its status callbacks. Raises
        ``CarrierError`` (or ``ValueError`` for a setup that cannot work)."""
        ...

    async def brief(self, person: OutboundCall, summary: str) -> None: ...

    async def join(self, caller_call_id: str, person: OutboundCall, room: str) -> None:
        """Join the caller to the person; the caller's stream ends. Raises ``CarrierError``."""
        ...


async def run_warm_transfer(
    *,
    dialer: PersonDialer,
    hold: HoldAudio,
    caller_call_id: str,
    target: str,
    from_: str,
    summary: str,
    ring_timeout: float,
    detect_timeout: float = 8.0,
    brief_timeout: float | None = None,
) -> bool:
    """Run the sequence (see the module docstring): True once the caller was joined to
    a briefed person, False when nobody (or a machine) answered in time. Raises
    ``TransferFailed`` when the person's call could not be placed."""
    loop = asyncio.get_running_loop()
    if brief_timeout is None:  # a second per 8 characters (speech runs near 15), and 10 s
        brief_timeout = 10.0 + len(summary) / 8
    room = "rj-" + secrets.token_hex(10)
    hold.start()
    person: OutboundCall | None = None
    joined = False
    try:
        try:
            person = await dialer.call_person(
                to=target, from_=from_, summary=summary, room=room, ring_timeout=ring_timeout
            )
        except (CarrierError, ValueError) as exc:
            raise TransferFailed(f"could not call {target} for a warm transfer: {exc}") from exc
        progress = PersonProgress(dialer.briefs_inline)
        changed = asyncio.Event()
        for event in person.events:
            progress.apply(event)
        person.on_event(_feeding(progress, changed))
        began = loop.time()
        brief_asked: float | None = None
        while True:
            now = loop.time()
            detect_late = progress.answered_at is not None and now >= (
                progress.answered_at + detect_timeout
            )
            brief_late = brief_asked is not None and now >= brief_asked + brief_timeout
            step, why = progress.step(
                brief_asked=brief_asked is not None, detect_late=detect_late, brief_late=brief_late
            )
            if step == "fail":
                logger.info("warm transfer to %s: %s", target, why)
                return False
            if step == "brief":
                brief_asked = loop.time()
                try:
                    await dialer.brief(person, summary)
                except CarrierError as exc:
                    logger.warning("warm transfer to %s: no briefing: %s", target, exc)
                    return False
                continue
            if step == "join":
                try:
                    await dialer.join(caller_call_id, person, room)
                except CarrierError as exc:
                    logger.warning("warm transfer to %s: could not join: %s", target, exc)
                    return False
                joined = True
                logger.info("warm transfer to %s: joined (%s)", target, why)
                return True
            # wait for news, the line's end, or the next deadline
            if hold.line_closed.is_set():
                logger.info("warm transfer to %s: the caller left", target)
                return False
            deadlines: list[float] = []
            if progress.answered_at is None:
                if now >= began + ring_timeout:
                    logger.info("warm transfer to %s: no answer in %.0f s", target, ring_timeout)
                    return False
                deadlines.append(began + ring_timeout)
            elif not progress.human and not detect_late:
                deadlines.append(progress.answered_at + detect_timeout)
            if brief_asked is not None and not brief_late:
                deadlines.append(brief_asked + brief_timeout)
            await _news(changed, hold.line_closed, min(deadlines) - now if deadlines else None)
    finally:
        await hold.stop()
        if person is not None and not joined:
            await _hang_up(person, target)


def _feeding(progress: PersonProgress, changed: asyncio.Event) -> Callable[[CallEvent], None]:
    def feed(event: CallEvent) -> None:
        progress.apply(event)
        changed.set()

    return feed


async def _news(changed: asyncio.Event, closed: asyncio.Event, seconds: float | None) -> None:
    waits = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(closed.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    changed.clear()


async def _hang_up(person: OutboundCall, target: str) -> None:
    try:
        await person.hangup()
    except CarrierError as exc:
        logger.warning("warm transfer to %s: could not hang up the call: %s", target, exc)
