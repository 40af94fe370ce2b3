"""What is loaded on first use, so that a program that never touches it does not pay for
it at ``import rejoinder``: names a package loads through a module ``__getattr__`` (PEP
562: numpy's audio frames, the realtime engine), and regular expressions compiled when
first matched (``LazyPattern``)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any


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


if TYPE_CHECKING:

    def LazyPattern(pattern: str, flags: int = 0) -> re.Pattern[str]:
        return re.compile(pattern, flags)

else:

    class LazyPattern:
        """``re.compile(pattern, flags)``, done on first use: the text filters (markdown
        for speech, sentence ends, backchannels, turn ends) hold about thirty patterns,
        some 3 ms of ``import rejoinder`` if compiled there, which a session without
        speech never uses. The first method looked up compiles the pattern and keeps its
        methods on the instance, so every later call goes straight to ``re`` (a wrapper
        method per call was a tenth of a spoken turn's Python calls). Type checkers see
        an ``re.Pattern``."""

        def __init__(self, pattern: str, flags: int = 0) -> None:
            self._pattern = pattern
            self._flags = flags

        def __getattr__(self, name: str) -> Any:
            compiled = re.compile(self._pattern, self._flags)
            for method in _PATTERN_METHODS:
                setattr(self, method, getattr(compiled, method))
            return getattr(compiled, name)


_PATTERN_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "split", "sub", "subn")
