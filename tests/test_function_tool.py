"""@tool: schemas from type hints and docstrings, Context injection, typed arguments at call time."""

from __future__ import annotations

import dataclasses
import enum
import threading
from datetime import date
from typing import Annotated, Any, Literal

import pydantic
import pytest
from pydantic import Field

from toolwire.context import Context
from toolwire.exceptions import ToolDefinitionError
from toolwire.tools import Tool, tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str
    city: str = "Paris"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def _walk_keys(schema: Any, parent: str | None = None) -> list[tuple[str | None, str]]:
    """Every (parent keyword, key) pair of a schema, to find stray `title` keywords."""
    found: list[tuple[str | None, str]] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.append((parent, key))
            found.extend(_walk_keys(value, key))
    elif isinstance(schema, list):
        for item in schema:
            found.extend(_walk_keys(item, parent))
    return found


def test_schema_from_type_hints() -> None:
    @tool
    def book(
        name: str,
        count: int,
        price: float,
        urgent: bool,
        kind: Literal["room", "desk"],
        color: Color,
        tags: list[str],
        limits: dict[str, int],
        note: str | None = None,
        *,
        nights: int = 1,
    ) -> str:
        """Book something."""
        return name

    schema = book.parameters
    props = schema["properties"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["name", "count", "price", "urgent", "kind", "color", "tags", "limits"]
    assert props["name"] == {"type": "string"}
    assert props["count"] == {"type": "integer"}
    assert props["price"] == {"type": "number"}
    assert props["urgent"] == {"type": "boolean"}
    assert props["kind"] == {"type": "string", "enum": ["room", "desk"]}
    assert props["color"] == {"$ref": "#/$defs/Color"}
    assert schema["$defs"]["Color"] == {"type": "string", "enum": ["red", "blue"]}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["limits"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["nights"] == {"type": "integer", "default": 1}
    assert ("title" not in {key for _, key in _walk_keys(schema)}) is True


def test_a_parameter_called_title_survives_while_title_keywords_go() -> None:
    @tool
    def rename(title: str, default: str = "x") -> str:
        """Rename a document."""
        return title

    assert set(rename.parameters["properties"]) == {"title", "default"}
    stray = [(parent, key) for parent, key in _walk_keys(rename.parameters) if key == "title"]
    assert stray == [("properties", "title")]


def test_docstring_feeds_the_description_and_the_argument_descriptions() -> None:
    @tool
    def get_weather(city: str, unit: Literal["c", "f"] = "c", days: int = 1) -> str:
        """Current weather for a city.

        Use it whenever the user asks about
        weather conditions.

        Args:
            city: The city name, for example
                Paris or Rome.
            unit (str): Temperature unit.
            days: How many days ahead.

        Returns:
            The weather report.
        """
        return city

    assert get_weather.description == (
        "Current weather for a city.\n\nUse it whenever the user asks about weather conditions."
    )
    props = get_weather.parameters["properties"]
    assert props["city"]["description"] == "The city name, for example Paris or Rome."
    assert props["unit"]["description"] == "Temperature unit."
    assert props["days"]["description"] == "How many days ahead."
    assert "Returns" not in get_weather.description


def test_field_constraints_and_descriptions_in_annotated_win_over_the_docstring() -> None:
    @tool
    def lookup(code: Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="An IATA code.")]) -> str:
        """Look an airport up.

        Args:
            code: Ignored because Field says it.
        """
        return code

    assert lookup.parameters["properties"]["code"] == {
        "type": "string",
        "pattern": "^[A-Z]{3}$",
        "description": "An IATA code.",
    }


def test_nested_models_and_dataclasses_are_referenced_and_closed() -> None:
    @tool
    def ship(to: Address, at: Point, when: date) -> str:
        """Ship a parcel."""
        return "ok"

    schema = ship.parameters
    assert schema["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert schema["properties"]["at"] == {"$ref": "#/$defs/Point"}
    assert schema["properties"]["when"] == {"type": "string", "format": "date"}
    address = schema["$defs"]["Address"]
    assert address["required"] == ["street"]
    assert address["additionalProperties"] is False
    assert schema["$defs"]["Point"]["additionalProperties"] is False


async def test_handler_receives_python_values() -> None:
    seen: dict[str, Any] = {}

    @tool
    def ship(to: Address, at: Point, when: date, color: Color, note: str | None = None) -> str:
        """Ship a parcel."""
        seen.update(to=to, at=at, when=when, color=color, note=note)
        return "ok"

    arguments = {"to": {"street": "Rue 1"}, "at": {"x": 1, "y": 2}, "when": "2024-05-01", "color": "blue"}
    assert await ship.handler(arguments, Context()) == "ok"
    assert seen == {
        "to": Address(street="Rue 1", city="Paris"),
        "at": Point(x=1, y=2),
        "when": date(2024, 5, 1),
        "color": Color.BLUE,
        "note": None,
    }


async def test_context_is_injected_and_never_in_the_schema() -> None:
    @tool
    async def whoami(ctx: Context, greeting: str = "hi") -> str:
        """Say who is asking."""
        return f"{greeting} {ctx.user_id}"

    assert "ctx" not in whoami.parameters["properties"]
    assert "required" not in whoami.parameters
    assert await whoami.handler({}, Context(user_id="alice")) == "hi alice"


async def test_context_may_sit_anywhere_in_the_signature() -> None:
    @tool
    def tenant_of(name: str, *, context: Context) -> str:
        """Tell the tenant."""
        return f"{name}@{context.tenant_id}"

    assert list(tenant_of.parameters["properties"]) == ["name"]
    assert await tenant_of.handler({"name": "bob"}, Context(tenant_id="acme")) == "bob@acme"


async def test_sync_functions_run_in_a_worker_thread() -> None:
    threads: list[int] = []

    @tool
    def where() -> str:
        """Report the thread."""
        threads.append(threading.get_ident())
        return "done"

    assert await where.handler({}, Context()) == "done"
    assert threads and threads[0] != threading.get_ident()


async def test_keywords_override_the_defaults_and_keep_the_function() -> None:
    def create_item(label: str) -> str:
        """Create an item."""
        return label

    made = tool(
        name="make_item",
        description="Make one item.",
        effect="write",
        timeout=5,
        strict=True,
        requires=["items:write"],
        retry_safe=True,
    )(create_item)

    assert isinstance(made, Tool)
    assert (made.name, made.description, made.effect, made.timeout, made.strict) == (
        "make_item",
        "Make one item.",
        "write",
        5,
        True,
    )
    assert made.requires == ("items:write",)
    assert made.retry_safe is True
    assert made.metadata["function"] is create_item
    assert (made.spec.name, made.spec.effect) == ("make_item", "write"), "the model learns it is a write"


async def test_defaults_apply_and_parameter_names_may_shadow_model_attributes() -> None:
    @tool
    def odd_names(json: str, model_config: int = 2, schema: list[int] | None = None) -> dict[str, Any]:
        """Echo."""
        return {"json": json, "model_config": model_config, "schema": schema}

    assert odd_names.parameters["required"] == ["json"]
    assert await odd_names.handler({"json": "x"}, Context()) == {
        "json": "x",
        "model_config": 2,
        "schema": None,
    }


async def test_types_defined_in_the_decorating_scope_resolve() -> None:
    class Line(pydantic.BaseModel):
        sku: str

    @tool
    def order(line: Line) -> str:
        """Order a line."""
        return line.sku

    assert order.parameters["$defs"]["Line"]["required"] == ["sku"]
    assert await order.handler({"line": {"sku": "A1"}}, Context()) == "A1"


async def test_the_return_annotation_is_never_evaluated() -> None:
    @tool
    def make_receipt(total: int) -> Receipt:
        """Make a receipt."""
        return Receipt(total)

    class Receipt:
        def __init__(self, total: int) -> None:
            self.total = total

    assert make_receipt.parameters["required"] == ["total"]


def test_an_unresolvable_parameter_type_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="cannot be resolved"):

        @tool
        def pay(amount: Money) -> None:
            """Pay."""

    class Money:
        pass


def _star_args(*items: int) -> None: ...
def _star_kwargs(**options: int) -> None: ...
def _no_annotation(amount) -> None: ...  # type: ignore[no-untyped-def]
def _positional_only(amount: int, /) -> None: ...


@pytest.mark.parametrize(
    ("func", "named"),
    [
        (_star_args, "*items"),
        (_star_kwargs, "**options"),
        (_no_annotation, "'amount'"),
        (_positional_only, "'amount'"),
    ],
)
def test_unsupported_signatures_are_refused_naming_the_parameter(func: Any, named: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        tool(func)
    message = str(raised.value)
    assert named in message
    assert message.count(".") >= 1 and "\n" not in message


def test_a_type_without_json_schema_is_refused_naming_the_parameter() -> None:
    def watch(lock: threading.Lock) -> None:
        """Watch a lock."""

    with pytest.raises(ToolDefinitionError, match="'lock'"):
        tool(watch)


def test_generators_are_refused() -> None:
    def numbers() -> Any:
        """Count."""
        yield 1

    with pytest.raises(ToolDefinitionError, match="generator"):
        tool(numbers)


def test_names_follow_the_function_name_rules() -> None:
    with pytest.raises(ToolDefinitionError, match="not allowed"):
        tool(name="no spaces allowed")(_star_args)
    with pytest.raises(ToolDefinitionError, match="not allowed"):
        tool(lambda: None)
    assert tool(name="anonymous")(lambda: None).name == "anonymous"
