"""rejoinder._dataclass behaves as dataclasses.dataclass for the options the package uses.

Each class is made twice, once by each decorator, and every observation of one must be
the same for the other: construction (and its errors), repr, ==, hash, frozen
assignment, the dataclasses functions, pickling, copying, signatures, docstrings.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import sys
import types
from collections.abc import Callable
from dataclasses import KW_ONLY, field
from typing import Any, ClassVar, Literal

import pytest

from rejoinder._dataclass import dataclass as ours


def _classes(dataclass: Any, module: str) -> types.SimpleNamespace:
    @dataclass(frozen=True, slots=True)
    class Event:
        old: str
        new: str
        at: float
        type: Literal["changed"] = "changed"

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Metric:
        """A metric."""

        type: Literal["llm"] = "llm"
        timestamp: float
        model: str | None = None
        ttft: float | None
        kind: ClassVar[str] = "timing"

        @property
        def later(self) -> float:
            return self.timestamp + 1

    @dataclass(slots=True)
    class Message:
        role: str
        content: str
        id: str = field(default_factory=lambda: "msg_1")
        items: list[int] = field(default_factory=list)

    @dataclass(frozen=True)
    class Transcript:
        text: str
        _: KW_ONLY
        confidence: float | None = None

    @dataclass(eq=False, slots=True)
    class Ledger:
        id: int
        label: str = ""
        watchdog: float = field(default=0.0, repr=False)

        def __repr__(self) -> str:
            return f"<ledger {self.id}>"

    @dataclass
    class Result:
        user_input: str
        items: list[Any] = field(default_factory=list)
        expect: Any = field(default=None, repr=False, compare=False)

    @dataclass(frozen=True, slots=True)
    class Empty:
        pass

    @dataclass
    class Derived:
        a: int
        b: int = 0

        def __post_init__(self) -> None:
            self.b = self.a * 2

    made = types.SimpleNamespace(**{k: v for k, v in locals().items() if isinstance(v, type)})
    # Importable by name, for pickle.
    sys.modules[module] = types.ModuleType(module)
    for name, cls in vars(made).items():
        cls.__module__, cls.__qualname__ = module, name
        setattr(sys.modules[module], name, cls)
    return made


STD = _classes(dataclasses.dataclass, "_dataclass_std")
OURS = _classes(ours, "_dataclass_ours")


def _observe(check: Callable[[Any], object], ns: types.SimpleNamespace) -> tuple[str, object]:
    try:
        return "value", check(ns)
    except Exception as exc:
        return "raised", type(exc)


def _set(obj: object, name: str, value: object) -> object:
    setattr(obj, name, value)
    return getattr(obj, name)


CHECKS: dict[str, Callable[[Any], object]] = {
    "repr": lambda c: repr(c.Event("a", "b", 1.0)),
    "by keyword": lambda c: repr(c.Event(old="a", new="b", at=1.0, type="changed")),
    "equal": lambda c: c.Event("a", "b", 1.0) == c.Event("a", "b", 1.0),
    "unequal": lambda c: c.Event("a", "b", 1.0) == c.Event("a", "c", 1.0),
    "not a tuple": lambda c: c.Event("a", "b", 1.0) == ("a", "b", 1.0, "changed"),
    "hash": lambda c: hash(c.Event("a", "b", 1.0)) == hash(("a", "b", 1.0, "changed")),
    "frozen": lambda c: _set(c.Event("a", "b", 1.0), "old", "x"),
    "frozen delete": lambda c: delattr(c.Event("a", "b", 1.0), "old"),
    "missing": lambda c: c.Event("a"),
    "too many": lambda c: c.Event("a", "b", 1.0, "changed", 5),
    "unexpected": lambda c: c.Event("a", "b", 1.0, extra=1),
    "twice": lambda c: c.Event("a", "b", 1.0, old="x"),
    "replace": lambda c: repr(dataclasses.replace(c.Event("a", "b", 1.0), new="z")),
    "asdict": lambda c: dataclasses.asdict(c.Event("a", "b", 1.0)),
    "fields": lambda c: [f.name for f in dataclasses.fields(c.Metric)],
    "match args": lambda c: (c.Event.__match_args__, c.Metric.__match_args__),
    "signature": lambda c: [str(inspect.signature(k)) for k in vars(c).values()],
    "doc": lambda c: [k.__doc__ for k in vars(c).values()],
    "slots": lambda c: (c.Event.__slots__, hasattr(c.Event("a", "b", 1.0), "__dict__")),
    "params": lambda c: repr(c.Event.__dataclass_params__).partition("(")[2],
    "keyword only": lambda c: c.Metric(1.0, None),
    "keyword only missing": lambda c: c.Metric(timestamp=1.0),
    "property, class var": lambda c: (c.Metric(timestamp=1.0, ttft=None).later, c.Metric.kind),
    "mutable": lambda c: repr(_set(c.Message("user", "hi"), "content", "yo")),
    "unhashable": lambda c: hash(c.Message("user", "hi")),
    "factories": lambda c: c.Message("u", "h").items is not c.Message("u", "h").items,
    "kw_only marker": lambda c: c.Transcript("hi", 0.5),
    "kw_only repr": lambda c: repr(c.Transcript("hi", confidence=0.5)),
    "own repr, identity": lambda c: (repr(c.Ledger(1)), c.Ledger(1) == c.Ledger(1)),
    "compare=False": lambda c: c.Result("x", [1], "e") == c.Result("x", [1], "f"),
    "repr=False": lambda c: repr(c.Result("x", [1], "e")),
    "no fields": lambda c: (repr(c.Empty()), c.Empty() == c.Empty(), hash(c.Empty())),
    "post init": lambda c: repr(c.Derived(3)),
    "recursive repr": lambda c: (lambda m: (m.items.append(m), repr(m))[1])(c.Message("u", "h")),
    "subclass": lambda c: repr(type("Sub", (c.Event,), {"__slots__": ()})("a", "b", 1.0)),
    "stdlib subclass": lambda c: repr(
        dataclasses.dataclass(frozen=True)(
            type("Sub", (c.Event,), {"__annotations__": {"extra": "int"}, "extra": 0})
        )("a", "b", 1.0)
    ),
}


@pytest.mark.parametrize("name", CHECKS)
def test_same_as_the_standard_decorator(name: str) -> None:
    assert _observe(CHECKS[name], OURS) == _observe(CHECKS[name], STD)


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_pickle_and_copy_as_the_standard_decorator(protocol: int) -> None:
    def made(c: Any) -> list[Any]:
        return [
            c.Event("a", "b", 1.0),
            c.Metric(timestamp=1.0, ttft=None),
            c.Message("u", "h"),
            c.Transcript("hi", confidence=0.5),
            c.Ledger(3, "x"),
            c.Empty(),
        ]

    def copied(how: Callable[[Any], Any], obj: object) -> tuple[str, object]:
        try:
            return "value", repr(how(obj))
        except Exception as exc:
            return "raised", type(exc)

    for theirs, mine in zip(made(STD), made(OURS), strict=True):
        for how in (
            lambda o: pickle.loads(pickle.dumps(o, protocol)),
            copy.copy,
            copy.deepcopy,
        ):
            assert copied(how, mine) == copied(how, theirs)


def test_init_is_compiled_on_first_use_only() -> None:
    @ours(frozen=True, slots=True)
    class Late:
        a: int
        b: str = "x"

    first = Late.__init__
    assert Late(1) == Late(a=1, b="x")
    assert Late.__init__ is not first  # the compiled one took its place
    assert str(inspect.signature(Late.__init__)) == "(self, a: 'int', b: 'str' = 'x') -> None"
    assert repr(Late(2, "y")) == "test_init_is_compiled_on_first_use_only.<locals>.Late(a=2, b='y')"


def test_refuses_what_it_does_not_offer() -> None:
    with pytest.raises(TypeError):

        @ours
        class NotInInit:
            a: int = field(default=0, init=False)

    with pytest.raises(TypeError):

        @ours(frozen=True)
        class OwnSetattr:
            a: int

            def __setattr__(self, name: str, value: object) -> None:
                pass
