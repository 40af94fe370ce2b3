"""compose.yaml, container/turnserver.conf and container/env.example, checked together.

What can be known without Docker: that compose.yaml interpolates from env.example (and
refuses to start without a TURN secret, as env.example leaves it empty), that the agent's
command names flags ``rejoinder serve`` has and TURN URLs rejoinder accepts, that the
agent and coturn get the secret from the same variable and coturn's file holds none, that
the peer range coturn may relay to is the agent's network and every other private range
is denied, and that Docker waits longer than the drain.

References: the Compose file reference, interpolation
(https://docs.docker.com/reference/compose-file/interpolation/: ``${VAR:-default}``,
``${VAR:?error}``, ``$$``); coturn's README.turnserver for the options.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ComposeReport", "check_compose", "interpolate", "read_env_file"]

ICE_FLAGS = frozenset(
    {"--ice-server", "--turn-secret", "--turn-user", "--turn-password", "--turn-ttl",
     "--ice-transport-policy"}
)  # fmt: skip
"""The ICE options another change adds to ``rejoinder serve`` (names as agreed)."""

PRIVATE = [
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16",
              "100.64.0.0/10", "0.0.0.0/8", "fc00::/7", "fe80::/10", "::1/128")
]  # fmt: skip


class InterpolationError(ValueError):
    pass


@dataclass
class ComposeReport:
    problems: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    """Fine once another change lands (the ICE flags of ``serve``)."""
    facts: list[str] = field(default_factory=list)
    agent_command: list[str] = field(default_factory=list)
    agent_env: dict[str, str] = field(default_factory=dict)


def read_env_file(text: str) -> dict[str, str]:
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip().strip("\"'")
    return values


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's interpolation over a loaded YAML tree (strings only)."""
    if isinstance(value, str):
        return _interpolate(value, env)
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    return value


def _interpolate(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            end = _closing(text, i + 2)
            out.append(_expand(text[i + 2 : end], env))
            i = end + 1
        elif text[i] == "$" and (m := re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i + 1 :])):
            out.append(env.get(m.group(0), ""))
            i += 1 + m.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _closing(text: str, start: int) -> int:
    depth = 1
    for j in range(start, len(text)):
        if text.startswith("${", j):
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise InterpolationError(f"unclosed ${{ in {text!r}")


def _expand(body: str, env: Mapping[str, str]) -> str:
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?$", body, re.S)
    if not match:
        raise InterpolationError(f"bad variable ${{{body}}}")
    name, operator, word = match.group(1), match.group(2), match.group(3) or ""
    value = env.get(name)
    empty = value is None or ((operator or "").startswith(":") and value == "")
    if operator in (":-", "-"):
        return _interpolate(word, env) if empty else value or ""
    if operator in (":?", "?"):
        if empty:
            raise InterpolationError(f"{name}: {_interpolate(word, env)}")
        return value or ""
    if operator in (":+", "+"):
        return "" if empty else _interpolate(word, env)
    return value or ""


def check_compose(
    compose_file: Path,
    turn_conf: Path,
    env_example: Path,
    serve_help: str,
    ice_url_ok: Callable[[str], str | None],
    drain_default: float = 30.0,
) -> ComposeReport:
    """``serve_help``: ``rejoinder serve --help`` of the built image; ``ice_url_ok``: the
    image's own check of a STUN/TURN URL (None: fine, else why not; it may be unknown)."""
    import yaml  # the test tools' PyYAML (rejoinder[simulate])

    report = ComposeReport()
    raw = yaml.safe_load(compose_file.read_text())
    example = read_env_file(env_example.read_text())

    # env.example as shipped has no secret: compose must refuse it.
    try:
        interpolate(raw, example)
        report.problems.append("compose.yaml starts with env.example's empty TURN_SECRET")
    except InterpolationError as exc:
        report.facts.append(f"without a secret compose refuses to start: {exc}")
    filled = {**example, "TURN_SECRET": "0123456789abcdef" * 4}
    try:
        compose = interpolate(raw, filled)
    except InterpolationError as exc:
        report.problems.append(f"compose.yaml needs a variable env.example lacks: {exc}")
        return report
    if example.get("TURN_SECRET"):
        report.problems.append("container/env.example holds a TURN secret: it is committed")

    services = compose.get("services", {})
    agent, turn = services.get("agent", {}), services.get("turn", {})
    _check_agent(agent, serve_help, ice_url_ok, drain_default, report)
    _check_turn(turn, compose, turn_conf, report)
    secret_agent = agent.get("environment", {}).get("REJOINDER_TURN_SECRET")
    secret_turn = turn.get("environment", {}).get("TURN_SECRET")
    if not secret_agent or secret_agent != secret_turn:
        report.problems.append("the agent and coturn do not get the same TURN secret")
    else:
        report.facts.append("agent (REJOINDER_TURN_SECRET) and coturn share TURN_SECRET")
    return report


def _check_agent(
    agent: dict[str, Any],
    serve_help: str,
    ice_url_ok: Callable[[str], str | None],
    drain_default: float,
    report: ComposeReport,
) -> None:
    command = [str(word) for word in agent.get("command", [])]
    report.agent_command = command
    report.agent_env = {k: str(v) for k, v in (agent.get("environment") or {}).items()}
    known = set(re.findall(r"(--[a-z][a-z0-9-]*)", serve_help))
    flags = [word for word in command if word.startswith("--")]
    for flag in flags:
        if flag in known:
            continue
        if flag in ICE_FLAGS and not known & ICE_FLAGS:
            report.pending.append(f"{flag}: `rejoinder serve` has no ICE options yet")
        else:
            report.problems.append(f"compose.yaml passes {flag}, which `rejoinder serve` lacks")
    for flag, value in itertools.pairwise(command):
        if flag == "--ice-server":
            why = ice_url_ok(value)
            if why:
                report.problems.append(f"--ice-server {value}: {why}")
    drain = drain_default
    if "--drain-timeout" in command:
        drain = float(command[command.index("--drain-timeout") + 1])
    grace = _seconds(str(agent.get("stop_grace_period", "10s")))
    if grace < drain + 5:
        report.problems.append(
            f"stop_grace_period {grace:g} s leaves no time for a {drain:g} s drain"
        )
    else:
        report.facts.append(f"docker waits {grace:g} s for a drain of {drain:g} s")


def _check_turn(
    turn: dict[str, Any], compose: dict[str, Any], turn_conf: Path, report: ComposeReport
) -> None:
    image = str(turn.get("image", ""))
    tag = image.partition(":")[2]
    if not re.match(r"\d+\.\d+\.\d+", tag):
        report.problems.append(f"coturn's image is not pinned to a version: {image!r}")
    conf = _conf(turn_conf.read_text())
    args = dict(_conf("\n".join(str(a).lstrip("-") for a in turn.get("command", []))))
    if "static-auth-secret" in dict(conf):
        report.problems.append("turnserver.conf holds the TURN secret: it is committed")
    if args.get("static-auth-secret") != "${TURN_SECRET}":
        report.problems.append("coturn's secret does not come from $TURN_SECRET")
    for needed in ("use-auth-secret", "no-tcp-relay", "fingerprint"):
        if needed not in dict(conf):
            report.problems.append(f"turnserver.conf lacks {needed}")
    if "realm" not in args and "realm" not in dict(conf):
        report.problems.append("coturn has no realm (the TURN REST scheme needs one)")
    denied = [_range(v) for k, v in conf if k == "denied-peer-ip"]
    allowed = [_range(v) for k, v in conf if k == "allowed-peer-ip"]
    for network in PRIVATE:
        if not any(_covers(r, network) for r in denied):
            report.problems.append(f"turnserver.conf does not deny relaying to {network}")
    subnets = [
        ipaddress.ip_network(entry["subnet"])
        for network in (compose.get("networks") or {}).values()
        for entry in ((network or {}).get("ipam") or {}).get("config", [])
    ]
    if [(r[0], r[1]) for r in allowed] != [(s[0], s[-1]) for s in subnets]:
        report.problems.append(
            f"turnserver.conf's allowed-peer-ip {allowed} is not compose.yaml's network "
            f"{[str(s) for s in subnets]}"
        )
    else:
        report.facts.append(f"coturn may relay to {', '.join(map(str, subnets))} only")
    low, high = int(dict(conf).get("min-port", 0)), int(dict(conf).get("max-port", 0))
    report.facts.append(f"relay ports {low}-{high}/udp ({high - low + 1})")


def _conf(text: str) -> list[tuple[str, str]]:
    entries = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition("=")
            entries.append((key.strip(), value.strip()))
    return entries


def _range(text: str) -> tuple[Any, Any]:
    low, _, high = text.partition("-")
    first = ipaddress.ip_address(low.strip())
    return first, ipaddress.ip_address(high.strip()) if high else first


def _covers(bounds: tuple[Any, Any], network: Any) -> bool:
    low, high = bounds
    return bool(low.version == network.version and low <= network[0] and network[-1] <= high)


def _seconds(text: str) -> float:
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)\s*(h|ms|m|s)?", text):
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "": 1}[unit]
    return total
