"""The Gate: every outcome code, schema features, deadlines, and that nothing invalid ever runs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import typing
from datetime import date
from typing import Annotated, Any, Literal

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

import toolwire.gate.validate as validate_module
from toolwire.context import Context
from toolwire.exceptions import ConfigError
from toolwire.gate import ERROR_CODES, CheckedCall, ErrorCode, Gate, error_result
from toolwire.messages import ToolCall, ToolResult
from toolwire.tools import Tool, Toolbox, tool


class Counter:
    """Records every execution, to prove what did and did not run."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


def make_call(name: str, arguments: str | dict[str, Any], id: str = "call_1") -> ToolCall:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=id, name=name, arguments=raw)


def error_of(result: ToolResult) -> dict[str, Any]:
    payload = json.loads(result.content)
    assert set(payload) == {"error"}
    error: dict[str, Any] = payload["error"]
    assert error["code"] == result.code
    return error


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def gate(counter: Counter) -> Gate:
    @tool
    def book_room(
        room: Literal["red", "blue"],
        day: date,
        guests: int,
        code: Annotated[str, Field(pattern="^[A-Z]{3}$")] = "ABC",
        note: str | None = None,
    ) -> dict[str, Any]:
        """Book a meeting room.

        Args:
            room: Which room.
            day: The day of the booking.
            guests: How many people come.
            code: The cost centre.
            note: Anything to add.
        """
        counter.calls.append({"room": room, "day": day, "guests": guests, "code": code, "note": note})
        return {"room": room, "day": day, "city": "Zürich"}

    return Gate(Toolbox([book_room]))


async def test_a_valid_call_runs_once_and_returns_json(gate: Gate, counter: Counter) -> None:
    call = make_call("book_room", {"room": "red", "day": "2024-05-02", "guests": 3}, id="c7")
    result = await gate.run(call, Context())

    assert (result.call_id, result.name, result.code, result.is_error) == ("c7", "book_room", None, False)
    assert result.content == '{"room": "red", "day": "2024-05-02", "city": "Zürich"}'
    assert counter.calls == [
        {"room": "red", "day": date(2024, 5, 2), "guests": 3, "code": "ABC", "note": None}
    ]


async def test_unknown_tool_lists_the_allowed_names(gate: Gate, counter: Counter) -> None:
    result = await gate.run(make_call("Book_Room", {}), Context())

    error = error_of(result)
    assert result.code == "unknown_tool"
    assert "'Book_Room'" in error["message"] and "Did you mean 'book_room'?" in error["message"]
    assert error["message"].endswith("Call one of: book_room.")
    assert counter.calls == []


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ('{"room": "red",', "not valid JSON"),
        ("[1, 2]", "not an array"),
        ('"room"', "not a string"),
        ("null", "not null"),
        ('{"guests": NaN}', "NaN"),
        ('{"guests": Infinity}', "Infinity"),
        ('{"guests": ' + "9" * 5000 + "}", "not valid JSON"),
        ("[" * 30000 + "]" * 30000, "too deeply"),
    ],
)
async def test_invalid_json_never_runs(gate: Gate, counter: Counter, arguments: str, says: str) -> None:
    result = await gate.run(make_call("book_room", arguments), Context())

    assert result.code == "invalid_json"
    assert says in error_of(result)["message"]
    assert counter.calls == []


async def test_an_empty_argument_string_counts_as_an_empty_object() -> None:
    ran: list[str] = []

    @tool
    def ping() -> str:
        """Answer pong."""
        ran.append("ping")
        return "pong"

    result = await Gate(Toolbox([ping])).run(make_call("ping", ""), Context())
    assert (result.code, result.content, ran) == (None, "pong", ["ping"])


async def test_too_large_arguments_are_refused_without_parsing(
    gate: Gate, counter: Counter, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[int] = []

    class SpyJson:
        @staticmethod
        def loads(text: str, **options: Any) -> Any:
            parsed.append(len(text))
            return json.loads(text, **options)

    monkeypatch.setattr(validate_module, "json", SpyJson)
    huge = json.dumps({"room": "red", "day": "2024-05-02", "guests": 1, "note": "x" * 70_000})

    result = await gate.run(make_call("book_room", huge), Context())

    assert result.code == "too_large"
    assert "65536 bytes" in error_of(result)["message"]
    assert parsed == [] and counter.calls == []
    small = await gate.run(
        make_call("book_room", {"room": "red", "day": "2024-05-02", "guests": 1}), Context()
    )
    assert small.code is None and len(parsed) == 1  # the spy does see what is parsed


async def test_the_size_limit_counts_utf8_bytes(gate: Gate, counter: Counter) -> None:
    small_gate = Gate(gate.toolbox, max_argument_bytes=100)
    base = {"room": "red", "day": "2024-05-02", "guests": 1}
    too_many_bytes = make_call("book_room", {**base, "note": "€" * 30})
    assert len(too_many_bytes.arguments) < 100 < len(too_many_bytes.arguments.encode())

    refused = await small_gate.run(too_many_bytes, Context())
    accepted = await small_gate.run(make_call("book_room", {**base, "note": "€" * 5}), Context())

    assert refused.code == "too_large"
    assert accepted.code is None
    assert [c["note"] for c in counter.calls] == ["€" * 5]


async def test_invalid_arguments_report_every_error_with_its_path(gate: Gate, counter: Counter) -> None:
    arguments = {"room": "green", "day": "2024-02-30", "guests": "3", "code": "ab", "extra": 1}
    result = await gate.run(make_call("book_room", arguments), Context())

    error = error_of(result)
    assert result.code == "invalid_arguments"
    assert "5 errors" in error["message"]
    by_path = {(d["path"], d["message"]) for d in error["details"]}
    assert by_path == {
        ("$", "Additional properties are not allowed ('extra' was unexpected)"),
        ("$.code", "'ab' does not match '^[A-Z]{3}$'"),
        ("$.day", "'2024-02-30' is not a 'date'"),
        ("$.guests", "'3' is not of type 'integer'"),
        ("$.room", "'green' is not one of ['red', 'blue']"),
    }
    assert counter.calls == []


async def test_a_missing_required_argument_and_a_wrong_optional_are_explained(
    gate: Gate, counter: Counter
) -> None:
    result = await gate.run(
        make_call("book_room", {"room": "red", "day": "2024-05-02", "note": 5}), Context()
    )

    details = error_of(result)["details"]
    assert {"path": "$", "message": "'guests' is a required property"} in details
    assert {"path": "$.note", "message": "5 is not of type 'string' or 5 is not of type 'null'"} in details
    assert counter.calls == []


HAND_WRITTEN = {
    "type": "object",
    "properties": {
        "item": {"$ref": "#/$defs/Item"},
        "contact": {"type": "string", "format": "email"},
        "ref": {"type": "string", "format": "uuid"},
        "at": {"type": "string", "format": "date-time"},
    },
    "required": ["item"],
    "additionalProperties": False,
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"qty": {"type": "integer", "minimum": 1}, "sku": {"type": "string"}},
            "required": ["qty"],
            "additionalProperties": False,
        }
    },
}


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"item": {"qty": 0}}, "$.item.qty"),
        ({"item": {"qty": 1, "colour": "red"}}, "$.item"),
        ({"item": {"qty": 1}, "contact": "nobody"}, "$.contact"),
        ({"item": {"qty": 1}, "ref": "not-a-uuid"}, "$.ref"),
        ({"item": {"qty": 1}, "at": "2024-05-02T10:00:00"}, "$.at"),
        ({"item": {"qty": 1}, "at": "yesterday"}, "$.at"),
    ],
)
async def test_schema_features_of_hand_written_schemas(arguments: dict[str, Any], path: str) -> None:
    counter = Counter()

    async def handler(args: dict[str, Any], context: Context) -> Any:
        counter.calls.append(args)
        return "ok"

    order = Tool(name="order", description="Order.", parameters=HAND_WRITTEN, handler=handler)
    gate = Gate(Toolbox([order]))

    refused = await gate.run(make_call("order", arguments), Context())
    good = {
        "item": {"qty": 2, "sku": "A1"},
        "contact": "a@example.com",
        "ref": "2f1c8f9e-3b0e-4d5c-9a57-1d2e3f4a5b6c",
        "at": "2024-05-02T10:00:00+02:00",
    }
    accepted = await gate.run(make_call("order", good), Context())

    assert refused.code == "invalid_arguments"
    assert [d["path"] for d in error_of(refused)["details"]] == [path]
    assert accepted.code is None
    assert counter.calls == [good]


async def test_a_tool_error_carries_the_message_but_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    @tool
    def withdraw(amount: int) -> str:
        """Withdraw money."""
        raise ValueError(f"amount {amount} exceeds the balance")

    with caplog.at_level(logging.ERROR, logger="toolwire.gate"):
        result = await Gate(Toolbox([withdraw])).run(make_call("withdraw", {"amount": 50}), Context())

    error = error_of(result)
    assert result.code == "tool_error"
    assert error["message"] == "The tool failed: amount 50 exceeds the balance"
    assert "Traceback" not in result.content and "withdraw(" not in result.content
    [record] = [r for r in caplog.records if r.name == "toolwire.gate.gate"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


async def test_the_deadline_stops_a_slow_tool() -> None:
    stopped: list[bool] = []

    @tool(timeout=0.05, effect="write")
    async def hang() -> str:
        """Never finish."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append(True)
            raise
        return "never"

    result = await Gate(Toolbox([hang])).run(make_call("hang", "{}"), Context())

    error = error_of(result)
    assert result.code == "timeout"
    assert "within 0.05 seconds" in error["message"]
    assert "unknown" in error["message"]  # a write may or may not have happened
    assert stopped == [True]


async def test_a_timeout_raised_by_the_tool_itself_is_a_tool_error() -> None:
    @tool(timeout=30)
    async def call_upstream() -> str:
        """Call a slow system."""
        raise TimeoutError("upstream did not answer")

    result = await Gate(Toolbox([call_upstream])).run(make_call("call_upstream", "{}"), Context())
    assert result.code == "tool_error"
    assert "upstream did not answer" in error_of(result)["message"]


async def test_a_sync_tool_does_not_block_the_event_loop() -> None:
    signal = threading.Event()

    @tool
    def wait_for_signal() -> bool:
        """Wait until the signal is set."""
        # On the event loop this would wait out its timeout: the coroutine setting it could not run.
        return signal.wait(timeout=10)

    async def set_signal() -> None:
        await asyncio.sleep(0)
        signal.set()

    gate = Gate(Toolbox([wait_for_signal]))
    result, _ = await asyncio.gather(gate.run(make_call("wait_for_signal", "{}"), Context()), set_signal())
    assert (result.code, result.content) == (None, "true")


async def test_context_reaches_the_tool() -> None:
    @tool
    def whoami(ctx: Context) -> str:
        """Say who is asking."""
        return ctx.user_id

    gate = Gate(Toolbox([whoami]))
    forged = await gate.run(make_call("whoami", {"ctx": {"user_id": "admin"}}), Context(user_id="bob"))
    honest = await gate.run(make_call("whoami", {}), Context(user_id="bob"))

    assert forged.code == "invalid_arguments"
    assert honest.content == "bob"


async def test_check_and_execute_are_the_two_halves_of_run(gate: Gate, counter: Counter) -> None:
    call = make_call("book_room", {"room": "blue", "day": "2024-05-02", "guests": 2})

    checked = gate.check(call)

    assert isinstance(checked, CheckedCall)
    assert (checked.call, checked.tool.name, checked.arguments) == (
        call,
        "book_room",
        {"room": "blue", "day": "2024-05-02", "guests": 2},
    )
    assert counter.calls == []
    result = await gate.execute(checked, Context())
    assert result.code is None and len(counter.calls) == 1
    assert isinstance(gate.check(make_call("nope", "{}")), ToolResult)


async def test_return_values_become_content() -> None:
    @dataclasses.dataclass
    class Receipt:
        total: float
        day: date

    values: list[Any] = ["plain text", None, [1, "ü"], Receipt(total=9.5, day=date(2024, 1, 2)), {1, 2}]

    @tool
    def give(index: int) -> Any:
        """Return a value."""
        return values[index]

    gate = Gate(Toolbox([give]))
    contents = [(await gate.run(make_call("give", {"index": i}), Context())).content for i in range(5)]
    assert contents == ["plain text", "null", '[1, "ü"]', '{"total": 9.5, "day": "2024-01-02"}', "[1, 2]"]


def test_error_codes_are_the_designed_set() -> None:
    assert ERROR_CODES == (
        "unknown_tool",
        "invalid_json",
        "too_large",
        "too_many_calls",
        "invalid_arguments",
        "forbidden",
        "timeout",
        "upstream_error",
        "tool_error",
        "outcome_unknown",
    )
    assert typing.get_args(ErrorCode) == ERROR_CODES


@pytest.mark.parametrize("code", ERROR_CODES)
def test_error_result_shape_for_every_code(code: ErrorCode) -> None:
    call = make_call("any_tool", "{}", id="c9")
    result = error_result(call, code, "Explain what to do.", [{"status": 502}])

    assert (result.call_id, result.name, result.code, result.is_error) == ("c9", "any_tool", code, True)
    assert json.loads(result.content) == {
        "error": {"code": code, "message": "Explain what to do.", "details": [{"status": 502}]}
    }


def test_a_gate_needs_room_for_arguments() -> None:
    with pytest.raises(ConfigError):
        Gate(Toolbox(), max_argument_bytes=0)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
_arguments = st.one_of(
    st.text(),
    _json_values.map(json.dumps),
    st.fixed_dictionaries({"a": _json_values}, optional={"b": _json_values, "c": _json_values}).map(
        json.dumps
    ),
    st.fixed_dictionaries({"a": st.integers()}, optional={"b": st.integers()}).map(json.dumps),
)


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


@settings(max_examples=300, deadline=None)
@given(name=st.one_of(st.text(), st.just("add")), arguments=_arguments)
def test_arbitrary_proposals_never_crash_and_run_only_when_valid(name: str, arguments: str) -> None:
    executed: list[dict[str, Any]] = []

    @tool
    async def add(a: int, b: int = 0) -> int:
        """Add two numbers."""
        executed.append({"a": a, "b": b})
        return a + b

    result = asyncio.run(
        Gate(Toolbox([add])).run(ToolCall(id="x", name=name, arguments=arguments), Context())
    )

    assert isinstance(result, ToolResult) and result.call_id == "x"
    assert result.code is None or result.code in ERROR_CODES
    try:
        parsed = json.loads(arguments, parse_constant=_reject_constant) if arguments.strip() else {}
    except (ValueError, RecursionError):
        parsed = None
    valid = (
        name == "add"
        and isinstance(parsed, dict)
        and jsonschema.Draft202012Validator(add.parameters).is_valid(parsed)
    )
    # Schema-valid values the function's own conversion refuses (an integer too large to come from
    # a float, such as 1E20) are the model's error too, answered before the function body runs.
    refused = valid and result.code == "invalid_arguments"
    assert bool(executed) == (valid and not refused)
    assert (result.code is None) == (valid and not refused)


def test_a_schema_valid_value_the_function_cannot_convert_is_invalid_arguments_and_runs_nothing() -> None:
    executed: list[int] = []

    @tool
    async def add(a: int, b: int = 0) -> int:
        """Add two numbers."""
        executed.append(a)
        return a + b

    assert jsonschema.Draft202012Validator(add.parameters).is_valid({"a": 1e20})
    result = asyncio.run(Gate(Toolbox([add])).run(make_call("add", '{"a": 1E20}'), Context()))

    assert result.code == "invalid_arguments"
    assert "a: " in error_of(result)["message"]
    assert executed == []
