"""Who answered a call the agent placed, and leaving a voicemail.

- ``tone.py``: loudness and tonality of a short window (numpy, no state);
- ``screening.py``: what call-screening assistants say;
- ``tap.py``: the call's audio, read from the answer on and passed on to the session;
- ``detector.py``: ``AnsweredByDetector``, sans-I/O: frames and transcripts in, verdicts
  (human, machine, beep, screening, unknown) out, by rules on the callee's first seconds;
- ``listener.py``: ``detect_answered_by(session)`` wires a detector to a session's
  microphone and transcripts and pushes ``answered_by`` events; ``wait_answered_by``
  waits for the answer, bounded, and never raises for the bound;
- ``voicemail.py``: ``LeaveVoicemail``, a task that waits for the beep (bounded), says
  the message uninterrupted, and hangs up once it was heard.
"""

from typing import TYPE_CHECKING

from ...._lazy import lazy_names

if TYPE_CHECKING:
    from .detector import AnsweredByDetector, DetectorOptions, Verdict
    from .listener import (
        AnsweredByListener,
        detect_answered_by,
        more_specific,
        wait_answered_by,
    )
    from .voicemail import LeaveVoicemail, Voicemail

# The detector needs numpy; waiting for a provider's answer or leaving a voicemail on a
# provider's beep does not: each name loads its own module on first use.
__getattr__ = lazy_names(
    __name__,
    globals(),
    {
        "AnsweredByDetector": ".detector",
        "DetectorOptions": ".detector",
        "Verdict": ".detector",
        "AnsweredByListener": ".listener",
        "detect_answered_by": ".listener",
        "more_specific": ".listener",
        "wait_answered_by": ".listener",
        "LeaveVoicemail": ".voicemail",
        "Voicemail": ".voicemail",
    },
)

__all__ = [
    "AnsweredByDetector",
    "AnsweredByListener",
    "DetectorOptions",
    "LeaveVoicemail",
    "Verdict",
    "Voicemail",
    "detect_answered_by",
    "more_specific",
    "wait_answered_by",
]
