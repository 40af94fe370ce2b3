"""Speech: one reply the agent owes, and how it reaches the listener.

- ``handle.py``: ``SpeechHandle``, the reply a caller can await, interrupt or wait for;
- ``queue.py``: the session's speeches, delivered one at a time in order;
- ``delivery.py``: a speech's text to the transcription output;
- ``audio_delivery.py``: a speech's text through the TTS to the audio output, and what
  was heard when it stops;
- ``outputs.py``: which delivery a speech gets, from the outputs the session has.
"""
