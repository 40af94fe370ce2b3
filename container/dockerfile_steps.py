"""The Dockerfile and .dockerignore read as the builder reads them, without a builder.

``parse_dockerfile`` gives the build stages and their instructions (line continuations,
comments, the JSON form of RUN/CMD/ENTRYPOINT/HEALTHCHECK, ``--flag=value`` options);
``substitute`` expands ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` where the builder
does (FROM, ENV, WORKDIR, COPY, USER, ...: not in RUN, CMD or ENTRYPOINT, which the
shell or nothing expands); ``context_files`` lists the files of the build context that
.dockerignore lets through.

Only what this project's Dockerfile uses is read; anything else is refused by name
(``DockerfileError``), so the Dockerfile cannot outgrow this reading unnoticed.

References: the Dockerfile reference (https://docs.docker.com/reference/dockerfile/:
parser directives, escapes, environment replacement, FROM, COPY, HEALTHCHECK) and the
.dockerignore rules (https://docs.docker.com/build/concepts/context/#dockerignore-files:
Go's filepath.Match patterns, ``**``, ``!`` exceptions, the last matching line wins).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DockerfileError",
    "IgnoreRules",
    "Instruction",
    "Stage",
    "context_files",
    "parse_dockerfile",
    "substitute",
]

KNOWN = {
    "ARG", "FROM", "RUN", "COPY", "ENV", "WORKDIR", "USER", "EXPOSE", "STOPSIGNAL",
    "HEALTHCHECK", "ENTRYPOINT", "CMD", "LABEL",
}  # fmt: skip


class DockerfileError(ValueError):
    """The Dockerfile says something this reading does not know (or gets wrong)."""


@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str
    """Everything after the keyword and its ``--flags``, continuations joined."""
    flags: dict[str, str]
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array form (``["a", "b"]``), or None for the shell form."""
        if not self.text.startswith("["):
            return None
        try:
            value = json.loads(self.text)
        except json.JSONDecodeError:
            return None  # the builder, too, takes a malformed array as shell form
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DockerfileError(f"line {self.line}: {self.keyword} array of non-strings")
        return value


@dataclass
class Stage:
    index: int
    base: str
    """The FROM image, its ARGs expanded."""
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name or f"stage {self.index}"


_FLAG = re.compile(r"--([a-z-]+)(?:=(\S*))?")


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The global ARGs (their defaults) and the stages, in order."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in _instructions(text):
        keyword = instruction.keyword
        if keyword not in KNOWN:
            raise DockerfileError(f"line {instruction.line}: {keyword} is not read here")
        if keyword == "FROM":
            stages.append(_from(instruction, global_args, len(stages)))
        elif not stages:
            if keyword != "ARG":
                raise DockerfileError(f"line {instruction.line}: {keyword} before FROM")
            name, _, default = instruction.text.partition("=")
            global_args[name.strip()] = _unquote(default.strip())
        else:
            stages[-1].instructions.append(instruction)
    if not stages:
        raise DockerfileError("no FROM: not a Dockerfile")
    return global_args, stages


def _from(instruction: Instruction, args: Mapping[str, str], index: int) -> Stage:
    words = instruction.text.split()
    if len(words) == 3 and words[1].upper() == "AS":
        image, name = words[0], words[2]
    elif len(words) == 1:
        image, name = words[0], None
    else:
        raise DockerfileError(f"line {instruction.line}: FROM IMAGE [AS NAME], got {words}")
    return Stage(index, substitute(image, args), name)


def _instructions(text: str) -> Iterator[Instruction]:
    """Logical lines: comments dropped (also inside a continuation, as the builder does),
    a trailing backslash joins the next line."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue  # parser directives (# syntax=) are comments to this reading
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].rstrip())
            continue
        pending.append(stripped)
        yield _instruction(" ".join(part for part in pending if part), start)
        pending = []
    if pending:
        raise DockerfileError(f"line {start}: the file ends inside a continuation")


def _instruction(line: str, number: int) -> Instruction:
    keyword, _, rest = line.partition(" ")
    rest = rest.strip()
    flags: dict[str, str] = {}
    if keyword.upper() in ("RUN", "COPY", "HEALTHCHECK"):
        while match := _FLAG.match(rest):
            if keyword.upper() == "HEALTHCHECK" and match.group(2) is None:
                break
            flags[match.group(1)] = match.group(2) or ""
            rest = rest[match.end() :].lstrip()
    return Instruction(keyword.upper(), rest, flags, number)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_VARIABLE = re.compile(rf"\$(?:\{{({_NAME})(?::([-+])([^}}]*))?\}}|({_NAME}))")


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:+alternative}`` as the builder
    expands them (an unset variable is empty); ``\\$`` is a literal dollar."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        value = variables.get(name, "")
        operator, word = match.group(2), match.group(3)
        if operator == "-":
            return value or word
        if operator == "+":
            return word if value else ""
        return value

    parts = text.split("\\$")
    return "$".join(_VARIABLE.sub(one, part) for part in parts)


def env_assignments(instruction: Instruction, variables: Mapping[str, str]) -> dict[str, str]:
    """``ENV A=1 B="two words"`` (the legacy ``ENV A value`` form is refused)."""
    assigned: dict[str, str] = {}
    scope = dict(variables)
    for word in shlex.split(instruction.text):
        name, equals, value = word.partition("=")
        if not equals:
            raise DockerfileError(f"line {instruction.line}: write ENV NAME=VALUE")
        # Each assignment sees the values before this ENV line (the builder's rule).
        assigned[name] = substitute(value, scope)
    return assigned


# ------------------------------------------------------------------- .dockerignore


@dataclass(frozen=True)
class IgnoreRules:
    """The lines of a .dockerignore: the last pattern that matches a path (or one of its
    parent directories) decides; a ``!`` pattern lets it through again."""

    patterns: tuple[tuple[bool, re.Pattern[str]], ...]

    @classmethod
    def read(cls, text: str) -> IgnoreRules:
        patterns = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            pattern = os.path.normpath(line[1:].strip() if keep else line).lstrip("/")
            patterns.append((keep, _glob(pattern)))
        return cls(tuple(patterns))

    def excluded(self, path: str) -> bool:
        """``path``: relative to the context, with ``/``."""
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for keep, regex in self.patterns:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                excluded = not keep
        return excluded


def _glob(pattern: str) -> re.Pattern[str]:
    """Go's filepath.Match, plus ``**`` for any number of directories."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i)
            if end < 0:
                raise DockerfileError(f".dockerignore: unclosed [ in {pattern!r}")
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out.append(f"[{'^' + body[1:] if body.startswith('^') else body}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def context_files(root: Path, rules: IgnoreRules) -> list[str]:
    """Every file (and symlink) of the build context the builder would receive, relative
    paths with ``/``. Excluded directories are still walked: a ``!`` line may let a file
    inside them through."""
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        base = Path(directory).relative_to(root)
        dirs.sort()
        for name in sorted(files):
            relative = (base / name).as_posix()
            if not rules.excluded(relative):
                found.append(relative)
        # Walking into .venv or node_modules costs seconds and no rule lets anything
        # through there: skip an excluded directory unless an exception could reach in.
        dirs[:] = [d for d in dirs if not _prunable((base / d).as_posix(), rules)]
    return found


def _prunable(directory: str, rules: IgnoreRules) -> bool:
    if not rules.excluded(directory):
        return False
    for keep, regex in rules.patterns:
        if keep and _could_match_inside(regex.pattern, directory):
            return False
    return True


def _could_match_inside(pattern: str, directory: str) -> bool:
    """Whether an exception pattern might match something under ``directory`` (it is
    written under it, or it starts with a wildcard)."""
    literal = re.match(r"[^\[\]().*?+^$|{}\\]*", pattern.replace("\\/", "/"))
    head = literal.group(0).replace("\\", "") if literal else ""
    return head.startswith(directory + "/") or directory.startswith(head.rstrip("/")) or not head
