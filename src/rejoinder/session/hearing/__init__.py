"""Hearing the user: when they spoke, what they said, and when their turn is over.

- ``user_turns.py``: the microphone side: VAD, recognition, the turn in progress;
- ``turn_end.py``: *where a turn end is decided*: how long after the user stopped their
  turn ends, from the words and the audio turn model's verdict;
- ``turn_verdict.py``: the audio turn model's verdicts on the user's speech;
- ``overlap.py``: *where a barge-in is decided*: the user's speech over the agent's,
  judged an interruption, feedback or noise;
- ``keypad.py``: DTMF digits and ``CollectDigits``; ``mute.py``: a muted microphone;
- ``preemptive.py``, ``speculation.py``: a reply started on the user's words before their
  turn is over, and discarded by every path that abandons it.
"""
