"""Reading a scenario file: YAML to ``Scenario``, with errors a person can act on.

A YAML syntax error names its line and column; a schema error names each key's path
(``events[2].at``), its line in the file and what is wrong with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import _extras
from .scenario import Scenario, ScenarioError

__all__ = ["describe_errors", "load_scenario", "parse_scenario"]


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file; ``ScenarioError`` says what is wrong and where."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"scenario file not found: {file}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read {file}: {exc}") from None
    return parse_scenario(text, where=str(file))


def parse_scenario(text: str, *, where: str = "<scenario>") -> Scenario:
    """Read a scenario from YAML text; ``ScenarioError`` says what is wrong, naming
    ``where`` (a file name) and the line."""
    with _extras.needed("simulate", "reading a scenario (YAML)", error=ScenarioError):
        import yaml  # type: ignore[import-untyped, unused-ignore]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(f"{where}{at}: not valid YAML: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{where}: a scenario is a mapping (agent:, llm:, events:, expect: ...), "
            f"not a {type(data).__name__}"
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(describe_errors(exc, where, text)) from None


def describe_errors(exc: ValidationError, where: str, text: str) -> str:
    """One line per problem: the key's path (``events[2].at``), its line, what is wrong."""
    lines = [f"{where}: {exc.error_count()} problem(s) in the scenario:"]
    for error in exc.errors():
        loc = _path(error["loc"])
        line = _line_of(text, error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (check its spelling and indentation)"
        elif error["type"] == "missing":
            message = "missing (this key is required)"
        got = "" if error["type"] in ("extra_forbidden", "missing") else _got(error)
        lines.append(f"  {loc or 'scenario'}{f' (line {line})' if line else ''}: {message}{got}")
    return "\n".join(lines)


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or "[" in str(part):
            continue  # pydantic's names for validators and union members
        else:
            out += f".{part}" if out else str(part)
    return out


def _got(error: Any) -> str:
    value = error.get("input")
    if isinstance(value, dict | list) or value is None:
        return ""
    return f" (got {value!r:.60})"


def _line_of(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The line of the deepest key of ``loc`` found in the YAML (best effort)."""
    try:
        import yaml  # type: ignore[import-untyped, unused-ignore]

        node: Any = yaml.compose(text)
    except Exception:
        return None
    line: int | None = None
    for part in loc:
        if node is None:
            break
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            found = next(((k, v) for k, v in node.value if k.value == part), None)
            if found is None:
                break
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            continue
    return line
