"""The Responses wire adapter: request building, response and stream parsing, the server half."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwire.exceptions import ModelHTTPError, ModelResponseError, UserError, WireFormatError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    UserMessage,
)
from toolwire.wire import responses
from toolwire.wire.responses import (
    ResponsesStreamAssembler,
    build_request,
    call_item_id,
    parse_request,
    parse_response,
    render_response,
    render_stream,
)

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
STRICT = ToolSpec(name="lookup", parameters={"type": "object", "properties": {}}, strict=True)
PARIS = ToolCall(id="call_A1", name="get_weather", arguments='{"city":"Paris"}')
ROME = ToolCall(id="call_B2", name="get_weather", arguments='{"city":"Rome"}')

HISTORY: list[Message] = [
    SystemMessage(content="You are terse."),
    UserMessage(content="Weather in Paris and Rome?"),
    AssistantMessage(text="Checking both.", tool_calls=(PARIS, ROME)),
    ToolResult(call_id="call_A1", name="get_weather", content='{"temp_c":18}'),
    ToolResult(call_id="call_B2", name="get_weather", content='{"error":"timeout"}', code="tool_error"),
    UserMessage(content="And tomorrow?"),
]


def feed_all(events: list[dict[str, Any]]) -> tuple[ResponsesStreamAssembler, str]:
    assembler = ResponsesStreamAssembler()
    text = "".join(d.text for event in events for d in assembler.feed(json.loads(json.dumps(event))))
    return assembler, text


# --- build_request -----------------------------------------------------------------------------


def test_tools_are_flat_and_strict_is_always_explicit() -> None:
    body = build_request("gpt-5", [UserMessage(content="hi")], [WEATHER, STRICT], RequestOptions(), False)

    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": WEATHER.parameters,
            "strict": False,
        },
        {
            "type": "function",
            "name": "lookup",
            "parameters": {"type": "object", "properties": {}},
            "strict": True,
        },
    ]


def test_system_messages_become_instructions_on_every_request() -> None:
    first = build_request("m", HISTORY[:2], [WEATHER], RequestOptions(), False)
    later = build_request("m", HISTORY, [WEATHER], RequestOptions(), False, previous_response_id="resp_1")

    assert first["instructions"] == later["instructions"] == "You are terse."
    assert all(item.get("role") != "system" for item in first["input"] + later["input"])


def test_stateless_continuation_resends_history_joined_by_call_id() -> None:
    body = build_request("m", HISTORY, [WEATHER], RequestOptions(), True)

    assert body["stream"] is True
    assert "previous_response_id" not in body
    assert body["input"] == [
        {"type": "message", "role": "user", "content": "Weather in Paris and Rome?"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": call_item_id("call_A1"),
            "call_id": "call_A1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {
            "type": "function_call",
            "id": call_item_id("call_B2"),
            "call_id": "call_B2",
            "name": "get_weather",
            "arguments": '{"city":"Rome"}',
        },
        {"type": "function_call_output", "call_id": "call_A1", "output": '{"temp_c":18}'},
        {"type": "function_call_output", "call_id": "call_B2", "output": '{"error":"timeout"}'},
        {"type": "message", "role": "user", "content": "And tomorrow?"},
    ]


def test_item_ids_are_stable_fc_ids_distinct_from_the_call_id() -> None:
    assert call_item_id("call_A1") == call_item_id("call_A1")
    assert call_item_id("call_A1") != call_item_id("call_B2")
    assert call_item_id("call_A1").startswith("fc_")
    assert call_item_id("call_A1") != "call_A1"


def test_previous_response_id_sends_only_the_items_after_the_last_assistant_turn() -> None:
    body = build_request("m", HISTORY, [WEATHER], RequestOptions(), False, previous_response_id="resp_9")

    assert body["previous_response_id"] == "resp_9"
    assert [item.get("call_id") or item.get("content") for item in body["input"]] == [
        "call_A1",
        "call_B2",
        "And tomorrow?",
    ]


def test_options_are_translated_to_responses_names() -> None:
    options = RequestOptions(
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
        temperature=0.2,
        max_tokens=300,
    )
    body = build_request("m", [UserMessage(content="hi")], [WEATHER], options, False)

    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["parallel_tool_calls"] is False
    assert body["temperature"] == 0.2
    assert body["max_output_tokens"] == 300
    assert "max_tokens" not in body


def test_allowed_tools_choice_is_flattened_and_dropped_without_tools() -> None:
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "a"}}]},
    }
    with_tools = build_request("m", [], [WEATHER], RequestOptions(tool_choice=allowed), False)
    without = build_request("m", [], [], RequestOptions(tool_choice="required"), False)

    assert with_tools["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "a"}],
    }
    assert "tool_choice" not in without and "tools" not in without


def test_a_tool_choice_naming_a_hosted_tool_is_refused() -> None:
    with pytest.raises(WireFormatError, match="file_search"):
        build_request("m", [], [WEATHER], RequestOptions(tool_choice={"type": "file_search"}), False)


# --- parse_response ----------------------------------------------------------------------------


def response_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_123",
        "object": "response",
        "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}]},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Checking ", "annotations": []},
                    {"type": "output_text", "text": "both.", "annotations": []},
                ],
            },
            {
                "type": "function_call",
                "id": "fc_x",
                "call_id": "call_A1",
                "name": "get_weather",
                "arguments": "{}",
            },
            {
                "type": "function_call",
                "id": "fc_y",
                "call_id": "call_B2",
                "name": "get_weather",
                "arguments": "{}",
            },
        ],
        "usage": {"input_tokens": 60, "output_tokens": 30, "total_tokens": 90},
    }
    body.update(overrides)
    return body


def test_parse_response_joins_calls_by_call_id_and_skips_reasoning() -> None:
    turn = parse_response(response_body())

    assert turn.message.text == "Checking both."
    assert [c.id for c in turn.message.tool_calls] == ["call_A1", "call_B2"]
    assert turn.usage == Usage(input_tokens=60, output_tokens=30, requests=1)
    assert turn.route == "responses"
    assert turn.finish_reason == "tool_calls"
    assert responses.response_id(response_body()) == "resp_123"


def test_a_function_call_without_call_id_is_not_read_by_its_item_id() -> None:
    body = response_body(output=[{"type": "function_call", "id": "fc_1", "name": "f", "arguments": "{}"}])

    with pytest.raises(ModelResponseError, match="call_id"):
        parse_response(body)


def test_failed_response_raises_with_the_status_its_code_implies() -> None:
    limited = response_body(status="failed", error={"code": "rate_limit_exceeded", "message": "slow down"})
    odd = response_body(status="failed", error={"code": "image_too_large", "message": "no"})

    with pytest.raises(ModelHTTPError, match="slow down") as caught:
        parse_response(limited)
    assert caught.value.status_code == 429
    with pytest.raises(ModelResponseError, match="image_too_large"):
        parse_response(odd)


def test_incomplete_response_reports_length() -> None:
    body = response_body(status="incomplete", incomplete_details={"reason": "max_output_tokens"})

    assert parse_response(body).finish_reason == "length"


def test_a_body_that_is_not_a_response_is_refused() -> None:
    with pytest.raises(ModelResponseError, match="/v1/responses"):
        parse_response({"choices": []})


# --- ResponsesStreamAssembler ------------------------------------------------------------------


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def item_done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def fc(item_id: str, call_id: str, arguments: str = "", name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments}


def args_delta(index: int, item_id: str, delta: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "output_index": index,
        "item_id": item_id,
        "delta": delta,
    }


COMPLETED = {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": []}}


def test_interleaved_parallel_calls_are_reassembled_per_item_and_joined_by_call_id() -> None:
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}},
        added(0, fc("fc_1", "call_A1")),
        added(1, fc("fc_2", "call_B2")),
        args_delta(1, "fc_2", '{"city":'),
        args_delta(0, "fc_1", '{"city":'),
        args_delta(0, "fc_1", '"Paris"}'),
        args_delta(1, "fc_2", '"Rome"}'),
        item_done(1, fc("fc_2", "call_B2", '{"city":"Rome"}')),
        item_done(0, fc("fc_1", "call_A1", '{"city":"Paris"}')),
        COMPLETED,
    ]
    assembler, _ = feed_all(events)
    turn = assembler.finish()

    assert turn.message.tool_calls == (PARIS, ROME)
    assert assembler.response_id == "resp_1"


def test_arguments_sent_only_in_arguments_done_yield_the_whole_call() -> None:
    events = [
        added(0, fc("fc_1", "call_A1")),
        {
            "type": "response.function_call_arguments.done",
            "output_index": 0,
            "item_id": "fc_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        COMPLETED,
    ]
    assembler, _ = feed_all(events)

    assert assembler.finish().message.tool_calls == (PARIS,)


def test_arguments_sent_only_in_output_item_done_yield_the_whole_call() -> None:
    events = [
        added(0, fc("fc_1", "call_A1")),
        item_done(0, fc("fc_1", "call_A1", '{"city":"Paris"}')),
        COMPLETED,
    ]
    assembler, _ = feed_all(events)

    assert assembler.finish().message.tool_calls == (PARIS,)


def test_deltas_without_output_index_are_keyed_by_item_id() -> None:
    events = [
        added(0, fc("fc_1", "call_A1")),
        added(1, fc("fc_2", "call_B2")),
        {"type": "response.function_call_arguments.delta", "item_id": "fc_2", "delta": '{"city":"Rome"}'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"city":"Paris"}'},
        COMPLETED,
    ]
    assembler, _ = feed_all(events)

    assert assembler.finish().message.tool_calls == (PARIS, ROME)


def test_text_only_in_done_events_still_arrives_as_a_delta() -> None:
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events = [
        added(0, message),
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hel"},
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": "Hello"},
        COMPLETED,
    ]
    assembler, text = feed_all(events)

    assert text == "Hello"
    assert assembler.finish().message.text == "Hello"


def test_the_final_response_is_authoritative_for_calls_it_lists() -> None:
    final = {
        "type": "response.completed",
        "response": {
            "id": "resp_1",
            "status": "completed",
            "output": [fc("fc_1", "call_A1", '{"city":"Paris"}')],
            "usage": {"input_tokens": 5, "output_tokens": 7},
        },
    }
    assembler, _ = feed_all([added(0, fc("fc_1", "call_A1")), final])
    turn = assembler.finish()

    assert turn.message.tool_calls == (PARIS,)
    assert turn.usage == Usage(input_tokens=5, output_tokens=7, requests=1)


def test_a_stream_cut_off_before_its_final_event_never_yields_the_half_call() -> None:
    assembler, _ = feed_all([added(0, fc("fc_1", "call_A1")), args_delta(0, "fc_1", '{"city":"Pa')])

    with pytest.raises(ModelResponseError, match="cut off"):
        assembler.finish()


def test_done_marker_ends_the_stream_only_when_every_item_finished() -> None:
    finished, _ = feed_all([added(0, fc("fc_1", "call_A1")), item_done(0, fc("fc_1", "call_A1", "{}"))])
    open_call, _ = feed_all([added(0, fc("fc_1", "call_A1")), args_delta(0, "fc_1", "{")])
    finished.done()
    open_call.done()

    assert finished.finish().message.tool_calls[0].id == "call_A1"
    with pytest.raises(ModelResponseError, match="cut off"):
        open_call.finish()


def test_error_event_raises_an_http_error_when_its_code_names_a_status() -> None:
    assembler = ResponsesStreamAssembler()
    event = {"type": "error", "code": "server_error", "message": "boom", "param": None, "sequence_number": 3}

    with pytest.raises(ModelHTTPError, match="boom") as caught:
        assembler.feed(event)
    assert caught.value.status_code == 500


def test_response_failed_raises() -> None:
    event = {
        "type": "response.failed",
        "response": {"id": "r", "status": "failed", "error": {"code": "invalid_thing", "message": "bad"}},
    }

    with pytest.raises(ModelResponseError, match="invalid_thing: bad"):
        ResponsesStreamAssembler().feed(event)


def test_unknown_event_types_are_ignored() -> None:
    events = [
        {"type": "response.web_search_call.searching", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "hmm"},
        {"type": "response.something_new", "output_index": 5, "payload": [1, 2]},
        added(1, fc("fc_1", "call_A1", '{"city":"Paris"}')),
        COMPLETED,
    ]
    assembler, text = feed_all(events)

    assert text == ""
    assert assembler.finish().message == AssistantMessage(tool_calls=(PARIS,))


# --- server side -------------------------------------------------------------------------------


def test_parse_request_reads_input_items_into_the_canonical_transcript() -> None:
    body = {
        "model": "m",
        "instructions": "You are terse.",
        "input": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking both."}],
            },
            fc("fc_1", "call_A1", '{"city":"Paris"}'),
            fc("fc_2", "call_B2", '{"city":"Rome"}'),
            {"type": "function_call_output", "call_id": "call_A1", "output": '{"temp_c":18}'},
            {
                "type": "function_call_output",
                "call_id": "call_B2",
                "output": [{"type": "input_text", "text": "x"}],
            },
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 50,
        "stream": True,
    }
    transcript, tools, options, stream = parse_request(body)

    assert transcript == [
        SystemMessage(content="You are terse."),
        UserMessage(content="Weather in Paris and Rome?"),
        AssistantMessage(text="Checking both.", tool_calls=(PARIS, ROME)),
        ToolResult(call_id="call_A1", name="get_weather", content='{"temp_c":18}'),
        ToolResult(call_id="call_B2", name="get_weather", content="x"),
    ]
    assert tools == [ToolSpec(name="get_weather", parameters={"type": "object"}, strict=None)]
    assert options.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert options.max_tokens == 50
    assert stream is True


def test_parse_request_of_a_built_request_gives_back_the_transcript() -> None:
    options = RequestOptions(tool_choice="required", parallel_tool_calls=True, temperature=0.5, max_tokens=99)
    body = json.loads(json.dumps(build_request("m", HISTORY, [WEATHER, STRICT], options, True)))
    transcript, tools, parsed_options, stream = parse_request(body)

    # The wire has no error flag for results: the code does not travel, the content does.
    expected = [
        m if not isinstance(m, ToolResult) else ToolResult(call_id=m.call_id, name=m.name, content=m.content)
        for m in HISTORY
    ]
    assert transcript == expected
    assert tools == [
        ToolSpec(
            name=WEATHER.name, description=WEATHER.description, parameters=WEATHER.parameters, strict=False
        ),
        STRICT,
    ]
    assert parsed_options == options
    assert stream is True


@pytest.mark.parametrize(
    "kind", ["web_search", "file_search", "code_interpreter", "computer_use_preview", "mcp"]
)
def test_parse_request_refuses_hosted_tools_by_name(kind: str) -> None:
    body = {"input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": kind}]}

    with pytest.raises(WireFormatError, match=rf"tools\[1\] is a '{kind}' tool") as caught:
        parse_request(body)
    assert isinstance(caught.value, UserError)
    assert caught.value.param == "tools[1]"


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, "'web_search_call' item"),
        ({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}, "'reasoning' item"),
        ({"type": "item_reference", "id": "msg_1"}, "'item_reference' item"),
        (
            {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]},
            "'input_image' part",
        ),
    ],
)
def test_parse_request_refuses_items_without_canonical_form(item: dict[str, Any], named: str) -> None:
    with pytest.raises(WireFormatError, match=rf"input\[1\].* is a {named}"):
        parse_request({"input": [{"role": "user", "content": "hi"}, item]})


def test_parse_request_refuses_stored_state() -> None:
    with pytest.raises(WireFormatError, match="previous_response_id"):
        parse_request({"input": [], "previous_response_id": "resp_1"})


TURN = Turn(
    message=AssistantMessage(text="Checking both.", tool_calls=(PARIS, ROME)),
    usage=Usage(input_tokens=11, output_tokens=22, requests=1),
    route="responses",
    finish_reason="tool_calls",
)


def test_render_response_puts_the_message_first_then_completed_calls() -> None:
    body = render_response(TURN, "m", "resp_7", created_at=1)

    assert [item["type"] for item in body["output"]] == ["message", "function_call", "function_call"]
    assert body["output"][1] == {
        **fc(call_item_id("call_A1"), "call_A1", PARIS.arguments),
        "status": "completed",
    }
    assert body["status"] == "completed"
    assert body["usage"]["input_tokens"] == 11 and body["usage"]["total_tokens"] == 33
    assert parse_response(body) == TURN


def test_render_stream_emits_the_documented_event_order() -> None:
    events = list(render_stream(TURN, "m", "resp_7", split=None))

    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2]
    assert events[8]["item"]["arguments"] == "" and events[8]["item"]["status"] == "in_progress"
    assert events[11]["item"]["status"] == "completed"
    assert events[-1]["response"]["output"][2]["call_id"] == "call_B2"


def test_render_stream_of_a_cut_turn_ends_incomplete() -> None:
    turn = Turn(message=AssistantMessage(text="Hel"), finish_reason="length")
    events = list(render_stream(turn, "m", "resp_7"))
    assembler, _ = feed_all(events)

    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert assembler.finish().finish_reason == "length"


NAMES = st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True)
ARGUMENTS = st.text(max_size=80) | st.dictionaries(
    st.text(max_size=8), st.integers() | st.text(max_size=8)
).map(json.dumps)
TURNS = st.builds(
    lambda text, calls, tokens: Turn(
        message=AssistantMessage(
            text=text,
            tool_calls=tuple(
                ToolCall(id=f"call_{i}_{n}", name=n, arguments=a) for i, (n, a) in enumerate(calls)
            ),
        ),
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1], requests=1),
        route="responses",
        finish_reason="tool_calls" if calls else "stop",
    ),
    st.none() | st.text(min_size=1, max_size=80),
    st.lists(st.tuples(NAMES, ARGUMENTS), max_size=4),
    st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
)


@settings(max_examples=80, deadline=None)
@given(turn=TURNS, split=st.none() | st.integers(1, 7))
def test_rendered_stream_reassembles_into_the_same_turn(turn: Turn, split: int | None) -> None:
    events = list(render_stream(turn, "m", "resp_p", split=split))
    assembler, text = feed_all(events)

    assert assembler.finish() == turn
    assert text == (turn.message.text or "")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    opened = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    closed = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert opened == closed == list(range(len(opened)))


@settings(max_examples=50, deadline=None)
@given(turn=TURNS)
def test_rendered_response_parses_into_the_same_turn(turn: Turn) -> None:
    assert parse_response(json.loads(json.dumps(render_response(turn, "m", "resp_p")))) == turn
