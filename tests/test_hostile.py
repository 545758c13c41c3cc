"""Hostile input at the Gate: arbitrary JSON, look-alike names, and URLs smuggled into arguments.

`test_gate.py` already throws arbitrary strings at one small tool. Here the Gate gets arbitrary
JSON values against the product's own typed schemas (the bookkeeping tools, an HTTP function, a
tool with dates, enums, nested objects and bounded lists) and names that look like allowed ones:
nothing invalid runs, nothing crashes. HTTP functions get arbitrary strings in their URL path and
query: each stays in its place on the connection's own host, and a second local server, playing
the attacker's host, receives nothing. Prompt injection through a model is in `test_injection.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from collections.abc import Iterator
from datetime import date
from typing import Annotated, Any, Literal
from urllib.parse import quote

import httpx2
import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from attacker import Evil
from service_support import server_thread
from toolwire.context import Context
from toolwire.demo.bookkeeping import bookkeeping_toolbox
from toolwire.demo.tickets import TicketsServer
from toolwire.gate import ERROR_CODES, Gate
from toolwire.gate.validate import FORMAT_CHECKER
from toolwire.messages import ToolCall, ToolResult
from toolwire.tools import Tool, Toolbox, tool
from toolwire.tools.auth import AuthConfig
from toolwire.tools.http import Connection, FunctionDefinition, http_tools

TOKEN = "tickets-token-hostile"


@pytest.fixture(scope="module")
def evil() -> Iterator[tuple[Evil, str]]:
    attacker = Evil()
    with server_thread(attacker.app) as server:
        yield attacker, server.url


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    with TicketsServer(tmp_path_factory.mktemp("hostile") / "tickets.db", token=TOKEN) as server:
        yield server


# --- the Gate under arbitrary JSON ---------------------------------------------------------------

executed: list[tuple[str, dict[str, Any]]] = []


def _recording(original: Tool) -> Tool:
    async def handler(arguments: dict[str, Any], context: Context) -> dict[str, bool]:
        executed.append((original.name, arguments))
        return {"ok": True}

    return dataclasses.replace(original, handler=handler)


class Attendee(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=40)]
    email: str | None = None


@tool
async def book_event(
    room: Literal["red", "blue"],
    day: date,
    attendees: Annotated[list[Attendee], Field(min_length=1, max_length=3)],
    seats: Annotated[list[int], Field(max_length=4)] | None = None,
    budget: Annotated[float, Field(ge=0, le=1000)] = 0,
) -> dict[str, Any]:
    """Book a room for an event.

    Args:
        room: Which room.
        day: The day.
        attendees: Who comes.
        seats: Seat numbers.
        budget: At most this much.
    """
    executed.append(("book_event", {"room": room, "day": day.isoformat(), "attendees": len(attendees)}))
    return {"room": room}


_ECHO = Connection(name="echo", url="http://127.0.0.1:9/api", auth=AuthConfig(type="none"))
_ECHO_FUNCTION = FunctionDefinition(
    name="echo_segment",
    description="Echo one path segment.",
    parameters={
        "type": "object",
        "required": ["segment"],
        "properties": {"segment": {"type": "string"}, "q": {"type": "string"}},
        "additionalProperties": False,
    },
    connection="echo",
    path="/echo/{segment}",
)


def _typed_tools() -> list[Tool]:
    (echo,) = http_tools([_ECHO_FUNCTION], [_ECHO], client=httpx2.AsyncClient())
    return [*(_recording(t) for t in bookkeeping_toolbox()), _recording(echo), book_event]


TOOLS = {t.name: t for t in _typed_tools()}
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["today", "2024-05-02", "2024-02-30", "red", "a@b.c", "", " "])
)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
_plausible = (
    st.text(min_size=1, max_size=20)
    | st.floats(min_value=0.01, max_value=1e6).map(lambda f: round(f, 2))
    | st.integers(min_value=1, max_value=100)
    | st.just([{"name": "Ada"}])
)


def _objects(name: str) -> st.SearchStrategy[Any]:
    schema = TOOLS[name].parameters
    names = list(schema.get("properties", {}))
    required = list(schema.get("required", []))
    values = _plausible | _json
    close = st.fixed_dictionaries(
        dict.fromkeys(required, values),
        optional={key: values for key in names if key not in required}
        | {"user_id": _json, "tenant_id": _json},
    )
    loose = st.dictionaries(
        st.sampled_from([*names, "user_id", "__proto__", ""]) | st.text(max_size=6), values
    )
    return close | loose | _json


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _valid(name: str, raw: str) -> bool:
    try:
        parsed = json.loads(raw, parse_constant=_reject_constant) if raw.strip() else {}
    except (ValueError, RecursionError):
        return False
    schema = TOOLS[name].parameters
    checker = jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    return isinstance(parsed, dict) and bool(checker.is_valid(parsed))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(sorted(TOOLS)).flatmap(lambda name: st.tuples(st.just(name), _objects(name))),
    ensure_ascii=st.booleans(),
)
@example(case=("create_item", {"category": "food", "amount": 12.5, "title": "lunch"}), ensure_ascii=True)
@example(case=("list_items", {"category": "food", "pageSize": 100}), ensure_ascii=True)
@example(case=("echo_segment", {"segment": "../admin"}), ensure_ascii=False)
@example(
    case=("book_event", {"room": "red", "day": "2024-05-02", "attendees": [{"name": "Ada"}]}),
    ensure_ascii=True,
)
@example(case=("create_item", {"category": "x", "amount": math.nan, "title": "t"}), ensure_ascii=True)
@example(
    case=("create_item", {"category": "x", "amount": 1, "title": "t", "user_id": "bob"}), ensure_ascii=True
)
def test_arbitrary_json_arguments_run_only_when_they_match_the_schema(
    case: tuple[str, Any], ensure_ascii: bool
) -> None:
    name, value = case
    raw = json.dumps(value, ensure_ascii=ensure_ascii)  # NaN and Infinity become bare words: not JSON
    executed.clear()
    gate = Gate(Toolbox(list(TOOLS.values())))

    result = asyncio.run(gate.run(ToolCall(id="c", name=name, arguments=raw), Context()))

    assert isinstance(result, ToolResult) and result.call_id == "c"
    assert result.code is None or result.code in ERROR_CODES
    valid = _valid(name, raw)
    assert [n for n, _ in executed] == ([name] if valid else []), (raw, result.content)
    if valid:
        assert result.code is None, result.content
        if name != "book_event":  # the others record what reached them: exactly what was sent
            assert executed[0][1] == json.loads(raw)
    else:
        assert result.code in ("invalid_json", "invalid_arguments"), result.content


_MASQUERADES = [
    str.upper,
    str.title,
    lambda n: f" {n}",
    lambda n: f"{n}\n",
    lambda n: f"{n}\x00",
    lambda n: n.replace("_", "-"),
    lambda n: n.replace("_", "\u200b_"),
    lambda n: "\uff43" + n[1:],  # a full-width first letter
    lambda n: f"functions.{n}",
    lambda n: f"{n}()",
    lambda n: f"{n}; drop table items",
]


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(sorted(TOOLS)).flatmap(
        lambda n: st.sampled_from(_MASQUERADES).map(lambda f: f(n)) | st.text(max_size=2).map(lambda s: n + s)
    )
)
def test_names_that_only_look_allowed_are_unknown(name: str) -> None:
    executed.clear()
    arguments = {"category": "x", "amount": 1, "title": "t"} if name.startswith("create_item") else {}
    gate = Gate(Toolbox(list(TOOLS.values())))

    result = asyncio.run(gate.run(ToolCall(id="c", name=name, arguments=json.dumps(arguments)), Context()))

    if name in TOOLS:
        assert result.code != "unknown_tool"
    else:
        assert result.code == "unknown_tool" and executed == []


# --- HTTP functions under arbitrary strings --------------------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment=st.text(max_size=40), query=st.none() | st.text(max_size=40))
@example(segment="../../../admin", query=None)
@example(segment="http://127.0.0.1:1/steal", query="http://127.0.0.1:1/x")
@example(segment="@127.0.0.1:1", query="a&api_key=stolen#frag")
@example(segment="%2e%2e%2F%2e%2e", query="\r\nHost: evil")
def test_an_argument_never_leaves_its_place_in_the_url(
    tickets: TicketsServer, evil: tuple[Evil, str], segment: str, query: str | None
) -> None:
    attacker, evil_url = evil
    connection = Connection(
        name="tickets",
        url=f"{tickets.base_url}/echo",
        auth=AuthConfig(type="bearer", secrets={"token": TOKEN}),
    )
    function = dataclasses.replace(_ECHO_FUNCTION, connection="tickets", path="/{segment}")
    arguments: dict[str, Any] = {"segment": segment} | ({"q": query} if query is not None else {})
    before = len(attacker.hits)

    async def run() -> ToolResult:
        async with httpx2.AsyncClient() as client:
            (echo,) = http_tools([function], [connection], client=client)
            call_ = ToolCall(id="c", name="echo_segment", arguments=json.dumps(arguments))
            return await Gate(Toolbox([echo])).run(call_, Context())

    result = asyncio.run(run())

    assert len(attacker.hits) == before
    try:
        encoded = quote(segment, safe="")
        if query is not None:
            query.encode()
    except UnicodeEncodeError:  # a lone surrogate cannot travel in a URL at all
        encoded = None
    if encoded is None or segment in ("", ".", ".."):
        assert result.code == "invalid_arguments", result.content  # refused before anything was sent
        return
    if "\n" in segment and result.code == "upstream_error":
        # Delivered, but the echo route's pattern does not match every decoded newline: the
        # tickets API itself answers 404, in its own error format.
        assert '\\"Not Found\\"' in result.content, result.content
        return
    assert result.code is None, result.content
    echoed = json.loads(result.content)
    # Exactly one segment below the connection's path, whatever the characters were.
    assert echoed["raw_path"] == f"/echo/{encoded}"
    assert echoed["query"] == ({"q": query} if query is not None else {})
    assert echoed["headers"]["authorization"] == "Bearer [redacted]"
    assert echoed["headers"]["host"] == tickets.base_url.removeprefix("http://")
