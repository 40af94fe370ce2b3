"""compose.yaml's agent service, checked against the built image.

First what can be read (compose_check.py): its flags are options of the image's
``rejoinder serve``, its TURN URLs are ones rejoinder accepts, coturn's file agrees.
Then, once ``serve`` has the ICE options, its command is run from the image (its agent
file swapped for one that loads no model: only the options matter here) with the
environment compose gives it, and ``GET /api/ice`` is asked what a browser would get:
the compose file's TURN URLs, with a username ``<expiry>:<id>`` valid for the lifetime
it states and a password that is base64(HMAC-SHA1(TURN_SECRET, username)), computed here
independently, which is what coturn's ``use-auth-secret`` with the same
``static-auth-secret`` accepts (coturn's README.turnserver, "TURN REST API").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compose_check import ComposeReport, check_compose
from image_layout import BuiltImage
from image_runtime import ContainerProcess, Sandbox, free_port, run_once

__all__ = ["check_compose_agent"]

REPO = Path(__file__).resolve().parents[1]
Add = Callable[..., None]

_URL_OK = (
    "import sys\ntry:\n from rejoinder.io.webrtc.ice_config import parse_ice_url\n"
    "except ImportError:\n sys.exit(0)\ntry:\n parse_ice_url(sys.argv[1])\n"
    "except ValueError as e:\n print(e); sys.exit(1)"
)
_ASK_ICE = (
    "import json, sys, urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1] + '/api/ice', timeout=5) as r:\n"
    "    print(json.dumps(json.load(r)))"
)
_NO_MODEL_AGENT = "async def entrypoint(conn):\n    return None\n"


def check_compose_agent(
    image: BuiltImage,
    sandbox: Sandbox,
    env: dict[str, str],
    uid: int,
    gid: int,
    add: Add,
    notes: list[str],
) -> None:
    try:
        import yaml  # noqa: F401  (compose_check reads compose.yaml with it)
    except ImportError:
        add("compose.yaml agrees with the image and coturn's file", None, "no PyYAML here")
        return
    python = shutil.which("python", path=env["PATH"]) or "python"
    cwd = image.host_path(image.workdir)
    rejoinder = shutil.which("rejoinder", path=env["PATH"]) or "rejoinder"
    help_text = run_once([rejoinder, "serve", "--help"], env=env, cwd=cwd, timeout=60).stdout

    def ice_url_ok(url: str) -> str | None:
        result = run_once([python, "-c", _URL_OK, url], env=env, cwd=cwd, timeout=60)
        return None if result.returncode == 0 else result.stdout.strip() or result.stderr[-300:]

    compose = check_compose(
        REPO / "compose.yaml", REPO / "container/turnserver.conf",
        REPO / "container/env.example", help_text, ice_url_ok,
    )  # fmt: skip
    notes += compose.facts
    agent_file = compose.agent_command[0] if compose.agent_command else ""
    exists = (cwd / agent_file).is_file()
    add(
        "compose.yaml, turnserver.conf and env.example agree with the image",
        not compose.problems and exists,
        "; ".join(compose.problems + ([] if exists else [f"no {agent_file} in the image"])),
    )
    if compose.pending:
        add("compose.yaml's ICE flags are options of `rejoinder serve`", None,
            "; ".join(compose.pending), pending=True)  # fmt: skip
        return
    if not compose.problems:
        _ask_for_ice(image, sandbox, env, uid, gid, python, compose, add)


def _ask_for_ice(
    image: BuiltImage, sandbox: Sandbox, env: dict[str, str], uid: int, gid: int,
    python: str, compose: ComposeReport, add: Add,
) -> None:  # fmt: skip
    name = "compose's agent hands browsers TURN credentials coturn will take"
    agent = image.host_path("/tmp") / "no_model_agent.py"
    agent.write_text(_NO_MODEL_AGENT)
    os.chmod(agent, 0o644)
    argv = [*image.entrypoint, str(agent), *compose.agent_command[1:]]
    argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    port = 8000
    if not sandbox.namespaces:
        port = free_port()
        argv += ["--port", str(port)]
    run_env = {**env, **compose.agent_env}
    cwd = image.host_path(image.workdir)
    server = ContainerProcess.start(sandbox, argv, env=run_env, cwd=cwd, uid=uid, gid=gid)
    try:
        pid = server.server_pid
        asked = [python, "-c", _ASK_ICE, f"http://127.0.0.1:{port}"]
        body: dict[str, Any] | None = None
        deadline = time.monotonic() + 60
        while body is None and time.monotonic() < deadline and server.popen.poll() is None:
            result = run_once(sandbox.enter(pid, asked, uid=uid, gid=gid), env=env, cwd=cwd,
                              timeout=15)  # fmt: skip
            if result.returncode == 0:
                body = json.loads(result.stdout)
            else:
                time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
        code = server.wait(20)
    finally:
        server.kill()
        agent.unlink(missing_ok=True)
    if body is None:
        add(name, False, "GET /api/ice never answered: " + " | ".join(server.lines[-8:]))
        return
    why = _credentials_problem(body, compose, time.time())
    add(name, why is None and code == 0, why or _summary(body) + f"; exit {code}")


def _credentials_problem(body: dict[str, Any], compose: ComposeReport, now: float) -> str | None:
    command = compose.agent_command
    wanted = {v for f, v in itertools.pairwise(command) if f == "--ice-server"}
    secret = compose.agent_env.get("REJOINDER_TURN_SECRET", "")
    servers = body.get("ice_servers") or []
    turn = [s for s in servers if any(str(u).startswith("turn") for u in s.get("urls", []))]
    if len(turn) != 1 or set(turn[0]["urls"]) != wanted:
        return f"TURN URLs {[s.get('urls') for s in servers]}, not {sorted(wanted)}"
    username, password = str(turn[0].get("username", "")), str(turn[0].get("credential", ""))
    match = re.fullmatch(r"(\d+):([^:]+)", username)
    if not match:
        return f"username {username!r} is not <expiry>:<id>"
    ttl = float(body.get("ttl") or 0)
    left = int(match.group(1)) - now
    if not (ttl > 0 and ttl - 120 <= left <= ttl + 5):
        return f"the credentials expire in {left:.0f} s, the server says {ttl:g}"
    expected = base64.b64encode(
        hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    ).decode()
    if password != expected:
        return "the password is not base64(HMAC-SHA1(TURN_SECRET, username))"
    return None


def _summary(body: dict[str, Any]) -> str:
    servers = body.get("ice_servers") or []
    urls = [u for s in servers for u in s.get("urls", [])]
    user = next((s.get("username") for s in servers if s.get("username")), "")
    return f"{', '.join(urls)}; username {user}; valid {body.get('ttl')} s"
