"""The conversation benchmark's panel: what the simulated users say, and in which voices.

Two halves, with different sentences and different voices:

- ``TUNING``: material anyone may listen to, measure and tune the stack's defaults on.
- ``HELD_OUT``: kept for checking that a change generalizes. **Nobody may tune defaults
  (thresholds, delays, filters, prompts, word lists) on the held-out half**: not on its
  sentences, not on its voices, not on its figures. Look at its numbers only to report
  them; if a change is judged by them, the half is spent and must be rewritten.

The data lives in ``panel.py``; this package only re-exports it.
"""

from .panel import HALVES, HELD_OUT, TUNING, Half, Item, Voice

__all__ = ["HALVES", "HELD_OUT", "TUNING", "Half", "Item", "Voice"]
