"""Check the container image on a machine without Docker: build its layout, run it, report.

    python container/check_image.py            # 1.5 to 2 minutes; exit 1 on a failure
    python container/check_image.py --json report.json --keep /tmp/layout

It reads the Dockerfile and .dockerignore and builds the same layout in a temporary
folder: the same stages, the same files copied (through the same .dockerignore), the
same ``pip install`` and ``npm`` commands with the same pins (image_layout.py). Then it
checks what the image promises:

- the build context holds no .venv, node_modules, tests, caches or .env;
- every file of the layout is readable by the image's user and none is writable by it;
- the offline models load and work with no network at all, as that user: Silero VAD,
  Whisper tiny.en and base, Smart Turn, Piper, eSpeak NG, PocketSphinx;
- the native libraries the wheels need outside themselves (``ldd``, and what the running
  processes really mapped) are all in python:3.11-slim-bookworm (image_libraries.py);
- ``rejoinder serve``, started with the image's ENTRYPOINT and CMD from the image's
  working folder as PID 1 of its own PID and network namespaces and as uid 10001
  (image_runtime.py), answers the HEALTHCHECK command (run as ``docker exec`` would),
  serves the page and the SDK bundle, holds a WebSocket session through a turn, and on
  SIGTERM drains: /healthz says 503 "draining", a new session is refused, the live one
  is closed (1000) when --drain-timeout ends, and the process exits 0;
- the server wrote nothing but to /tmp (compose.yaml runs it read-only);
- compose.yaml, container/turnserver.conf and container/env.example agree
  (compose_check.py), and compose's agent command, run from the image with compose's
  environment, hands browsers the compose file's TURN URLs with credentials made from
  TURN_SECRET as coturn checks them (compose_agent.py);
- and it prints the layout's size (the image is that plus the base).

What it cannot check without Docker, and so does not claim:

- the base image itself: its Python is 3.11.16 where this machine's 3.11 stands in, and
  its libraries are bookworm's as listed (BASE_PACKAGES), not seen; a library the image
  lacks is caught only if this machine has it and dpkg says which package it is in;
- the builder: BuildKit's cache mounts, layer ordering, COPY ownership (root here
  because this runs as root), the image's metadata and size as pushed;
- the container's walls: no mount namespace (the image's ``/`` is this machine's plus
  the layout's folders), no cgroups, seccomp or dropped capabilities, no user namespace
  remapping; ``--read-only`` is checked by watching what the server writes, not enforced;
- Docker's own behaviour: how `docker stop` waits (stop_grace_period), restarts, the
  health status machine (interval, retries, start period);
- coturn and WebRTC across a NAT: the TURN server is not run; its configuration is read;
- the images for other platforms (arm64): only this machine's architecture is built.

As root with util-linux's unshare and nsenter (as on the project's machines) it uses
namespaces and uid 10001; otherwise it runs everything as the current user on a free
port and says so in the report. Where Docker or Podman works, tests/deploy builds and
runs the real image instead of only this.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compose_agent import check_compose_agent
from dockerfile_steps import IgnoreRules, context_files
from image_layout import BuiltImage, Toolbox, build_layout
from image_libraries import check_libraries, python_libraries
from image_runtime import (
    MODELS,
    PROBE,
    ContainerProcess,
    ProbeClient,
    Sandbox,
    free_port,
    loaded_libraries,
    run_once,
)

REPO = Path(__file__).resolve().parents[1]
CHECK_DRAIN = 3.0
"""The --drain-timeout the check serves with (as `docker run IMAGE FILE --drain-timeout 3`)."""
FORBIDDEN_IN_CONTEXT = (".venv/", "node_modules/", "tests/", ".env", "__pycache__/", ".git/")


@dataclass
class Check:
    name: str
    status: str  # pass, fail, pending (waits on another change), skip
    detail: str = ""


@dataclass
class Report:
    mode: str = ""
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sizes: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, ok: bool | None, detail: str = "", *, pending: bool = False) -> None:
        status = "pending" if pending else "skip" if ok is None else "pass" if ok else "fail"
        self.checks.append(Check(name, status, detail))
        print(f"  {status.upper():7} {name}" + (f": {detail}" if detail else ""), flush=True)

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if check.status == "fail"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    parser.add_argument("--keep", type=Path, help="build in this (new) folder and keep it")
    parser.add_argument("--reuse", type=Path, help="check a layout kept by --keep, no build")
    args = parser.parse_args(argv)
    report = Report()
    started = time.monotonic()
    sandbox = Sandbox.detect()
    report.mode = (
        "namespaces: PID 1 of new PID and network namespaces, as uid 10001"
        if sandbox.namespaces
        else f"plain processes ({sandbox.why_not})"
    )
    print(f"check_image: {report.mode}", flush=True)
    work = _work_dir(args)
    try:
        image = _build_or_reuse(args, work, sandbox, report)
        if image is not None:
            # The launcher runs as the image's user after its switch: a Python it can read.
            _check(image, dataclasses.replace(sandbox, launcher_python=image.python), report)
    finally:
        if args.keep is None and args.reuse is None:
            shutil.rmtree(work, ignore_errors=True)
    report.seconds["total"] = round(time.monotonic() - started, 1)
    print(f"check_image: {len(report.failed)} failed, {report.seconds['total']} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    return 1 if report.failed else 0


def _work_dir(args: argparse.Namespace) -> Path:
    if args.reuse is not None:
        return Path(args.reuse)
    if args.keep is not None:
        args.keep.mkdir(parents=True)
        work = Path(args.keep)
    else:
        work = Path(tempfile.mkdtemp(prefix="rejoinder-image-"))
    os.chmod(work, 0o755)  # the image's user must reach the layout inside
    return work


def _build_or_reuse(
    args: argparse.Namespace, work: Path, sandbox: Sandbox, report: Report
) -> BuiltImage | None:
    saved = work / "image.pickle"
    if args.reuse is not None:
        image: BuiltImage = pickle.loads(saved.read_bytes())
        report.notes.append(f"reused the layout built in {work}")
        return image
    tools = _toolbox(work, sandbox, report)
    if tools is None:
        return None
    print("check_image: building the Dockerfile's stages", flush=True)
    started = time.monotonic()
    try:
        image = build_layout(REPO / "Dockerfile", REPO, work, tools, say=print)
    except Exception as exc:  # a failed step: the report says which, nothing else runs
        report.add("the Dockerfile builds", False, str(exc))
        return None
    report.seconds["build"] = round(time.monotonic() - started, 1)
    report.add("the Dockerfile builds", True, f"{report.seconds['build']} s")
    report.notes += image.notes
    for step, took in image.step_seconds:
        report.seconds[step] = round(took, 1)
    saved.write_bytes(pickle.dumps(image))
    return image


def _toolbox(work: Path, sandbox: Sandbox, report: Report) -> Toolbox | None:
    """This machine's Python 3.11 for the python:3.11 stages: one the image's user can
    run when the check switches to it (pyenv's, under /root, it cannot)."""
    candidates = [sys.executable, shutil.which("python3.11"), "/usr/bin/python3.11"]
    for candidate in candidates:
        if not candidate or not os.path.exists(candidate):
            continue
        real = os.path.realpath(candidate)
        version = run_once([real, "-c", "import sys; print(sys.version_info[:2])"],
                           env=dict(os.environ), cwd=REPO, timeout=30).stdout.strip()  # fmt: skip
        if version != "(3, 11)":
            continue
        if sandbox.namespaces and not _reachable_by_anyone(Path(real)):
            continue
        bin_dir = work / "base-bin"
        bin_dir.mkdir(exist_ok=True)
        for name in ("python", "python3"):
            (bin_dir / name).symlink_to(real)
        return Toolbox(real, bin_dir)
    report.add("a Python 3.11 to stand in for the base image's", False, "none found")
    return None


def _reachable_by_anyone(path: Path) -> bool:
    for part in [path, *path.parents]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return True


# ------------------------------------------------------------------------ checks


def _check(image: BuiltImage, sandbox: Sandbox, report: Report) -> None:
    _check_context(report)
    uid, gid = image.uid_gid() if sandbox.namespaces else (os.getuid(), os.getgid())
    _check_files(image, uid, sandbox.namespaces, report)
    env = image.runtime_env()
    tmp = image.host_path("/tmp")
    tmp.mkdir(exist_ok=True)
    os.chmod(tmp, 0o1777)
    env["TMPDIR"] = str(tmp)  # so what the server writes to /tmp is seen (not this machine's)
    before = _snapshot(image.root)
    # The model check and the server load the same models: side by side, as two
    # containers on one host would, they take less time than one after the other.
    models: list[str] = []
    worker = threading.Thread(
        target=lambda: models.extend(_check_models(image, sandbox, env, uid, gid, report))
    )
    worker.start()
    try:
        served = _check_serve(image, sandbox, env, uid, gid, report)
    finally:
        worker.join()
    _check_writes(image, before, _snapshot(image.root), report)
    _check_native_libraries(image, [*models, *served], report)
    check_compose_agent(image, sandbox, env, uid, gid, report.add, report.notes)
    _sizes(image, report)


def _check_native_libraries(image: BuiltImage, loaded: list[str], report: Report) -> None:
    name = "native libraries the base image must provide are in python:3.11-slim-bookworm"
    missing_tools = [tool for tool in ("ldd", "dpkg") if shutil.which(tool) is None]
    if missing_tools:
        report.add(name, None, f"no {' or '.join(missing_tools)} here (not a Debian machine)")
        return
    python = os.path.realpath(str(image.host_path("/opt/rejoinder/bin/python")))
    libraries = check_libraries(
        image.root,
        loaded=loaded,
        python_closure=python_libraries(python),
        extra_packages=image.apt_packages,
    )
    needed = sorted(set(libraries.needed.values()))
    report.add(
        name,
        libraries.ok,
        f"{libraries.elf_count} ELF files; from the base: {', '.join(needed)}"
        + (f"; NOT in it: {libraries.not_in_base}" if libraries.not_in_base else "")
        + (f"; not found: {libraries.missing}" if libraries.missing else ""),
    )


def _check_context(report: Report) -> None:
    rules = IgnoreRules.read((REPO / ".dockerignore").read_text())
    files = context_files(REPO, rules)
    leaked = [
        name for name in files
        if any(name.startswith(bad) or f"/{bad}" in name for bad in FORBIDDEN_IN_CONTEXT)
    ]  # fmt: skip
    size = sum((REPO / f).stat().st_size for f in files) / 1e6
    report.sizes["context_mb"] = round(size, 2)
    report.add(
        "the build context leaves out .venv, node_modules, tests, caches and .env",
        not leaked,
        f"{len(files)} files, {size:.1f} MB" + (f"; leaked: {leaked[:5]}" if leaked else ""),
    )


def _check_files(image: BuiltImage, uid: int, as_image_user: bool, report: Report) -> None:
    unreadable, writable = [], []
    # The user's home and /tmp are the user's to write (the base image's /tmp is 1777).
    own = (image.host_path(image.home()), image.host_path("/tmp"))
    for directory, dirs, files in os.walk(image.root):
        for name in [*dirs, *files]:
            path = Path(directory, name)
            if path.is_symlink() or any(path == d or d in path.parents for d in own):
                continue
            info = path.lstat()
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(info.st_mode) else 0)
            if info.st_uid != uid and info.st_mode & need != need:
                unreadable.append(str(path.relative_to(image.root)))
            if info.st_uid == uid or info.st_mode & stat.S_IWOTH:
                writable.append(str(path.relative_to(image.root)))
    if not as_image_user:  # the layout is this user's own: only readability tells
        report.add(
            "every file is readable by anyone", not unreadable,
            (f"unreadable: {unreadable[:5]}; " if unreadable else "")
            + "ownership not checked: not run as root",
        )  # fmt: skip
        return
    report.add(
        f"every file is readable by uid {uid} and none is writable by it (but its home)",
        not unreadable and not writable,
        (f"unreadable: {unreadable[:5]} " if unreadable else "")
        + (f"writable: {writable[:5]}" if writable else ""),
    )


def _python(image: BuiltImage, env: dict[str, str]) -> str:
    found = shutil.which("python", path=env["PATH"])
    assert found is not None, "no python on the image's PATH"
    return found


def _check_models(
    image: BuiltImage, sandbox: Sandbox, env: dict[str, str], uid: int, gid: int, report: Report
) -> list[str]:
    command = sandbox.command([_python(image, env), "-c", MODELS], uid=uid, gid=gid, network="none")
    started = time.monotonic()
    result = run_once(command, env=env, cwd=image.host_path(image.workdir), timeout=300)
    report.seconds["models"] = round(time.monotonic() - started, 1)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        report.add("the offline models load and work without network", False,
                   (result.stdout + result.stderr)[-1500:])  # fmt: skip
        return []
    out = json.loads(lines[-1].removeprefix("RESULT "))
    libraries = out.pop("libraries")
    report.models = out
    heard = set(re.findall(r"[a-z]+", out["whisper"].lower()))
    ok = (
        out["silero_events"] == ["start_of_speech", "end_of_speech"]
        and {"what", "weather", "today"} <= heard
        and 0.0 <= out["smart_turn"] <= 1.0
        and out["espeak_seconds"] > 0.3
        and out["piper_seconds"] > 1.0
        and "weather" in out["pocketsphinx"]
        and out["whisper_base"] == "loaded"
    )
    where = "no network at all" if sandbox.namespaces else "this machine's network (no namespace)"
    report.add(
        f"the offline models load and work ({where})",
        ok,
        f"whisper heard {out['whisper']!r}; VAD {out['silero_events']}; smart turn "
        f"{out['smart_turn']}; pocketsphinx {out['pocketsphinx']!r}; seconds {out['seconds']}",
    )
    return list(libraries)


def _check_serve(
    image: BuiltImage, sandbox: Sandbox, env: dict[str, str], uid: int, gid: int, report: Report
) -> list[str]:
    argv = [*image.entrypoint, *image.cmd, "--drain-timeout", f"{CHECK_DRAIN:g}"]
    # Resolved on the image's PATH here, as Docker resolves it in the container.
    argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    port = 8000
    health = list(image.healthcheck)
    if health:
        health[0] = shutil.which(health[0], path=env["PATH"]) or health[0]
    if not sandbox.namespaces:  # this machine's port 8000 may be taken: another one
        port = free_port()
        argv += ["--port", str(port)]
        health = [word.replace(":8000/", f":{port}/") for word in health]
    cwd = image.host_path(image.workdir)
    _check_healthcheck_without_server(image, sandbox, env, uid, gid, health, report)
    server = ContainerProcess.start(sandbox, argv, env=env, cwd=cwd, uid=uid, gid=gid)
    loaded: list[str] = []
    try:
        pid = server.server_pid
        if not _wait_healthy(image, sandbox, server, pid, env, uid, gid, health, report):
            return []
        probe = ProbeClient(
            sandbox.enter(pid, [_python(image, env), "-c", PROBE, f"http://127.0.0.1:{port}"],
                          uid=os.getuid(), gid=os.getgid()),
            env, cwd,
        )  # fmt: skip
        try:
            loaded = _drive_session(server, pid, probe, report)
        finally:
            probe.close()
        code = server.wait(CHECK_DRAIN + 20)
        report.add(
            "after SIGTERM the server closes what is left and exits 0",
            code == 0
            and server.lines[-1:] == ["stopped"]
            and server.wait_line(r"^closing 1 live session", 0) is not None,
            f"exit code {code}; last lines {server.lines[-3:]}",
        )
        report.session["pid1"] = sandbox.namespaces
    finally:
        server.kill()
    return loaded


def _check_healthcheck_without_server(
    image: BuiltImage, sandbox: Sandbox, env: dict[str, str], uid: int, gid: int,
    health: list[str], report: Report,
) -> None:  # fmt: skip
    if not health:
        report.add("the image has a HEALTHCHECK", False)
        return
    result = run_once(
        sandbox.command(health, uid=uid, gid=gid, network="lo"),
        env=env, cwd=image.host_path(image.workdir), timeout=30,
    )  # fmt: skip
    report.add("the HEALTHCHECK fails when nothing answers", result.returncode != 0,
               f"exit {result.returncode}")  # fmt: skip


def _wait_healthy(
    image: BuiltImage, sandbox: Sandbox, server: ContainerProcess, pid: int,
    env: dict[str, str], uid: int, gid: int, health: list[str], report: Report,
) -> bool:  # fmt: skip
    period = float(image.healthcheck_flags.get("start-period", "60s").rstrip("s"))
    started = time.monotonic()
    while time.monotonic() - started < period:
        result = run_once(sandbox.enter(pid, health, uid=uid, gid=gid), env=env,
                          cwd=image.host_path(image.workdir), timeout=10)  # fmt: skip
        if result.returncode == 0:
            took = round(time.monotonic() - started, 1)
            report.seconds["healthy"] = took
            report.add("the HEALTHCHECK passes once the server listens", True,
                       f"after {took} s (start period {period:g} s)")  # fmt: skip
            return True
        if server.popen.poll() is not None:
            break
        time.sleep(0.5)
    report.add("the HEALTHCHECK passes once the server listens", False,
               "\n".join(server.lines[-15:]))  # fmt: skip
    return False


def _drive_session(
    server: ContainerProcess, pid: int, probe: ProbeClient, report: Report
) -> list[str]:
    events = {e["event"]: e for e in probe.until("live", 120)}
    health, session = events["health"], events["session"]
    report.session.update(session)
    report.add("GET /healthz answers 200 ok", health["status"] == 200, str(health["body"]))
    report.add(
        "the page and the SDK bundle are served",
        events["page"]["status"] == 200 and events["sdk"]["status"] == 200
        and int(str(events["sdk"]["size"])) > 10_000,
        f"page {events['page']}, rejoinder-client.js {events['sdk']}",
    )  # fmt: skip
    reply = str(session["reply"]).lower()
    report.add(
        "a WebSocket session is greeted and answers a turn (the offline voice, served)",
        "rejoinder" in str(session["greeting"]).lower() and "paris" in reply
        and int(str(session["audio_samples"])) > 0,
        f"greeting {session['greeting']!r}, reply {session['reply']!r}",
    )  # fmt: skip
    loaded = loaded_libraries(pid)  # everything the session needed is loaded by now
    os.kill(pid, signal.SIGTERM)  # as `docker stop` does, to the container's PID 1
    signalled = time.monotonic()
    probe.go_on()
    events = {e["event"]: e for e in probe.until("closed", CHECK_DRAIN + 30)}
    draining = events["draining"]["health"] or {}
    report.add(
        "on SIGTERM /healthz says 503 draining and new sessions are refused",
        draining.get("status") == 503 and events["refused"]["status"] == 503
        and server.wait_line(r"^draining: .*1 live session", 5) is not None,
        f"healthz {draining}, new session {events['refused']['status']}",
    )  # fmt: skip
    closed = events["closed"]
    after = float(str(closed["after"]))
    report.session["closed_after"] = after
    report.add(
        f"the live session is closed (1000) when the {CHECK_DRAIN:g} s drain ends",
        closed["code"] == 1000 and CHECK_DRAIN - 0.5 <= after <= CHECK_DRAIN + 5,
        f"code {closed['code']} after {after} s (signalled "
        f"{round(time.monotonic() - signalled, 1)} s ago)",
    )
    return loaded


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            found[path] = (info.st_mtime_ns, info.st_size)
    return found


def _check_writes(
    image: BuiltImage, before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
    report: Report,
) -> None:  # fmt: skip
    changed = sorted(p for p, v in after.items() if before.get(p) != v)
    tmp = str(image.host_path("/tmp")) + "/"
    outside_tmp = [str(Path(p).relative_to(image.root)) for p in changed if not p.startswith(tmp)]
    in_tmp = len(changed) - len(outside_tmp)
    report.add(
        "the models and the server write nothing but to /tmp (compose.yaml: read_only)",
        not outside_tmp,
        f"{in_tmp} file(s) left in /tmp"
        + (f"; elsewhere: {outside_tmp[:8]}" if outside_tmp else ""),
    )


def _sizes(image: BuiltImage, report: Report) -> None:
    def size(path: Path) -> float:
        seen, total = set(), 0
        for directory, _, files in os.walk(path):
            for name in files:
                info = os.lstat(os.path.join(directory, name))
                if info.st_ino not in seen:
                    seen.add(info.st_ino)
                    total += info.st_size
        return round(total / 1e6, 1)

    venv = size(image.host_path("/opt/rejoinder"))
    layout = size(image.root)
    report.sizes.update(venv_mb=venv, layout_mb=layout)
    print(
        f"check_image: the venv is {venv} MB, the layout {layout} MB: the image is that plus "
        f"python:3.11-slim-bookworm (47.8 MB compressed, as pulled)",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
