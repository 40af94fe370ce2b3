"""What is loaded on first use, so that a program that never touches it does not pay for
it at ``import rejoinder``: names a package loads through a module ``__getattr__`` (PEP
562: numpy's audio frames, the realtime engine), and regular expressions compiled when
first matched (``LazyPattern``)."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
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


class LazyPattern:
    """``re.compile(pattern, flags)``, done on first use: the text filters (markdown for
    speech, sentence ends, backchannels, turn ends) hold about thirty patterns, some 3 ms
    of ``import rejoinder`` if compiled there, which a session without speech never uses.
    Offers the ``re.Pattern`` methods the package calls."""

    __slots__ = ("_compiled", "_flags", "_pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._pattern, self._flags)
        return compiled

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.match(string, pos, endpos)

    def finditer(
        self, string: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, pos, endpos)

    def findall(self, string: str) -> list[Any]:
        return self.compiled.findall(string)

    def split(self, string: str, maxsplit: int = 0) -> list[str | Any]:
        return self.compiled.split(string, maxsplit)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)
