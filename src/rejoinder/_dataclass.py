"""``dataclass``: the standard decorator, without compiling methods at import.

``dataclasses.dataclass`` writes the source of ``__init__``, ``__repr__`` and ``__eq__``
(frozen: also ``__setattr__``, ``__delattr__`` and ``__hash__``) for each class and
compiles it when the module is imported: about a millisecond a class, and ``import
rejoinder`` defines some fifty (events, metrics, chat items, floor effects): a quarter of
its 110 ms. This decorator has the standard one do everything else (fields, defaults,
``field()``, ``KW_ONLY``, slots, ``__match_args__``), so the class *is* a dataclass
(``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work on it), and
gives it its methods itself:

- ``__init__`` is compiled when the class is first instantiated, from the same source the
  standard decorator writes (as fast: a text turn creates a dozen of these objects, and a
  generic ``__init__`` binding its arguments at every call made a turn 20% slower). A class
  never instantiated never pays for it.
- ``__repr__``, ``__eq__``, ``__hash__`` and a frozen class's ``__setattr__`` and
  ``__delattr__`` are written once, here, closed over a table of the class's fields; they
  behave as the generated ones (the same fields compared and shown, ``FrozenInstanceError``
  on assignment), and so do pickling and copying.

``inspect.signature`` gives the generated signature; type checkers see the standard
decorator (``dataclass_transform``). Only the options the package uses are offered:
``frozen``, ``slots``, ``kw_only``, ``eq``; fields are ``__init__`` parameters
(``field(init=False)`` and ``InitVar`` are refused).
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["dataclass"]

_T = TypeVar("_T", bound=type)


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (its repr is the
    standard decorator's, in signatures)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


class _Fields:
    """One class's fields, as its methods need them."""

    __slots__ = ("compare", "fields", "frozen", "init", "names", "owner", "post_init", "shown")

    def __init__(self, cls: type[Any], frozen: bool) -> None:
        fields = dataclasses.fields(cls)
        self.owner = cls
        self.frozen = frozen
        self.fields = fields
        self.names = tuple(f.name for f in fields)
        self.shown = tuple(f.name for f in fields if f.repr)
        self.compare = tuple(f.name for f in fields if f.compare)
        self.post_init = hasattr(cls, "__post_init__")
        self.init: Callable[..., None] | None = None
        """The compiled ``__init__``, once the class was first instantiated."""

    def in_init_order(self) -> list[dataclasses.Field[Any]]:
        """The fields as ``__init__`` takes them: positional ones first."""
        return [f for f in self.fields if not f.kw_only] + [f for f in self.fields if f.kw_only]


def _compile_init(table: _Fields) -> Callable[..., None]:
    """The ``__init__`` the standard decorator would have written for the class."""
    self_name = "__dataclass_self__" if "self" in table.names else "self"
    env: dict[str, Any] = {"__dataclass_set__": object.__setattr__, "__factory__": _FACTORY}
    params = [self_name]
    values = {}
    for f in table.in_init_order():
        if f.kw_only and "*" not in params:
            params.append("*")
        if f.default_factory is not MISSING:
            env[f"__factory_{f.name}__"] = f.default_factory
            params.append(f"{f.name}=__factory__")
            values[f.name] = f"__factory_{f.name}__() if {f.name} is __factory__ else {f.name}"
        elif f.default is not MISSING:
            env[f"__default_{f.name}__"] = f.default
            params.append(f"{f.name}=__default_{f.name}__")
            values[f.name] = f.name
        else:
            params.append(f.name)
            values[f.name] = f.name
    if table.frozen:
        body = [f"__dataclass_set__({self_name}, {n!r}, {values[n]})" for n in table.names]
    else:
        body = [f"{self_name}.{n} = {values[n]}" for n in table.names]
    if table.post_init:
        body.append(f"{self_name}.__post_init__()")
    lines = "\n".join(f"    {line}" for line in body or ["pass"])
    namespace: dict[str, Any] = {}
    exec(f"def __init__({', '.join(params)}):\n{lines}\n", env, namespace)
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{table.owner.__qualname__}.__init__"
    init.__annotations__ = {f.name: f.type for f in table.fields} | {"return": None}
    return init


def _methods(table: _Fields) -> dict[str, Any]:
    """The methods of one class, closed over its table (as the generated ones are over
    their class: a subclass that is not itself a dataclass keeps them)."""
    names, compare, owner = table.names, table.compare, table.owner

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # First instantiation: compile the real __init__ and put it in this one's place.
        init = table.init
        if init is None:
            init = table.init = _compile_init(table)
            type.__setattr__(owner, "__init__", init)
        init(self, *args, **kwargs)

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in table.shown)
        return f"{self.__class__.__qualname__}({shown})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            mine = tuple(getattr(self, name) for name in compare)
            return mine == tuple(getattr(other, name) for name in compare)
        return NotImplemented

    methods: dict[str, Any] = {"__init__": __init__, "__repr__": __repr__, "__eq__": __eq__}
    if not table.frozen:
        methods["__hash__"] = None  # mutable and compared by value: unhashable
        return methods

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, name) for name in compare))

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is owner or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is owner or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    # Slots and frozen: pickle and copy would restore the slots through __setattr__.
    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=False):
            object.__setattr__(self, name, value)

    methods.update(__hash__=__hash__, __setattr__=__setattr__, __delattr__=__delattr__)
    if "__slots__" in owner.__dict__:
        methods.update(__getstate__=__getstate__, __setstate__=__setstate__)
    return methods


class _Signature:
    """``inspect.signature(cls)``, made when asked for: until the class is first
    instantiated its ``__init__`` takes ``*args, **kwargs``."""

    def __get__(self, instance: object, owner: type) -> inspect.Signature:
        parameters = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY
                if f.kw_only
                else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=_FACTORY
                if f.default_factory is not MISSING
                else (inspect.Parameter.empty if f.default is MISSING else f.default),
                annotation=f.type,
            )
            for f in _Fields(owner, False).in_init_order()
        ]
        return inspect.Signature(parameters, return_annotation=None)


_SIGNATURE = _Signature()


def _process(cls: _T, frozen: bool, slots: bool, kw_only: bool, eq: bool) -> _T:
    if frozen and ("__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__):
        raise TypeError(f"{cls.__qualname__}: a frozen dataclass writes __setattr__")
    documented = bool(cls.__doc__)
    if not documented:
        # The standard decorator would compute the signature now for the docstring.
        cls.__doc__ = cls.__name__
    cls = dataclasses.dataclass(  # type: ignore[assignment]
        cls, init=False, repr=False, eq=False, slots=slots, kw_only=kw_only
    )
    table = _Fields(cls, frozen)
    pseudo = set(cls.__dataclass_fields__) - set(table.names)  # type: ignore[attr-defined]
    if any(not f.init for f in table.fields) or any(
        "InitVar" in str(cls.__dataclass_fields__[name].type)  # type: ignore[attr-defined]
        for name in pseudo
    ):
        raise TypeError(f"{cls.__qualname__}: init=False fields and InitVar are not offered")
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init, params.repr, params.eq, params.frozen = True, True, eq, frozen
    methods = _methods(table)
    if not eq:
        del methods["__eq__"], methods["__hash__"]
    for name, method in methods.items():
        if name in cls.__dict__:  # the class's own (a __repr__ of its own, say) stays
            continue
        if method is not None:
            method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    cls.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
    if not documented:
        cls.__doc__ = _doc(table)
    return cls


def _doc(table: _Fields) -> str:
    """The docstring the standard decorator gives a class without one (its name and
    signature), written out directly: building the signature costs twice as much."""
    parts = []
    for f in table.in_init_order():
        if f.kw_only and "*" not in parts:
            parts.append("*")
        text = f"{f.name}: {inspect.formatannotation(f.type)}"
        if f.default_factory is not MISSING:
            text += " = <factory>"
        elif f.default is not MISSING:
            text += f" = {f.default!r}"
        parts.append(text)
    return f"{table.owner.__name__}({', '.join(parts)})"


@overload
def dataclass(cls: _T, /) -> _T: ...


@overload
def dataclass(
    *, frozen: bool = False, slots: bool = False, kw_only: bool = False, eq: bool = True
) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(
    cls: _T | None = None,
    /,
    *,
    frozen: bool = False,
    slots: bool = False,
    kw_only: bool = False,
    eq: bool = True,
) -> _T | Callable[[_T], _T]:
    """``@dataclass`` or ``@dataclass(frozen=..., slots=..., kw_only=..., eq=...)``, as
    ``dataclasses.dataclass`` (see the module docstring)."""

    def wrap(cls: _T) -> _T:
        return _process(cls, frozen, slots, kw_only, eq)

    return wrap if cls is None else wrap(cls)
