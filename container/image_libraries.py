"""Which native libraries the image needs from its base, and whether the base has them.

Two views, both from this machine (Debian bookworm, as the base image):

- static: ``ldd`` on every ELF file of the layout (the wheels' extension modules, their
  bundled ``*.libs``, executables): a library not found, or found outside the layout, is
  one the base image must provide;
- at run time: the shared objects the server and the model check really mapped
  (``/proc/PID/maps``): this catches what is loaded with ``dlopen`` (eSpeak NG,
  onnxruntime's providers), which ``ldd`` cannot see.

A library outside the layout is traced to its Debian package (``dpkg -S``) and must be
in ``BASE_PACKAGES`` or installed by the Dockerfile. Libraries that this machine's Python
itself brings (its extension modules' dependencies) are set apart: the image's Python
is its own build, with its own (the base image's Dockerfile keeps what it links).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BASE_PACKAGES", "LibraryReport", "check_libraries", "elf_files"]

# What python:3.11-slim-bookworm has, by Debian package:
# - debian:bookworm-slim, the list debuerreotype makes of its root file system
#   (https://github.com/debuerreotype/docker-debian-artifacts, bookworm/slim/rootfs.manifest);
# - what docker-library/python's 3.11/slim-bookworm Dockerfile adds: ca-certificates,
#   netbase and tzdata, and the runtime libraries its Python links (it marks every
#   library `ldd` finds in /usr/local as manually installed before purging the build
#   dependencies): libssl3, libsqlite3-0, libreadline8, libncursesw6, libgdbm6,
#   libgdbm-compat4 (and what those depend on: openssl, readline-common).
#   (https://github.com/docker-library/python, as recorded by docker-library/repo-info.)
BASE_PACKAGES = frozenset(
    """
    adduser apt base-files base-passwd bash bsdutils coreutils dash debconf
    debian-archive-keyring debianutils diffutils dpkg e2fsprogs findutils gcc-12-base gpgv
    grep gzip hostname init-system-helpers libacl1 libapt-pkg6.0 libattr1 libaudit-common
    libaudit1 libblkid1 libbz2-1.0 libc-bin libc6 libcap-ng0 libcap2 libcom-err2 libcrypt1
    libdb5.3 libdebconfclient0 libext2fs2 libffi8 libgcc-s1 libgcrypt20 libgmp10 libgnutls30
    libgpg-error0 libhogweed6 libidn2-0 liblz4-1 liblzma5 libmd0 libmount1 libnettle8
    libp11-kit0 libpam-modules libpam-modules-bin libpam-runtime libpam0g libpcre2-8-0
    libseccomp2 libselinux1 libsemanage-common libsemanage2 libsepol2 libsmartcols1 libss2
    libstdc++6 libsystemd0 libtasn1-6 libtinfo6 libudev1 libunistring2 libuuid1 libxxhash0
    libzstd1 login logsave mawk mount ncurses-base ncurses-bin passwd perl-base sed
    sysvinit-utils tar tzdata usr-is-merged util-linux util-linux-extra zlib1g
    ca-certificates netbase openssl libssl3 libsqlite3-0 libreadline8 readline-common
    libncursesw6 libgdbm6 libgdbm-compat4
    """.split()  # noqa: SIM905  (a list as it would be read aloud)
)


@dataclass
class LibraryReport:
    needed: dict[str, str] = field(default_factory=dict)
    """Library path outside the layout -> its Debian package (or "?")."""
    missing: list[str] = field(default_factory=list)
    """Not found at all (``ldd``: "not found"), with the file that wanted it."""
    not_in_base: dict[str, str] = field(default_factory=dict)
    """Library -> package, for packages the base image does not have."""
    python_own: list[str] = field(default_factory=list)
    """Loaded because of this machine's Python, not the layout: set apart."""
    nss_plugins: list[str] = field(default_factory=list)
    """glibc's name-service modules this machine's /etc/nsswitch.conf names (the image
    has its own nsswitch.conf, "files dns", both inside libc6): set apart."""
    elf_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.missing and not self.not_in_base


def elf_files(root: Path) -> list[Path]:
    """Every regular file under ``root`` that starts like an ELF object."""
    found = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if path.is_symlink() or not (".so" in name or os.access(path, os.X_OK)):
                continue
            try:
                with path.open("rb") as handle:
                    if handle.read(4) == b"\x7fELF":
                        found.append(path)
            except OSError:
                continue
    return found


def check_libraries(
    root: Path,
    loaded: Iterable[str],
    python_closure: Iterable[str],
    extra_packages: Iterable[str] = (),
) -> LibraryReport:
    """``loaded``: shared objects seen mapped at run time; ``python_closure``: what this
    machine's Python and its own extension modules need (see ``python_libraries``)."""
    report = LibraryReport()
    root = root.resolve()
    outside: set[str] = set()
    elves = elf_files(root)
    report.elf_count = len(elves)
    for batch in _batches(elves, 64):
        for wanted_by, name, path in _ldd(batch):
            if path is None:
                report.missing.append(f"{name} (needed by {wanted_by.relative_to(root)})")
            elif not Path(path).resolve().is_relative_to(root):
                outside.add(path)
    python_own = {os.path.realpath(p) for p in python_closure}
    for path in loaded:
        real = os.path.realpath(path)
        if Path(real).is_relative_to(root) or path in outside:
            continue
        if real in python_own:
            report.python_own.append(path)
        elif os.path.basename(path).startswith("libnss_"):
            report.nss_plugins.append(path)
        else:
            outside.add(path)
    packages = _packages(sorted(outside))
    allowed = BASE_PACKAGES | set(extra_packages)
    for path in sorted(outside):
        package = packages.get(path, "?")
        report.needed[path] = package
        if package not in allowed:
            report.not_in_base[path] = package
    return report


def python_libraries(python: str) -> list[str]:
    """What ``python`` (this machine's stand-in for the image's) and its own standard
    library's extension modules link: ``ldd`` of each."""
    script = (
        "import sys, sysconfig, glob, os;"
        "d = sysconfig.get_paths()['platstdlib'];"
        "print('\\n'.join([os.path.realpath(sys.executable)] + "
        "glob.glob(os.path.join(d, 'lib-dynload', '*.so'))))"
    )
    result = subprocess.run([python, "-c", script], capture_output=True, text=True)
    files = [Path(line) for line in result.stdout.splitlines() if line]
    own = {str(path) for path in files}
    for _, _, path in _ldd(files):
        if path is not None:
            own.add(path)
    return sorted(own)


def _ldd(files: list[Path]) -> list[tuple[Path, str, str | None]]:
    """(file, library name, resolved path or None) for each dependency ``ldd`` lists."""
    if not files:
        return []
    result = subprocess.run(["ldd", *map(str, files)], capture_output=True, text=True)
    rows: list[tuple[Path, str, str | None]] = []
    current = files[0]
    for line in result.stdout.splitlines():
        if not line.startswith(("\t", " ")):
            current = Path(line.rstrip(":"))
            continue
        text = line.strip()
        if "=>" in text:
            name, _, rest = text.partition("=>")
            target = rest.strip().split(" (")[0].strip()
            if target == "not found":
                rows.append((current, name.strip(), None))
            elif target.startswith("/"):
                rows.append((current, name.strip(), target))
        elif text.startswith("/"):  # the dynamic loader itself
            rows.append((current, text.split()[0], text.split()[0]))
    return rows


def _packages(paths: list[str]) -> dict[str, str]:
    """Debian package of each path (``dpkg -S``), trying the /lib and /usr/lib spellings
    (bookworm's merged /usr: dpkg knows a file by the path its package ships)."""
    found: dict[str, str] = {}
    for path in paths:
        for candidate in _spellings(path):
            result = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if result.returncode == 0 and result.stdout:
                found[path] = result.stdout.split(":", 1)[0].split(",")[0].strip()
                break
    return found


def _spellings(path: str) -> list[str]:
    real = os.path.realpath(path)
    out: list[str] = []
    for item in (path, real):
        out.append(item)
        if item.startswith("/usr/lib/"):
            out.append(item.removeprefix("/usr"))
        elif item.startswith("/lib"):
            out.append("/usr" + item)
    return list(dict.fromkeys(out))


def _batches(items: list[Path], size: int) -> Iterable[list[Path]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
