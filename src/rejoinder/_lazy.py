"""Names a package loads on first use, through a module ``__getattr__`` (PEP 562): what
a program that never touches them (numpy's audio frames, the realtime engine) does not
pay for at ``import rejoinder``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, namespace: dict[str, Any], names: Mapping[str, str]
) -> Callable[[str], object]:
    """A ``__getattr__`` for ``package``: ``names`` maps each lazy name to the module
    that defines it (absolute, or relative to ``package``); the first lookup imports it
    and keeps the value in ``namespace``, so later lookups never come back here."""

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    return __getattr__
