"""Toolbox: the allowlist, its schema checks, and the tool lists per wire format."""

from __future__ import annotations

from typing import Any

import pytest

from toolwire.context import Context
from toolwire.exceptions import ToolDefinitionError, UserError
from toolwire.messages import ToolSpec
from toolwire.tools import Tool, Toolbox, tool

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


async def _nothing(arguments: dict[str, Any], context: Context) -> Any:
    return None


def make_tool(name: str, parameters: dict[str, Any] | None = None, strict: bool | None = None) -> Tool:
    return Tool(
        name=name,
        description=f"The {name} tool.",
        parameters=SCHEMA if parameters is None else parameters,
        handler=_nothing,
        strict=strict,
    )


def test_membership_lookup_order_and_length() -> None:
    first, second = make_tool("first"), make_tool("second")
    box = Toolbox([first, second])

    assert len(box) == 2
    assert box.names == ("first", "second")
    assert list(box) == [first, second]
    assert box.get("second") is second
    assert box.get("Second") is None
    assert "first" in box and first in box
    assert "third" not in box
    assert make_tool("first") not in box  # same name, different tool
    assert box.specs() == [
        ToolSpec(name="first", description="The first tool.", parameters=SCHEMA, effect="read"),
        ToolSpec(name="second", description="The second tool.", parameters=SCHEMA, effect="read"),
    ]


def test_a_duplicate_name_is_refused() -> None:
    box = Toolbox([make_tool("lookup")])
    with pytest.raises(ToolDefinitionError, match="'lookup' is already"):
        box.add(make_tool("lookup"))
    with pytest.raises(ToolDefinitionError):
        Toolbox([make_tool("a"), make_tool("a")])
    assert len(box) == 1


def test_remove_withdraws_a_tool() -> None:
    lookup = make_tool("lookup")
    box = Toolbox([lookup, make_tool("other")])

    assert box.remove("lookup") is lookup
    assert box.names == ("other",)
    with pytest.raises(UserError, match="'lookup'"):
        box.remove("lookup")


def test_merged_combines_without_touching_either_side() -> None:
    shared, left, right = make_tool("shared"), make_tool("left"), make_tool("right")
    one, two = Toolbox([shared, left]), Toolbox([shared, right])

    both = one.merged(two)

    assert both.names == ("shared", "left", "right")
    assert one.names == ("shared", "left") and two.names == ("shared", "right")
    with pytest.raises(ToolDefinitionError, match="'left'"):
        one.merged(Toolbox([make_tool("left")]))


def test_chat_tools_shape_carries_strict_only_when_set() -> None:
    box = Toolbox([make_tool("loose"), make_tool("tight", strict=True), make_tool("off", strict=False)])

    assert box.chat_tools() == [
        {
            "type": "function",
            "function": {"name": "loose", "description": "The loose tool.", "parameters": SCHEMA},
        },
        {
            "type": "function",
            "function": {
                "name": "tight",
                "description": "The tight tool.",
                "parameters": SCHEMA,
                "strict": True,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "off",
                "description": "The off tool.",
                "parameters": SCHEMA,
                "strict": False,
            },
        },
    ]


def test_responses_tools_are_flat_and_always_say_strict() -> None:
    box = Toolbox([make_tool("loose"), make_tool("tight", strict=True)])

    assert box.responses_tools() == [
        {
            "type": "function",
            "name": "loose",
            "description": "The loose tool.",
            "parameters": SCHEMA,
            "strict": False,
        },
        {
            "type": "function",
            "name": "tight",
            "description": "The tight tool.",
            "parameters": SCHEMA,
            "strict": True,
        },
    ]


def test_tools_from_the_decorator_register() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return city

    [entry] = Toolbox([get_weather]).chat_tools()
    assert entry["function"]["name"] == "get_weather"
    assert entry["function"]["description"] == "Current weather for a city."
    assert entry["function"]["parameters"]["required"] == ["city"]


@pytest.mark.parametrize(
    ("parameters", "complaint"),
    [
        ({"type": "object", "properties": {"a": {"type": "strnig"}}}, "invalid argument schema"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}},
            "invalid argument schema",
        ),
        ({"type": "object", "required": "a"}, "invalid argument schema"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}, "'#/$defs/Missing'"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
            "outside its schema",
        ),
    ],
)
def test_an_invalid_schema_is_refused_at_registration(parameters: dict[str, Any], complaint: str) -> None:
    box = Toolbox()
    with pytest.raises(ToolDefinitionError, match="'broken'") as raised:
        box.add(make_tool("broken", parameters))
    assert complaint in str(raised.value)
    assert "broken" not in box


def test_local_references_and_ref_like_data_are_accepted() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "item": {"$ref": "#/$defs/Item"},
            "$ref": {"type": "string", "default": "#/nowhere"},
            "raw": {"type": "object", "default": {"$ref": "#/not/a/reference"}},
        },
        "$defs": {"Item": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
    }
    box = Toolbox([make_tool("fine", parameters)])
    assert "fine" in box
