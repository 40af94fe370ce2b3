"""The Dockerfile, .dockerignore, compose.yaml and container/turnserver.conf, read without
building anything: what goes into the build context, what the image runs and how, that
its HEALTHCHECK tells a live server from a dead one, and that compose.yaml and coturn's
file keep the TURN secret out of the repository and relay only to the agent's network."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from compose_check import ComposeReport, InterpolationError, check_compose, interpolate
from dockerfile_steps import IgnoreRules, context_files, parse_dockerfile, substitute

from .conftest import CONTAINER, ROOT

pytest.importorskip("yaml", reason="compose.yaml is read with PyYAML (rejoinder[simulate])")

DOCKERFILE = ROOT / "Dockerfile"
RULES = IgnoreRules.read((ROOT / ".dockerignore").read_text())


def final_stage() -> dict[str, list[str]]:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    found: dict[str, list[str]] = {}
    for step in stages[-1].instructions:
        found.setdefault(step.keyword, []).append(step.text)
    return found


@pytest.mark.parametrize(
    "path",
    [
        ".venv/lib/python3.11/site-packages/numpy/__init__.py",
        "clients/js/node_modules/esbuild/package.json",
        "clients/js/dist/index.js",
        "tests/test_cli.py",
        ".env",
        ".git/config",
        "bench/turn_latency.py",
        "src/rejoinder/__pycache__/cli.cpython-311.pyc",
        "src/rejoinder.egg-info/PKG-INFO",
        "src/rejoinder/io/static/rejoinder-client.js",
        ".mypy_cache/3.11/rejoinder/cli.data.json",
    ],
)
def test_dockerignore_keeps_out(path: str) -> None:
    assert RULES.excluded(path)


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "src/rejoinder/cli/__init__.py",
        "src/rejoinder/io/static/page.js",
        "examples/voice_agent.py",
        "clients/js/package-lock.json",
        "clients/js/src/index.ts",
        "clients/js/scripts/build.mjs",
    ],
)
def test_dockerignore_lets_through(path: str) -> None:
    assert not RULES.excluded(path)


def test_every_copy_in_the_dockerfile_finds_its_files_in_the_context() -> None:
    files = context_files(ROOT, RULES)
    leaked = [f for f in files if f.startswith((".venv/", "tests/", "bench/"))]
    assert not leaked + [f for f in files if "/node_modules/" in f]
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    sources = [
        source
        for stage in stages
        for step in stage.instructions
        if step.keyword == "COPY" and "from" not in step.flags
        for source in shlex.split(step.text)[:-1]
    ]
    assert sources, "the Dockerfile copies nothing from the context"
    for source in sources:
        wanted = source.rstrip("/")
        assert any(f == wanted or f.startswith(wanted + "/") for f in files), source


def test_the_image_runs_serve_as_pid_1_as_a_numbered_user_on_port_8000() -> None:
    final = final_stage()
    assert final["ENTRYPOINT"] == ['["rejoinder", "serve", "--host", "0.0.0.0", "--port", "8000"]']
    assert final["CMD"] == ['["examples/voice_agent.py"]']  # exec form: no shell as PID 1
    assert final["EXPOSE"] == ["8000"]
    assert final["STOPSIGNAL"] == ["SIGTERM"]
    user = final["USER"][0]
    assert user.split(":")[0].isdigit() and user.split(":")[0] != "0"
    env = " ".join(final["ENV"])
    assert "ORT_DISABLE_TELEMETRY=1" in env  # onnxruntime would phone home otherwise


def test_the_base_image_is_pinned_by_digest() -> None:
    global_args, stages = parse_dockerfile(DOCKERFILE.read_text())
    python = [s.base for s in stages if s.base.startswith("python:")]
    assert python and all("@sha256:" in base and ":3.11." in base for base in python)
    assert substitute("${NODE_IMAGE}", global_args).startswith("node:24.")


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "x"}')

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def health_server() -> Iterator[tuple[http.server.HTTPServer, type[_Health]]]:
    handler = type("Handler", (_Health,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def run_healthcheck(port: int) -> int:
    command = json.loads(final_stage()["HEALTHCHECK"][0].split("CMD", 1)[1])
    assert command[:2] == ["python", "-c"]
    code = command[2].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    return subprocess.run([sys.executable, "-c", code], timeout=30).returncode


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, True), (500, False)])
def test_the_healthcheck_passes_for_ok_full_and_draining_only(
    health_server: tuple[http.server.HTTPServer, type[_Health]], status: int, healthy: bool
) -> None:
    server, handler = health_server
    handler.status = status
    assert (run_healthcheck(server.server_address[1]) == 0) is healthy


def test_the_healthcheck_fails_when_nothing_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert run_healthcheck(port) == 1


def test_compose_interpolation_as_compose_does_it() -> None:
    env = {"A": "a", "EMPTY": ""}
    assert interpolate("${A}-${B:-b}-${EMPTY:-e}-${EMPTY-kept}-$$A", env) == "a-b-e--$A"
    assert interpolate(["${B:-${A}}", {"k": "x${A}"}], env) == ["a", {"k": "xa"}]
    with pytest.raises(InterpolationError, match="TURN_SECRET: set it"):
        interpolate("${TURN_SECRET:?set it}", env)


def serve_help() -> str:
    command = [sys.executable, "-m", "rejoinder.cli", "serve", "--help"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout


def compose_report(
    tmp_path: Path, edit_conf: str = "", edit_compose: tuple[str, str] = ("", "")
) -> ComposeReport:
    conf = (CONTAINER / "turnserver.conf").read_text() + edit_conf
    compose = (ROOT / "compose.yaml").read_text().replace(*edit_compose)
    (tmp_path / "turnserver.conf").write_text(conf)
    (tmp_path / "compose.yaml").write_text(compose)
    return check_compose(
        tmp_path / "compose.yaml",
        tmp_path / "turnserver.conf",
        CONTAINER / "env.example",
        serve_help(),
        lambda url: None if url.startswith("turn:turn.example.com:3478?transport=") else url,
    )


def test_compose_and_coturn_agree_and_keep_the_secret_out(tmp_path: Path) -> None:
    report = compose_report(tmp_path)
    assert report.problems == []
    assert any("refuses to start" in fact for fact in report.facts)  # env.example has no secret
    assert any("172.31.240.0/24 only" in fact for fact in report.facts)
    assert report.agent_command[0] == "examples/voice_agent.py"
    # Pending only until `serve` has the ICE options; never a misspelt flag.
    assert all("ICE options yet" in line for line in report.pending)


def test_compose_check_finds_a_secret_in_coturns_file(tmp_path: Path) -> None:
    report = compose_report(tmp_path, edit_conf="static-auth-secret=committed\n")
    assert any("holds the TURN secret" in problem for problem in report.problems)


def test_compose_check_finds_a_relay_range_that_is_not_the_agents_network(tmp_path: Path) -> None:
    report = compose_report(tmp_path, edit_compose=("172.31.240.0/24", "172.31.241.0/24"))
    assert any("allowed-peer-ip" in problem for problem in report.problems)


def test_compose_check_finds_a_private_range_left_open(tmp_path: Path) -> None:
    conf = (CONTAINER / "turnserver.conf").read_text()
    opened = conf.replace("denied-peer-ip=10.0.0.0-10.255.255.255\n", "")
    (tmp_path / "open.conf").write_text(opened)
    report = check_compose(
        ROOT / "compose.yaml", tmp_path / "open.conf", CONTAINER / "env.example", serve_help(),
        lambda url: None,
    )  # fmt: skip
    assert any("10.0.0.0/8" in problem for problem in report.problems)


def test_compose_check_finds_a_stop_grace_period_shorter_than_the_drain(tmp_path: Path) -> None:
    shorter = ("stop_grace_period: 45s", "stop_grace_period: 20s")
    report = compose_report(tmp_path, edit_compose=shorter)
    assert any("stop_grace_period" in problem for problem in report.problems)


def test_the_turn_credentials_are_checked_as_coturn_checks_them() -> None:
    from compose_agent import _credentials_problem
    from compose_check import ComposeReport

    urls = ["turn:t.example:3478?transport=udp", "turn:t.example:3478?transport=tcp"]
    compose = ComposeReport(
        agent_command=["a.py", "--ice-server", urls[0], "--ice-server", urls[1]],
        agent_env={"REJOINDER_TURN_SECRET": "north"},
    )
    now = 1_700_000_000.0
    username = f"{int(now) + 3600}:client_1"
    # base64(HMAC-SHA1("north", username)), as coturn's README gives the formula
    password = base64.b64encode(
        hmac.new(b"north", username.encode(), hashlib.sha1).digest()
    ).decode()

    def body(user: str = username, credential: str = password, ttl: float = 3600) -> dict:
        server = {"urls": urls, "username": user, "credential": credential}
        return {"ice_servers": [server], "ice_transport_policy": "all", "ttl": ttl}

    assert _credentials_problem(body(), compose, now) is None
    assert "HMAC" in (_credentials_problem(body(credential="x" + password[1:]), compose, now) or "")
    assert "expire" in (_credentials_problem(body(ttl=60), compose, now) or "")
    assert "<expiry>:<id>" in (_credentials_problem(body(user="client_1"), compose, now) or "")
    wrong = {**body(), "ice_servers": [{**body()["ice_servers"][0], "urls": urls[:1]}]}
    assert "TURN URLs" in (_credentials_problem(wrong, compose, now) or "")
