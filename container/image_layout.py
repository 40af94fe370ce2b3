"""The Dockerfile's stages built into a folder of this machine: the image's layout.

Each stage runs in ``WORK/root``, the image's ``/`` for every path the Dockerfile itself
creates (WORKDIR, COPY destinations, the venv): ``/opt/rejoinder`` is
``WORK/root/opt/rejoinder``. A finished stage is moved to ``WORK/stages/NAME`` and the
next one starts from an empty root, so ``COPY --from=NAME /opt/rejoinder /opt/rejoinder``
puts the venv back at the very path it was built at (a venv is not relocatable: its
scripts name their interpreter by absolute path, in the image as here).

Stages that depend on nothing run at the same time, as BuildKit runs them: the node
stage builds in its own folder (its bundle is copied to another path, so no path needs
to match) while the Python stages take their turns in the root.

The base image is this machine: its Python 3.11 stands in for python:3.11-slim's, its
node and npm for node's image. RUN steps are not given to a shell: each command is one
the reading knows (``python -m venv``, ``pip``, ``npm``, ``chmod``, ``mkdir``), run with
its paths mapped into the root; ``useradd`` is recorded, never run (it would change this
machine's users); anything else stops the build (``LayoutError``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_steps import (
    DockerfileError,
    IgnoreRules,
    Instruction,
    Stage,
    context_files,
    env_assignments,
    parse_dockerfile,
    substitute,
)

__all__ = ["BuiltImage", "LayoutError", "Toolbox", "build_layout"]

# What the environment of a RUN step keeps of this machine's: how to reach the registries
# (a proxy, a certificate bundle), never settings that change what gets installed (the
# image has no pip configuration: PIP_CONFIG_FILE is the null device).
_PASSED_ENV = (
    "HOME", "LANG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
    "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PIP_CERT",
    "PIP_DEFAULT_TIMEOUT", "NODE_EXTRA_CA_CERTS",
)  # fmt: skip
_RUNNABLE = {"python", "python3", "pip", "pip3", "npm", "chmod", "mkdir"}
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH of the python and node images (what ``$PATH`` is in the image)."""
_BASE_PATH_MARK = "@base-path@"


class LayoutError(RuntimeError):
    """A build step failed, or is one this build does not know how to run."""


@dataclass(frozen=True)
class Toolbox:
    """This machine's stand-ins for the base images' programs."""

    python: str
    """A Python 3.11 interpreter (for ``python`` in a python:3.11 stage)."""
    bin_dir: Path
    """A folder with ``python``/``python3`` pointing at it, put first on PATH."""


@dataclass
class BuiltImage:
    """The final stage: its layout and what its instructions say about running it."""

    root: Path
    stages: list[Stage]
    python: str
    """This machine's Python standing in for the base image's."""
    env: dict[str, str] = field(default_factory=dict)
    """The image's environment (ENV), with the image's own paths."""
    workdir: str = "/"
    user: str = "0"
    users: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Users made by ``useradd``: name -> (uid, home)."""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    healthcheck_flags: dict[str, str] = field(default_factory=dict)
    exposed: list[str] = field(default_factory=list)
    stopsignal: str = "SIGTERM"
    apt_packages: list[str] = field(default_factory=list)
    """Debian packages the final stage installs (none today)."""
    layout_dirs: tuple[str, ...] = ()
    """The image's top-level folders the Dockerfile creates (mapped into ``root``)."""
    context_file_count: int = 0
    notes: list[str] = field(default_factory=list)
    step_seconds: list[tuple[str, float]] = field(default_factory=list)

    def runtime_env(self) -> dict[str, str]:
        """The container's environment, its paths put under ``root``: the image's ENV,
        HOME from the user's entry (as Docker sets it), the base images' PATH."""
        env = {key: self.map_text(value) for key, value in self.env.items()}
        env["PATH"] = env.get("PATH", _BASE_PATH_MARK).replace(_BASE_PATH_MARK, BASE_PATH)
        env["HOME"] = str(self.host_path(self.home()))
        return env

    def host_path(self, image_path: str) -> Path:
        """Where an absolute path of the image lies in this build."""
        return self.root / image_path.lstrip("/")

    def map_text(self, text: str) -> str:
        """``text`` with every image path the Dockerfile created put under ``root``."""
        return _map_paths(text, self.layout_dirs, self.root)

    def uid_gid(self) -> tuple[int, int]:
        """The numeric user and group the container runs as (``USER``)."""
        name, _, group = self.user.partition(":")
        uid = self.users[name][0] if name in self.users else int(name)
        gid = int(group) if group.isdigit() else uid
        return uid, gid

    def home(self) -> str:
        for uid, home in self.users.values():
            if uid == self.uid_gid()[0]:
                return home
        return "/"


def build_layout(
    dockerfile: Path,
    context: Path,
    work: Path,
    tools: Toolbox,
    say: Callable[[str], None] = lambda text: None,
) -> BuiltImage:
    """Build every stage of ``dockerfile`` (its context: ``context``) under ``work``."""
    global_args, stages = parse_dockerfile(dockerfile.read_text())
    ignore_file = context / ".dockerignore"
    rules = IgnoreRules.read(ignore_file.read_text() if ignore_file.is_file() else "")
    files = context_files(context, rules)
    layout_dirs = _layout_dirs(stages, global_args)
    root = work / "root"
    stage_dir = work / "stages"
    stage_dir.mkdir(parents=True)
    image = BuiltImage(
        root, stages, tools.python, layout_dirs=layout_dirs, context_file_count=len(files)
    )
    # BuildKit builds stages that do not depend on each other at the same time: here the
    # node stage (whose bundle is copied to another path, so any root will do) runs in
    # its own folder beside the Python stages, which take turns in WORK/root.
    background: dict[str, _Background] = {}

    def wait_for(name: str) -> None:
        if name in background:
            background.pop(name).join_or_raise()

    for stage in stages:
        final = stage is stages[-1]
        name = stage.name or str(stage.index)
        if not final and not _is_python(stage):
            own = stage_dir / name
            _fresh_root(own)
            builder = _StageBuilder(
                stage, image, own, context, set(files), stage_dir, tools, say, wait_for
            )
            background[name] = _Background(builder)
            continue
        _fresh_root(root)
        builder = _StageBuilder(
            stage, image, root, context, set(files), stage_dir, tools, say, wait_for
        )
        builder.run(final)
        if not final:
            root.rename(stage_dir / name)
    for name in list(background):
        wait_for(name)
    return image


def _fresh_root(path: Path) -> None:
    path.mkdir()
    os.chmod(path, 0o755)


def _is_python(stage: Stage) -> bool:
    return stage.base.split("@")[0].split(":")[0].split("/")[-1] == "python"


class _Background:
    """A stage built in a thread; its failure is raised where its output is needed."""

    def __init__(self, builder: _StageBuilder) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(builder,), daemon=True)
        self.thread.start()

    def _run(self, builder: _StageBuilder) -> None:
        try:
            builder.run(final=False)
        except BaseException as exc:  # handed to the thread that waits for this stage
            self.error = exc

    def join_or_raise(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def _layout_dirs(stages: Sequence[Stage], args: Mapping[str, str]) -> tuple[str, ...]:
    """The first folder of every absolute path the Dockerfile creates."""
    found: set[str] = set()
    for stage in stages:
        for step in stage.instructions:
            paths: list[str] = []
            if step.keyword == "WORKDIR":
                paths.append(substitute(step.text, args))
            elif step.keyword == "COPY":
                paths.append(shlex.split(step.text)[-1])
            elif step.keyword == "RUN":
                words = shlex.split(step.text)
                paths += [w for w in words if w.startswith("/")]
            for path in paths:
                head = path.strip("/").split("/")[0]
                if path.startswith("/") and head and head not in ("usr", "bin", "etc", "root"):
                    found.add(head)
    return tuple(sorted(found))


def _map_paths(text: str, heads: Sequence[str], root: Path) -> str:
    if not heads:
        return text
    pattern = r"(?<![\w./-])/(" + "|".join(re.escape(h) for h in heads) + r")(?=/|$|[\s:'\"])"
    return re.sub(pattern, lambda m: f"{root}/{m.group(1)}", text)


class _StageBuilder:
    def __init__(
        self,
        stage: Stage,
        image: BuiltImage,
        root: Path,
        context: Path,
        files: set[str],
        stage_dir: Path,
        tools: Toolbox,
        say: Callable[[str], None],
        wait_for: Callable[[str], None],
    ) -> None:
        self.stage = stage
        self.image = image
        self.root = root
        self.context = context
        self.files = files
        self.stage_dir = stage_dir
        self.tools = tools
        self.say = say
        self.wait_for = wait_for
        self.env: dict[str, str] = {"PATH": _BASE_PATH_MARK}
        self.workdir = "/"
        self.python_stage = _is_python(stage)

    def _host(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def _map(self, text: str) -> str:
        return _map_paths(text, self.image.layout_dirs, self.root)

    # -------------------------------------------------------------- instructions

    def run(self, final: bool) -> None:
        self._check_base()
        for step in self.stage.instructions:
            started = time.monotonic()
            handler = getattr(self, f"_{step.keyword.lower()}", None)
            if handler is None:
                raise LayoutError(f"line {step.line}: {step.keyword} has no meaning here")
            handler(step)
            took = time.monotonic() - started
            if took > 1.0:
                self.image.step_seconds.append((f"{self.stage.label}: {step.text[:60]}", took))
        if final:
            self.image.env = dict(self.env)
            self.image.workdir = self.workdir

    def _check_base(self) -> None:
        name, _, tag = self.stage.base.partition("@")[0].partition(":")
        if self.python_stage:
            wanted = ".".join(tag.split(".")[:2]).split("-")[0]
            have = _version([self.tools.python, "--version"])
            if not have.startswith(f"Python {wanted}"):
                raise LayoutError(f"{self.stage.base} needs Python {wanted} here, found {have}")
            self.image.notes.append(f"{self.stage.label}: {self.stage.base} stood in by {have}")
        elif name.endswith("node"):
            have = _version(["node", "--version"])
            if not have.startswith("v"):
                raise LayoutError(f"{self.stage.base} needs node and npm here")
            if have.lstrip("v").split(".")[0] != tag.split(".")[0].split("-")[0]:
                self.image.notes.append(
                    f"{self.stage.label}: {self.stage.base} stood in by node {have} (another "
                    f"major version: the bundle is fixed by package-lock.json)"
                )
        else:
            raise LayoutError(f"no stand-in for the base image {self.stage.base}")

    def _arg(self, step: Instruction) -> None:
        name, _, default = step.text.partition("=")
        self.env.setdefault(name.strip(), default.strip())

    def _env(self, step: Instruction) -> None:
        self.env.update(env_assignments(step, self.env))

    def _workdir(self, step: Instruction) -> None:
        path = substitute(step.text, self.env)
        self.workdir = path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"
        self._makedirs(self._host(self.workdir))

    def _user(self, step: Instruction) -> None:
        self.image.user = substitute(step.text, self.env)

    def _expose(self, step: Instruction) -> None:
        self.image.exposed += substitute(step.text, self.env).split()

    def _stopsignal(self, step: Instruction) -> None:
        self.image.stopsignal = step.text

    def _label(self, step: Instruction) -> None:
        return None

    def _entrypoint(self, step: Instruction) -> None:
        self.image.entrypoint = _exec_form(step)

    def _cmd(self, step: Instruction) -> None:
        self.image.cmd = _exec_form(step)

    def _healthcheck(self, step: Instruction) -> None:
        words = step.text.split(None, 1)
        if not words or words[0].upper() != "CMD":
            raise LayoutError(f"line {step.line}: HEALTHCHECK [OPTIONS] CMD [...]")
        inner = Instruction("CMD", words[1], {}, step.line)
        self.image.healthcheck = _exec_form(inner)
        self.image.healthcheck_flags = dict(step.flags)

    def _copy(self, step: Instruction) -> None:
        unknown = set(step.flags) - {"from"}
        if unknown:
            raise LayoutError(f"line {step.line}: COPY --{', --'.join(sorted(unknown))}")
        words = [substitute(w, self.env) for w in shlex.split(step.text)]
        sources, dest = words[:-1], words[-1]
        if not dest.startswith("/"):
            dest = f"{self.workdir.rstrip('/')}/{dest}"
        into_dir = dest.endswith("/") or len(sources) > 1
        target = self._host(dest)
        origin = step.flags.get("from")
        for source in sources:
            if origin is not None:
                self._copy_from_stage(origin, source, target, into_dir, step)
            else:
                self._copy_from_context(source, target, into_dir, step)

    def _copy_from_stage(
        self, origin: str, source: str, target: Path, into_dir: bool, step: Instruction
    ) -> None:
        self.wait_for(origin)
        tree = self.stage_dir / origin
        if not tree.is_dir():
            raise LayoutError(f"line {step.line}: COPY --from={origin}: no such stage built")
        path = tree / source.lstrip("/")
        if not path.exists():
            raise LayoutError(f"line {step.line}: {source} is not in stage {origin}")
        _place(path, target, into_dir, link=True, makedirs=self._makedirs)

    def _copy_from_context(
        self, source: str, target: Path, into_dir: bool, step: Instruction
    ) -> None:
        relative = source.strip("/").removeprefix("./")
        chosen = [f for f in self.files if f == relative or f.startswith(relative + "/")]
        if not chosen:
            raise LayoutError(
                f"line {step.line}: COPY {source}: not in the build context (.dockerignore?)"
            )
        if chosen == [relative]:  # one file
            _place(self.context / relative, target, into_dir, link=False, makedirs=self._makedirs)
            return
        for name in chosen:  # a folder: its contents, as the builder copies them
            inside = name[len(relative) + 1 :]
            destination = target / inside
            self._makedirs(destination.parent)
            shutil.copy2(self.context / name, destination, follow_symlinks=False)

    def _makedirs(self, path: Path) -> None:
        """Folders the builder creates: 0755, whatever this machine's umask."""
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for folder in reversed(missing):
            folder.mkdir()
            os.chmod(folder, 0o755)

    # ---------------------------------------------------------------------- RUN

    def _run(self, step: Instruction) -> None:
        if step.exec_form() is not None:
            raise LayoutError(f"line {step.line}: write RUN in the shell form")
        for flag, value in step.flags.items():
            if flag != "mount" or not value.startswith("type=cache,"):
                raise LayoutError(f"line {step.line}: RUN --{flag}={value}")
        # A cache mount keeps pip's downloads out of the image: here pip uses this
        # machine's cache the same way (outside the layout).
        for command in _commands(step.text):
            self._run_command(command, step)

    def _run_command(self, argv: list[str], step: Instruction) -> None:
        program = argv[0]
        if program == "useradd":
            self._useradd(argv, step)
            return
        if program == "apt-get":
            self._apt_get(argv, step)
            return
        if program not in _RUNNABLE:
            raise LayoutError(
                f"line {step.line}: RUN {program}: container/image_layout.py does not know "
                f"how to run it here (teach it, or keep the Dockerfile to what it knows)"
            )
        mapped = [self._map(word) for word in argv]
        for word in mapped[1:]:
            inside = Path(word).resolve().is_relative_to(self.root.resolve())
            if word.startswith("/") and program in ("chmod", "mkdir") and not inside:
                raise LayoutError(f"line {step.line}: {program} outside the image: {word}")
        env = self._run_env()
        executable = shutil.which(program, path=env["PATH"])
        if executable is None:
            raise LayoutError(f"line {step.line}: {program} is not on the stage's PATH")
        cwd = self._host(self.workdir)
        self.say(f"  [{self.stage.label}] RUN {' '.join(argv)}")
        result = subprocess.run(
            [executable, *mapped[1:]], cwd=cwd, env=env, capture_output=True, text=True
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
            raise LayoutError(f"line {step.line}: {' '.join(argv)} failed:\n{tail}")

    def _run_env(self) -> dict[str, str]:
        env = {key: os.environ[key] for key in _PASSED_ENV if key in os.environ}
        for key, value in self.env.items():
            env[key] = self._map(value)
        # This machine's programs stand in for the base image's (npm, node, python).
        host_path = os.environ.get("PATH", BASE_PATH)
        env["PATH"] = env["PATH"].replace(_BASE_PATH_MARK, host_path)
        if self.python_stage:
            env["PATH"] = f"{self.tools.bin_dir}:{env['PATH']}"
        env["PIP_CONFIG_FILE"] = os.devnull
        return env

    def _useradd(self, argv: list[str], step: Instruction) -> None:
        uid, home, name = None, None, argv[-1]
        words = iter(argv[1:-1])
        for word in words:
            if word in ("--uid", "-u"):
                uid = int(next(words))
            elif word in ("--home-dir", "-d"):
                home = next(words)
            elif word in ("--shell", "-s", "--gid", "-g", "--comment", "-c"):
                next(words)
        if uid is None or home is None:
            raise LayoutError(f"line {step.line}: useradd needs --uid and --home-dir here")
        self.image.users[name] = (uid, home)
        self._makedirs(self._host(home))
        # The home belongs to the user (useradd --create-home); chown needs root.
        if os.geteuid() == 0:
            os.chown(self._host(home), uid, uid)
        self.image.notes.append(f"useradd {name} (uid {uid}, home {home}): recorded, not run")

    def _apt_get(self, argv: list[str], step: Instruction) -> None:
        if len(argv) > 1 and argv[1] == "install":
            packages = [w for w in argv[2:] if not w.startswith("-")]
            self.image.apt_packages += packages
            self.image.notes.append(f"apt-get install {' '.join(packages)}: counted, not run")
        elif len(argv) < 2 or argv[1] not in ("update", "clean"):
            raise LayoutError(f"line {step.line}: apt-get {' '.join(argv[1:])}")


def _commands(text: str) -> list[list[str]]:
    """``a && b && c`` as argv lists (no pipes, no other shell syntax)."""
    words = shlex.split(text, posix=True)
    commands: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            commands.append([])
        elif word in ("|", "||", ";", ">", "<", "&"):
            raise DockerfileError(f"RUN: only `a && b` is read here, not {word!r}")
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _exec_form(step: Instruction) -> list[str]:
    argv = step.exec_form()
    if argv is None:
        # The shell form runs under /bin/sh -c: sh becomes PID 1 and SIGTERM never reaches
        # the server, so this project's Dockerfile must not use it.
        raise LayoutError(f"line {step.line}: {step.keyword} must be a JSON array (exec form)")
    return argv


def _place(
    source: Path, target: Path, into_dir: bool, *, link: bool, makedirs: Callable[[Path], None]
) -> None:
    destination = target / source.name if into_dir and source.is_file() else target
    copy = os.link if link else shutil.copy2
    if source.is_dir():
        makedirs(destination.parent)
        shutil.copytree(source, destination, symlinks=True, copy_function=copy, dirs_exist_ok=True)
    else:
        makedirs(destination.parent)
        if destination.exists():
            destination.unlink()
        copy(source, destination)


def _version(argv: list[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (result.stdout or result.stderr).strip()
