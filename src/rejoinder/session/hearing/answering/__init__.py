"""Who answered a call the agent placed, and leaving a voicemail.

- ``tone.py``: loudness and tonality of a short window (numpy, no state);
- ``detector.py``: ``AnsweredByDetector``, sans-I/O: frames and transcripts in, verdicts
  (human, machine, beep, screening, unknown) out, by rules on the callee's first seconds;
- ``listener.py``: ``detect_answered_by(session)`` wires a detector to a session's
  microphone and transcripts and pushes ``answered_by`` events; ``wait_answered_by``
  waits for the answer, bounded, and never raises for the bound;
- ``voicemail.py``: ``LeaveVoicemail``, a task that waits for the beep (bounded), says
  the message uninterrupted, and hangs up once it was heard.
"""

from .detector import AnsweredByDetector, DetectorOptions, Verdict
from .listener import AnsweredByListener, detect_answered_by, more_specific, wait_answered_by
from .voicemail import LeaveVoicemail, Voicemail

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
