"""The demo agent (``examples/voice_agent.py``) as the scale tests deploy it.

The same offline stack, with two differences: the speech models are loaded by the demo's
``prewarm`` before the process takes sessions (so a replica is ready only once it can
answer), and every session
appends a line to ``$REJOINDER_SCALE_LOG`` saying which client (``?client=``) landed on
which process and Ray node.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from rejoinder.io import Connection

_FILE = Path(__file__).resolve().parents[2] / "examples" / "voice_agent.py"
_spec = importlib.util.spec_from_file_location("_rejoinder_scale_voice_agent", _FILE)
assert _spec is not None and _spec.loader is not None
voice_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(voice_agent)

# The demo's prewarm loads Whisper and Piper: rejoinder serve (and each Ray replica) runs
# it before taking sessions.
prewarm = voice_agent.prewarm


def _node() -> str:
    """The Ray node this replica runs on ("" outside Ray: Ray is not imported then)."""
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except Exception:
        pass
    return ""


NODE = _node()


def _note(client: str | None) -> None:
    log = os.environ.get("REJOINDER_SCALE_LOG")
    if log:
        with open(log, "a") as out:
            out.write(json.dumps({"client": client, "pid": os.getpid(), "node": NODE}) + "\n")


async def entrypoint(conn: Connection) -> None:
    _note(conn.query.get("client"))
    await voice_agent.entrypoint(conn)
