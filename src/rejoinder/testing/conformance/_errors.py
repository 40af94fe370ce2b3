"""``NotSupported``, in a module of its own: a harness raises it, and importing it must
not import pytest (the test classes do)."""

from __future__ import annotations

__all__ = ["NotSupported"]


class NotSupported(Exception):
    """Raised by a harness method for a scenario its server cannot stage, with the reason.
    The test that needed the scenario is skipped with that reason, so a gap shows in the
    report (``pytest -rs``) instead of passing."""
