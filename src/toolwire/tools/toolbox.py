"""Toolbox: the allowlist of tools a model may call, and their lists per wire format."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from toolwire.exceptions import ToolDefinitionError, UserError
from toolwire.messages import ToolSpec
from toolwire.tools.base import Tool

__all__ = ["Toolbox"]

# Schema keywords whose value maps names to subschemas, and keywords whose value is data: a walk
# for `$ref` must not mistake a property called "$ref", or a default value, for a reference.
_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_DATA_KEYWORDS = frozenset({"default", "enum", "const", "examples"})
_BASE_URI = "urn:toolwire:arguments"


class Toolbox:
    """The allowlist: a model can call a tool only if it is in the toolbox, by exact name.

    Tools are kept in the order they were added; that is the order models see them in.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, tool: Tool) -> None:
        """Allow `tool`, after checking that its argument schema is a valid JSON Schema.

        Raises:
            ToolDefinitionError: a tool of that name is already allowed, or the schema is invalid.
        """
        if tool.name in self._tools:
            raise ToolDefinitionError(
                f"A tool named {tool.name!r} is already in the toolbox: give one of them another name."
            )
        _check_schema(tool)
        self._tools[tool.name] = tool

    def remove(self, name: str) -> Tool:
        """Withdraw the tool called `name` and return it.

        Raises:
            UserError: no tool of that name is in the toolbox.
        """
        try:
            return self._tools.pop(name)
        except KeyError:
            raise UserError(
                f"No tool named {name!r} is in the toolbox: check the name against `names`."
            ) from None

    def get(self, name: str) -> Tool | None:
        """The tool called exactly `name`, or `None`."""
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The allowed names, in the order the tools were added."""
        return tuple(self._tools)

    def merged(self, other: Toolbox) -> Toolbox:
        """A new toolbox with the tools of both; a tool present in both (the same object) is kept once.

        Raises:
            ToolDefinitionError: two different tools share a name.
        """
        result = Toolbox(self)
        for item in other:
            if result.get(item.name) is not item:
                result.add(item)
        return result

    def specs(self) -> list[ToolSpec]:
        """What models are told about each tool, in canonical form."""
        return [item.spec for item in self._tools.values()]

    def chat_tools(self) -> list[dict[str, Any]]:
        """The `tools` list of a Chat Completions request; `strict` appears only when set."""
        tools: list[dict[str, Any]] = []
        for item in self._tools.values():
            function: dict[str, Any] = {
                "name": item.name,
                "description": item.description,
                "parameters": item.parameters,
            }
            if item.strict is not None:
                function["strict"] = item.strict
            tools.append({"type": "function", "function": function})
        return tools

    def responses_tools(self) -> list[dict[str, Any]]:
        """The `tools` list of a Responses request, flat, with `strict` always explicit.

        Responses treats an omitted `strict` as "make it strict when possible", which fills optional
        arguments with empty values; `false` is sent unless the tool asks for strict mode.
        """
        return [
            {
                "type": "function",
                "name": item.name,
                "description": item.description,
                "parameters": item.parameters,
                "strict": bool(item.strict),
            }
            for item in self._tools.values()
        ]

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Tool):
            return self._tools.get(item.name) is item
        return isinstance(item, str) and item in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"Toolbox({list(self._tools)!r})"


def _check_schema(tool: Tool) -> None:
    """Refuse a schema that is not valid draft 2020-12, or whose `$ref`s lead nowhere."""
    try:
        Draft202012Validator.check_schema(tool.parameters)
    except SchemaError as exc:
        raise ToolDefinitionError(
            f"Tool {tool.name!r} has an invalid argument schema ({exc.message}); fix the schema."
        ) from None
    refs = list(_refs(tool.parameters))
    if not refs or _has_id(tool.parameters):
        # Nested `$id`s move the base of references; leave those schemas to the validator.
        return
    resolver = Registry().with_resource(_BASE_URI, DRAFT202012.create_resource(tool.parameters)).resolver()
    for ref in refs:
        if not ref.startswith("#"):
            raise ToolDefinitionError(
                f"Tool {tool.name!r} refers to {ref!r} outside its schema; put the definition under '$defs'."
            )
        try:
            resolver.lookup(_BASE_URI + ref)
        except Unresolvable:
            raise ToolDefinitionError(
                f"Tool {tool.name!r} refers to {ref!r}, which its schema lacks; define it under '$defs'."
            ) from None


def _refs(schema: Any) -> Iterator[str]:
    if not isinstance(schema, dict):
        if isinstance(schema, list):
            for item in schema:
                yield from _refs(item)
        return
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            yield value
        elif key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
            for sub in value.values():
                yield from _refs(sub)
        elif key not in _DATA_KEYWORDS:
            yield from _refs(value)


def _has_id(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "$id" in schema or any(_has_id(v) for k, v in schema.items() if k not in _DATA_KEYWORDS)
    if isinstance(schema, list):
        return any(_has_id(item) for item in schema)
    return False
