"""The public API, as the documentation site sees it: every name a public module exports
in its ``__all__``, and whether it has a docstring.

It reads the sources with griffe (the library mkdocstrings renders the API reference
with), not by importing them: constants and type aliases carry their docstrings as a
string literal after the assignment, which only the source shows; a dataclass without a
docstring gets a generated one at run time (its signature), which says nothing; and the
optional extras (Ray, aiortc, the offline engines) need not be installed.

Run it as a script to list what is missing::

    .venv/bin/python tests/docs/public_api.py
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import griffe

SRC = Path(__file__).resolve().parents[2] / "src"

PUBLIC_MODULES = (
    "rejoinder",
    "rejoinder.testing",
    "rejoinder.testing.conformance",
    "rejoinder.io",
    "rejoinder.io.asgi",
    "rejoinder.io.telephony",
    "rejoinder.io.sip",
    "rejoinder.io.webrtc",
    "rejoinder.client",
    "rejoinder.simulate",
    "rejoinder.deploy.ray",
    "rejoinder.telemetry",
    "rejoinder.recording",
)
"""The modules whose ``__all__`` is the public API, besides each provider package
(``provider_modules`` finds those, so a provider added later is checked too)."""


def provider_modules() -> list[str]:
    """Every package under ``rejoinder/providers/`` that is not private (``_x``)."""
    root = SRC / "rejoinder" / "providers"
    return sorted(
        f"rejoinder.providers.{path.parent.name}"
        for path in root.glob("*/__init__.py")
        if not path.parent.name.startswith("_")
    )


def public_modules() -> list[str]:
    """Every module whose exports are documented: the fixed list and the providers."""
    return [*PUBLIC_MODULES, *provider_modules()]


@functools.cache
def load_package() -> griffe.Module:
    """The ``rejoinder`` package as griffe reads it from ``src/``, aliases resolved (read
    once per process: the tests share it)."""
    import griffe

    return griffe.load(
        "rejoinder",
        search_paths=[str(SRC)],
        resolve_aliases=True,
        resolve_external=False,
        allow_inspection=False,
    )


def _module(package: griffe.Module, dotted: str) -> griffe.Module:
    found = package if dotted == "rejoinder" else package[dotted.removeprefix("rejoinder.")]
    assert found.is_module, f"{dotted} is not a module"
    return found  # type: ignore[return-value]


def exported_names(module: griffe.Module) -> list[str]:
    """The names in the module's ``__all__`` (griffe reads it statically)."""
    return [name if isinstance(name, str) else name.name for name in module.exports or ()]


def undocumented(package: griffe.Module | None = None) -> Iterator[str]:
    """``module.name`` for each exported name without a docstring, ``module.name: why``
    for one that cannot be found at all (a stale ``__all__`` entry)."""
    import griffe

    package = package or load_package()
    for dotted in public_modules():
        module = _module(package, dotted)
        if not module.exports:
            yield f"{dotted}: no __all__"
            continue
        for name in exported_names(module):
            if name == "__version__":  # a version string: nothing to document
                continue
            try:
                docstring = module[name].docstring
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError) as exc:
                yield f"{dotted}.{name}: cannot be resolved ({type(exc).__name__})"
                continue
            if docstring is None or not docstring.value.strip():
                yield f"{dotted}.{name}"


def main() -> int:
    missing = list(undocumented())
    for line in missing:
        print(line)
    print(f"{len(missing)} exported names without a docstring", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
