"""``@function_tool``: a JSON schema from type hints and docstring, validated arguments.

The schema is built once, at decoration time, with pydantic (``create_model``) and
docstring-parser (Google, reST and numpy styles), so the per-call cost is one
``model_validate``. A bad argument never reaches the tool: it becomes a ``ToolError``
whose message the model sees. Both libraries are imported on the first decoration, not
with ``rejoinder``: they are most of its import time, and text-only tests need neither.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ...models import ToolDefinition, ToolError
from .run_context import RunContext
from .tool import Tool

if TYPE_CHECKING:
    import pydantic

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class FunctionTool(Tool):
    """A callable tool. As a class attribute it binds to the instance like a method."""

    def __init__(
        self,
        fn: Callable[..., Awaitable[Any]],
        *,
        definition: ToolDefinition,
        args_model: type[pydantic.BaseModel],
        context_param: str | None,
        bound_to: object | None = None,
    ) -> None:
        self.fn = fn
        self.definition = definition
        self.args_model = args_model
        self.context_param = context_param
        self._bound_to = bound_to
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name}>"

    def __get__(self, instance: object | None, owner: type | None = None) -> FunctionTool:
        if instance is None:
            return self
        return FunctionTool(
            self.fn,
            definition=self.definition,
            args_model=self.args_model,
            context_param=self.context_param,
            bound_to=instance,
        )

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._bound_to is not None:
            return await self.fn(self._bound_to, *args, **kwargs)
        return await self.fn(*args, **kwargs)

    def parse_arguments(self, raw: str) -> dict[str, Any]:
        """Model-written JSON text → validated keyword arguments, or ``ToolError``."""
        import pydantic

        data = arguments_object(self.name, raw)
        try:
            parsed = self.args_model.model_validate(data)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        return {field: getattr(parsed, field) for field in type(parsed).model_fields}

    async def invoke(self, context: RunContext[Any], raw_arguments: str) -> Any:
        kwargs = self.parse_arguments(raw_arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = context
        return await self(**kwargs)


@overload
def function_tool(fn: F, /) -> FunctionTool: ...


@overload
def function_tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[F], FunctionTool]: ...


def function_tool(
    fn: F | None = None, /, *, name: str | None = None, description: str | None = None
) -> FunctionTool | Callable[[F], FunctionTool]:
    """Turn an async function or method into a tool the model can call."""

    def decorate(f: F) -> FunctionTool:
        return _build_tool(f, name=name, description=description)

    return decorate(fn) if fn is not None else decorate


def _build_tool(
    fn: Callable[..., Awaitable[Any]], *, name: str | None, description: str | None
) -> FunctionTool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@function_tool needs an async function, got {fn!r}")
    import docstring_parser
    import pydantic

    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args/**kwargs cannot be described to a model")
        hint = hints.get(param.name, Any)
        if _is_run_context(hint):
            context_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            hint,
            pydantic.Field(default, description=param_docs.get(param.name) or None),
        )
    tool_name = name or fn.__name__
    args_model = pydantic.create_model(f"{tool_name}_args", **fields)
    schema = _strip_titles(args_model.model_json_schema())
    summary = description or "\n\n".join(
        part for part in (doc.short_description, doc.long_description) if part
    )
    definition = ToolDefinition(name=tool_name, description=summary, parameters=schema)
    return FunctionTool(
        fn, definition=definition, args_model=args_model, context_param=context_param
    )


def _is_run_context(hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    return isinstance(origin, type) and issubclass(origin, RunContext)


def _strip_titles(schema: Any) -> Any:
    """pydantic adds "title" everywhere; models don't need it and it costs tokens."""
    if isinstance(schema, dict):
        return {
            key: _strip_titles(value)
            for key, value in schema.items()
            if not (key == "title" and isinstance(value, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


def find_tools(obj: object) -> list[FunctionTool]:
    """The ``@function_tool`` methods defined on ``obj``'s class, bound to ``obj``."""
    tools: list[FunctionTool] = []
    seen: set[str] = set()
    for klass in type(obj).__mro__:
        for attr, value in vars(klass).items():
            if isinstance(value, FunctionTool) and attr not in seen:
                seen.add(attr)
                tools.append(value.__get__(obj, type(obj)))
    return tools


def arguments_object(tool: str, raw: str) -> dict[str, Any]:
    """A tool call's model-written arguments as a JSON object, or ``ToolError``."""
    import json  # here, not at import: a session without tool calls never parses JSON

    try:
        data = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments for {tool} are not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ToolError(f"arguments for {tool} must be a JSON object")
    return data
