"""``examples/outbound_reminder.py`` offline, on virtual time: the reminder calls a
synthesized answering machine, detects it, leaves its message after the beep and hangs
up once the message was heard."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "outbound_reminder.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("outbound_reminder", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_reminder_leaves_its_message_after_the_beep_and_hangs_up() -> None:
    example = load()
    seen = await example.run_offline()
    kinds = [(kind, source, beep) for _, kind, source, beep, _ in seen["events"]]
    assert kinds == [("machine", "audio", False), ("machine", "audio", True)]
    beep_at = seen["events"][1][0]
    assert beep_at <= seen["spoke_at"] <= beep_at + 0.1
    assert seen["ended"] == "voicemail left"
    message_seconds = len(example.MESSAGE) * 0.03
    assert seen["ended_at"] >= seen["spoke_at"] + message_seconds - 0.05
