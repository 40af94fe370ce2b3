"""The client protocol as a JSON Schema, generated from ``rejoinder.io.protocol``.

The messages are defined once, as the pydantic models of ``rejoinder.io.protocol``; this
module turns them into one JSON Schema (draft 2020-12) that clients in other languages
generate their types from (``clients/js/scripts/gen-types.mjs`` makes TypeScript of it).
The schema and the types made from it are committed, and a test fails when either
differs from a fresh generation, so they cannot drift from the server.

What the schema holds, under ``$defs``:

- every message, by its class name (``Start``, ``Ready``, ``TranscriptMessage``...), with
  its docstring as ``description`` and its fields' docstrings as theirs;
- ``ClientMessage`` and ``ServerMessage``: the messages each side sends, told apart by
  ``type`` (a ``oneOf`` with an OpenAPI-style ``discriminator``);
- ``CloseCode`` and ``ErrorCode``: enums, their members' names in ``x-enum-varnames``
  and their docstrings in ``x-enum-descriptions`` (the names openapi-generator reads);
- ``PROTOCOL_VERSION``: a ``const``.

The root is ``ProtocolMessage``: any text message, either way.

Where the schema says more than pydantic would (each a protocol fact the models cannot
spell): ``type`` is required (every message carries it: the parser rejects one without;
the models only default it for Python callers), and a timeline ``entry`` has a numeric
``t`` and a string ``kind`` (``TimelineMessage``'s validator checks them). Fields keep no
per-field ``title`` ("Sample Rate"), which type generators would turn into spurious
named types.

    python -m rejoinder.io.protocol_schema           # writes clients/protocol.schema.json
    python -m rejoinder.io.protocol_schema --check   # exit 1 when that file is not current
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import json
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import BaseModel, Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode

from . import protocol

__all__ = [
    "DEFAULT_PATH",
    "SCHEMA_DIALECT",
    "client_message_types",
    "main",
    "protocol_schema",
    "render",
    "server_message_types",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_PATH = Path("clients") / "protocol.schema.json"
"""Where the committed schema lives, from the repository's root."""

_ClientUnion = Annotated[protocol.ClientMessage, Field(discriminator="type")]
_ServerUnion = Annotated[protocol.ServerMessage, Field(discriminator="type")]

# What a validator in protocol.py checks that a pydantic type cannot say in JSON Schema:
# (model, field) -> the field's schema. tests/io/test_protocol_schema.py feeds the parser
# and the schema the same bad messages, so this cannot silently disagree with the model.
_REFINED_FIELDS: dict[tuple[str, str], dict[str, Any]] = {
    ("TimelineMessage", "entry"): {
        "type": "object",
        "properties": {
            "t": {"type": "number", "description": "Seconds since the session started."},
            "kind": {"type": "string", "description": "One of `TIMELINE_KINDS` (or newer)."},
        },
        "required": ["t", "kind"],
        "additionalProperties": True,
    },
}


class _NoFieldTitles(GenerateJsonSchema):
    """Pydantic's generator without the per-field titles ("Sample Rate")."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def client_message_types() -> dict[str, type[BaseModel]]:
    """``type`` value → model, for every message a client sends (``ClientMessage``)."""
    return _members(protocol.ClientMessage)


def server_message_types() -> dict[str, type[BaseModel]]:
    """``type`` value → model, for every message the server sends (``ServerMessage``)."""
    return _members(protocol.ServerMessage)


def _members(union: Any) -> dict[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for model in get_args(union):
        models[model.model_fields["type"].default] = model
    return models


def protocol_schema() -> dict[str, Any]:
    """The JSON Schema of every message of the client protocol (see the module's doc)."""
    mode: JsonSchemaMode = "validation"
    inputs: list[tuple[str, JsonSchemaMode, TypeAdapter[Any]]] = [
        ("ClientMessage", mode, TypeAdapter(_ClientUnion)),
        ("ServerMessage", mode, TypeAdapter(_ServerUnion)),
        ("CloseCode", mode, TypeAdapter(protocol.CloseCode)),
    ]
    tops, generated = TypeAdapter.json_schemas(inputs, schema_generator=_NoFieldTitles)
    defs: dict[str, Any] = dict(generated.get("$defs", {}))

    models = {**client_message_types(), **server_message_types()}
    for model in models.values():
        _describe_model(defs[model.__name__], model)

    defs["ClientMessage"] = {
        "title": "ClientMessage",
        "description": "A JSON text message the client sends; `type` says which.",
        **tops[("ClientMessage", mode)],
    }
    defs["ServerMessage"] = {
        "title": "ServerMessage",
        "description": (
            "A JSON text message the server sends; `type` says which. A client ignores "
            "types and fields it does not know: new ones may come within a version."
        ),
        **tops[("ServerMessage", mode)],
    }
    _describe_members(defs["CloseCode"], protocol.CloseCode)
    defs["ErrorCode"] = _error_code_schema()
    defs["PROTOCOL_VERSION"] = {
        "title": "PROTOCOL_VERSION",
        "description": (
            "The protocol version this schema describes: `ready.protocol`, and what "
            "`start.protocol` may name (another version is refused with close 4003)."
        ),
        "type": "integer",
        "const": protocol.PROTOCOL_VERSION,
    }

    schema: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "title": "ProtocolMessage",
        "description": _markdown(
            f"Any JSON text message of the rejoinder client protocol, version "
            f"{protocol.PROTOCOL_VERSION} (docs/protocol.md), either way. Generated from "
            f"``rejoinder.io.protocol`` by ``python -m rejoinder.io.protocol_schema``: "
            f"do not edit."
        ),
        "oneOf": [{"$ref": "#/$defs/ClientMessage"}, {"$ref": "#/$defs/ServerMessage"}],
        "$defs": dict(sorted(defs.items())),
    }
    return schema


def render(schema: dict[str, Any]) -> str:
    """The schema as the committed file's text (stable: same models, same bytes)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------ details


def _describe_model(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Docstrings in, pydantic's defaults for ``type`` out, refinements applied."""
    if "description" in schema:
        schema["description"] = _markdown(schema["description"])
    properties: dict[str, Any] = schema.get("properties", {})
    docs = _attribute_docs(model)
    for name, field_schema in properties.items():
        refined = _REFINED_FIELDS.get((model.__name__, name))
        if refined is not None:
            field_schema.clear()
            field_schema.update(refined)
        if name in docs:
            field_schema["description"] = _markdown(docs[name])
    tag = properties.get("type")
    if tag is not None:
        tag.pop("default", None)  # on the wire ``type`` is required, never defaulted
        schema["required"] = ["type", *[r for r in schema.get("required", []) if r != "type"]]


def _describe_members(schema: dict[str, Any], holder: type) -> None:
    names = _member_names(holder)
    docs = _attribute_docs(holder)
    values = [getattr(holder, name) for name in names]
    schema["enum"] = [v.value if hasattr(v, "value") else v for v in values]
    schema["x-enum-varnames"] = names
    schema["x-enum-descriptions"] = [_markdown(docs.get(name, "")) for name in names]
    if "description" in schema:
        schema["description"] = _markdown(schema["description"])


def _error_code_schema() -> dict[str, Any]:
    schema: dict[str, Any] = {
        "title": "ErrorCode",
        "description": _markdown(
            (protocol.ErrorCode.__doc__ or "")
            + " The server may add codes within a version: a client treats one it does "
            "not know as an error."
        ),
        "type": "string",
    }
    _describe_members(schema, protocol.ErrorCode)
    return schema


def _member_names(holder: type) -> list[str]:
    """Public constants of an enum or a plain class of constants, in definition order."""
    members = getattr(holder, "__members__", None)
    if members is not None:
        return list(members)
    return [
        name
        for name, value in vars(holder).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str | int)
    ]


def _attribute_docs(cls: type) -> dict[str, str]:
    """The string literal right after each ``name: T = ...`` / ``NAME = ...`` in the class
    body: the attribute docstrings protocol.py writes (pydantic keeps them only when a
    model sets ``use_attribute_docstrings``, which changes nothing else; read here so the
    schema does not depend on that switch)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a frozen build): the schema just says less
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        name = _assigned_name(node)
        if name is None or not isinstance(following, ast.Expr):
            continue
        value = following.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            docs[name] = inspect.cleandoc(value.value)
    return docs


def _assigned_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Name):
            return target.id
    return None


_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_LINE_BREAK = re.compile(r"(?<!\n)\n(?!\n)")


def _markdown(text: str) -> str:
    """A docstring as a description: reST literals (````x````) in Markdown (`x`), which
    schema readers and JSDoc read, and its hard-wrapped lines joined (paragraphs kept)."""
    text = _RST_LITERAL.sub(r"`\1`", inspect.cleandoc(text))
    return _LINE_BREAK.sub(" ", text)


# ---------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Write the schema file, or with ``--check`` report whether it is current (exit 1
    when it is missing or differs)."""
    parser = argparse.ArgumentParser(
        prog="python -m rejoinder.io.protocol_schema",
        description="Write (or check) the JSON Schema of the client protocol.",
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if the file is stale"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_PATH,
        help=f"the schema file (default: {DEFAULT_PATH}, from the repository's root)",
    )
    args = parser.parse_args(argv)
    path: Path = args.output
    text = render(protocol_schema())
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            print(f"{path} is current")
            return 0
        why = "is missing" if current is None else "differs from the models"
        print(
            f"{path} {why}: run python -m rejoinder.io.protocol_schema, then regenerate "
            f"the TypeScript types (npm run gen:types in clients/js)",
            file=sys.stderr,
        )
        return 1
    if not path.parent.is_dir():
        print(
            f"{path.parent} is not a directory: run from the repository's root or give --output",
            file=sys.stderr,
        )
        return 2
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
