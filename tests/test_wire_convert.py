"""The Chat <-> Responses mapping: requests, responses and both stream bridges."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwire.exceptions import ModelHTTPError, ModelResponseError, WireFormatError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    UserMessage,
)
from toolwire.wire import chat, responses
from toolwire.wire.convert import (
    ChatToResponsesStream,
    ConversionError,
    ResponsesToChatStream,
    chat_request_to_responses,
    chat_response_to_responses,
    responses_request_to_chat,
    responses_response_to_chat,
)
from toolwire.wire.responses import ResponsesStreamAssembler, call_item_id

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
CALLS = [
    {
        "id": "call_A1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    },
    {
        "id": "call_B2",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
    },
]
CHAT_REQUEST: dict[str, Any] = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_A1", "content": '{"temp_c":18}'},
        {"role": "tool", "tool_call_id": "call_B2", "content": '{"error":"upstream timeout"}'},
        {"role": "assistant", "content": "Paris is 18C; Rome did not answer."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            ],
        },
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": PARAMETERS,
                "strict": True,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            },
        },
    ],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": True,
    "max_tokens": 200,
}


# --- requests ----------------------------------------------------------------------------------


def test_chat_request_becomes_flat_responses_request() -> None:
    body = chat_request_to_responses(CHAT_REQUEST)

    assert body["instructions"] == "You are terse."
    assert body["input"][0] == {"type": "message", "role": "user", "content": "Weather in Paris and Rome?"}
    assert body["input"][1:5] == [
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
        {"type": "function_call_output", "call_id": "call_B2", "output": '{"error":"upstream timeout"}'},
    ]
    assert body["input"][5]["content"] == [
        {"type": "output_text", "text": "Paris is 18C; Rome did not answer.", "annotations": []}
    ]
    assert body["input"][6]["content"][1] == {
        "type": "input_image",
        "image_url": "https://x/y.png",
        "detail": "low",
    }
    assert body["tools"][0] == {
        "type": "function",
        "name": "get_weather",
        "description": "Weather",
        "parameters": PARAMETERS,
        "strict": True,
    }
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["max_output_tokens"] == 200
    assert body["parallel_tool_calls"] is True
    assert body["store"] is False


def test_strict_absent_on_chat_is_an_explicit_false_on_responses() -> None:
    request = {
        "messages": [],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    }

    assert chat_request_to_responses(request)["tools"][0]["strict"] is False


def test_chat_request_round_trips_through_responses() -> None:
    back = responses_request_to_chat(chat_request_to_responses(copy.deepcopy(CHAT_REQUEST)))

    assert back["messages"] == CHAT_REQUEST["messages"]
    assert back["tools"] == CHAT_REQUEST["tools"]
    assert back["tool_choice"] == CHAT_REQUEST["tool_choice"]
    assert back["max_completion_tokens"] == 200


def test_responses_request_round_trips_through_chat() -> None:
    history: list[Message] = [
        UserMessage(content="Weather in Paris and Rome?"),
        AssistantMessage(
            text="Checking.", tool_calls=(ToolCall(id="call_A1", name="get_weather", arguments="{}"),)
        ),
        ToolResult(call_id="call_A1", name="get_weather", content="18"),
    ]
    tools = [ToolSpec(name="get_weather", description="Weather", parameters=PARAMETERS)]
    original = responses.build_request("m", history, tools, RequestOptions(tool_choice="auto"), True)

    back = chat_request_to_responses(responses_request_to_chat(original))

    assert back["input"] == original["input"]
    assert back["tools"] == original["tools"]
    assert back["tool_choice"] == "auto" and back["stream"] is True


def test_consecutive_function_calls_merge_into_one_assistant_message() -> None:
    body = {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking."}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_A1",
                "name": "get_weather",
                "arguments": "{}",
            },
            {
                "type": "function_call",
                "id": "fc_2",
                "call_id": "call_B2",
                "name": "get_weather",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_A1", "output": "18"},
            {"type": "function_call_output", "call_id": "call_B2", "output": "20"},
        ],
    }
    messages = responses_request_to_chat(body)["messages"]

    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[2]["content"] == "Checking."
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["call_A1", "call_B2"]
    assert [m["tool_call_id"] for m in messages[3:]] == ["call_A1", "call_B2"]


@pytest.mark.parametrize(
    "kind",
    [
        "web_search",
        "web_search_preview",
        "file_search",
        "code_interpreter",
        "computer_use_preview",
        "image_generation",
        "mcp",
    ],
)
def test_hosted_tools_are_refused_with_their_name(kind: str) -> None:
    body = {"input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": kind}]}

    with pytest.raises(ConversionError, match=rf"tools\[1\] is a hosted '{kind}' tool") as caught:
        responses_request_to_chat(body)
    assert isinstance(caught.value, WireFormatError)  # a gateway answers every one of them with a 400
    assert caught.value.param == "tools[1]"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            r"input\[1\] is a 'web_search_call' item",
        ),
        ({"type": "mcp_call", "id": "mcp_1"}, r"input\[1\] is a 'mcp_call' item"),
        (
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            r"input\[1\] is a 'reasoning' item with encrypted_content",
        ),
        (
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_image", "image_url": "https://x/y.png"}],
            },
            r"input\[1\].output holds an image",
        ),
        (
            {"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]},
            r"input\[1\].content\[0\] is a 'input_file' part",
        ),
    ],
)
def test_items_without_chat_form_are_refused_with_their_position(item: dict[str, Any], message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        responses_request_to_chat({"input": [{"role": "user", "content": "hi"}, item]})


def test_state_and_hosted_tool_choice_are_refused() -> None:
    with pytest.raises(ConversionError, match="previous_response_id"):
        responses_request_to_chat({"input": [], "previous_response_id": "resp_1"})
    with pytest.raises(ConversionError, match="code_interpreter"):
        responses_request_to_chat({"input": "hi", "tool_choice": {"type": "code_interpreter"}})


def test_chat_parameters_without_responses_form_are_refused() -> None:
    with pytest.raises(ConversionError, match="'stop'"):
        chat_request_to_responses({"messages": [], "stop": ["\n"]})
    with pytest.raises(ConversionError, match="custom"):
        chat_request_to_responses({"messages": [], "tools": [{"type": "custom", "custom": {"name": "x"}}]})
    assert "n" not in chat_request_to_responses({"messages": [], "n": 1, "frequency_penalty": 0})


def test_allowed_tools_choice_maps_both_ways() -> None:
    chat_choice = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "a"}}]},
    }
    flat = chat_request_to_responses({"messages": [], "tool_choice": chat_choice})["tool_choice"]

    assert flat == {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "a"}]}
    assert responses_request_to_chat({"input": "x", "tool_choice": flat})["tool_choice"] == chat_choice


# --- responses ---------------------------------------------------------------------------------

CHAT_RESPONSE: dict[str, Any] = {
    "id": "chatcmpl-abc",
    "object": "chat.completion",
    "created": 1760000000,
    "model": "gpt-4.1",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Checking.", "refusal": None, "tool_calls": CALLS},
            "finish_reason": "tool_calls",
            "logprobs": None,
        }
    ],
    "usage": {
        "prompt_tokens": 80,
        "completion_tokens": 40,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 16},
        "completion_tokens_details": {"reasoning_tokens": 8},
    },
}


def test_chat_response_becomes_message_then_function_call_items() -> None:
    body = chat_response_to_responses(CHAT_RESPONSE)

    assert body["status"] == "completed"
    assert [item["type"] for item in body["output"]] == ["message", "function_call", "function_call"]
    assert body["output"][1]["call_id"] == "call_A1"
    assert body["output"][1]["id"] == call_item_id("call_A1")
    assert body["usage"] == {
        "input_tokens": 80,
        "input_tokens_details": {"cached_tokens": 16},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 8},
        "total_tokens": 120,
    }
    turn = responses.parse_response(body)
    assert turn.message.text == "Checking."
    assert [c.id for c in turn.message.tool_calls] == ["call_A1", "call_B2"]


def test_chat_response_round_trips_through_responses() -> None:
    back = responses_response_to_chat(chat_response_to_responses(CHAT_RESPONSE))

    assert back["choices"] == CHAT_RESPONSE["choices"]
    assert back["usage"] == CHAT_RESPONSE["usage"]
    assert back["created"] == CHAT_RESPONSE["created"]


def test_cut_chat_response_becomes_incomplete_and_back() -> None:
    cut = copy.deepcopy(CHAT_RESPONSE)
    cut["choices"][0]["finish_reason"] = "length"
    body = chat_response_to_responses(cut)

    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert responses_response_to_chat(body)["choices"][0]["finish_reason"] == "length"


def test_responses_response_joins_by_call_id_not_item_id() -> None:
    body = {
        "id": "resp_1",
        "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "id": "fc_zzz",
                "call_id": "call_A1",
                "name": "get_weather",
                "arguments": "{}",
            },
            {
                "type": "function_call",
                "id": "fc_yyy",
                "call_id": "call_B2",
                "name": "get_weather",
                "arguments": "{}",
            },
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    }
    chat_body = responses_response_to_chat(body)
    message = chat_body["choices"][0]["message"]

    assert [c["id"] for c in message["tool_calls"]] == ["call_A1", "call_B2"]
    assert message["content"] is None
    assert chat_body["choices"][0]["finish_reason"] == "tool_calls"
    assert chat_body["usage"]["prompt_tokens"] == 3 and chat_body["usage"]["completion_tokens"] == 4


def test_responses_response_with_hosted_call_or_failure_is_refused() -> None:
    hosted = {"status": "completed", "output": [{"type": "file_search_call", "id": "fs_1"}]}
    failed = {"status": "failed", "output": [], "error": {"code": "server_error", "message": "x"}}

    with pytest.raises(ConversionError, match=r"output\[0\] is a 'file_search_call' item"):
        responses_response_to_chat(hosted)
    with pytest.raises(ConversionError, match="'failed'"):
        responses_response_to_chat(failed)


# --- stream bridges ----------------------------------------------------------------------------


def chat_chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


def fragment(index: int, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    head: dict[str, Any] = {"index": index}
    function: dict[str, Any] = {"arguments": arguments}
    if call_id:
        head |= {"id": call_id, "type": "function"}
        function["name"] = "get_weather"
    return {"tool_calls": [{**head, "function": function}]}


# The typical OpenAI sequence of wire-formats §2.2, with some text in front.
CHAT_CHUNKS = [
    chat_chunk({"role": "assistant", "content": "Let me "}),
    chat_chunk({"content": "check."}),
    chat_chunk(fragment(0, "", "call_A1")),
    chat_chunk(fragment(0, '{"city":')),
    chat_chunk(fragment(0, '"Paris"}')),
    chat_chunk(fragment(1, "", "call_B2")),
    chat_chunk(fragment(1, '{"city":"Rome"}')),
    chat_chunk({}, "tool_calls"),
    chat_chunk(usage={"prompt_tokens": 80, "completion_tokens": 40, "total_tokens": 120}),
]


def bridge_chat(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    bridge = ChatToResponsesStream()
    events = [event for chunk in chunks for event in bridge.feed(chunk)]
    return events + bridge.finish()


def assert_well_formed(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    opened = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    closed = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert sorted(opened) == sorted(closed) == list(range(len(opened)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed")


def test_chat_stream_bridge_emits_the_documented_event_order() -> None:
    events = bridge_chat(CHAT_CHUNKS)

    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert_well_formed(events)
    completed = events[-1]["response"]
    assert [item.get("call_id") for item in completed["output"]] == [None, "call_A1", "call_B2"]
    assert completed["usage"]["input_tokens"] == 80


def test_finish_reason_closes_every_open_item_before_usage_arrives() -> None:
    bridge = ChatToResponsesStream()
    for chunk in CHAT_CHUNKS[:-2]:
        bridge.feed(chunk)
    at_finish = bridge.feed(CHAT_CHUNKS[-2])
    at_usage = bridge.feed(CHAT_CHUNKS[-1])

    assert [(e["type"], e["output_index"]) for e in at_finish] == [
        ("response.function_call_arguments.done", 1),
        ("response.output_item.done", 1),
        ("response.function_call_arguments.done", 2),
        ("response.output_item.done", 2),
    ]
    assert [e["type"] for e in at_usage] == ["response.completed"]
    assert bridge.finish() == []


def test_chat_stream_bridge_output_reassembles_into_the_chat_turn() -> None:
    assembler = ResponsesStreamAssembler()
    text = "".join(d.text for event in bridge_chat(CHAT_CHUNKS) for d in assembler.feed(event))
    turn = assembler.finish()

    assert text == "Let me check."
    assert turn.message.tool_calls == (
        ToolCall(id="call_A1", name="get_weather", arguments='{"city":"Paris"}'),
        ToolCall(id="call_B2", name="get_weather", arguments='{"city":"Rome"}'),
    )
    assert turn.usage == Usage(input_tokens=80, output_tokens=40, requests=1)


def test_chat_stream_without_usage_chunk_completes_at_the_end() -> None:
    events = bridge_chat(CHAT_CHUNKS[:-1])

    assert events[-1]["type"] == "response.completed"
    assert_well_formed(events)


def test_cut_off_chat_stream_becomes_a_failed_response() -> None:
    events = bridge_chat(CHAT_CHUNKS[:4])
    assembler = ResponsesStreamAssembler()

    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    with pytest.raises(ModelHTTPError, match="cut off") as caught:
        for event in events:
            assembler.feed(event)
    assert caught.value.status_code == 500


def test_chat_error_chunk_becomes_error_and_failed_events() -> None:
    events = bridge_chat([CHAT_CHUNKS[0], {"error": {"message": "overloaded", "code": "server_error"}}])

    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "overloaded"}


def test_chat_fragments_without_index_are_grouped_by_id() -> None:
    def piece(arguments: str, call_id: str | None = None) -> dict[str, Any]:
        head = {"id": call_id, "type": "function"} if call_id else {}
        return chat_chunk({"tool_calls": [{**head, "function": {"name": "f", "arguments": arguments}}]})

    chunks = [
        piece('{"a"', "call_1"),
        piece(":1}"),
        piece("{}", "call_2"),
        piece("", "call_2"),
        chat_chunk({}, "stop"),
    ]
    assembler = ResponsesStreamAssembler()
    for event in bridge_chat(chunks):
        assembler.feed(event)

    assert assembler.finish().message.tool_calls == (
        ToolCall(id="call_1", name="f", arguments='{"a":1}'),
        ToolCall(id="call_2", name="f", arguments="{}"),
    )


def test_chat_stream_with_a_second_choice_is_refused() -> None:
    chunk = chat_chunk({"content": "x"})
    chunk["choices"][0]["index"] = 1

    with pytest.raises(ConversionError, match="one choice"):
        ChatToResponsesStream().feed(chunk)


def bridge_responses(events: list[dict[str, Any]]) -> tuple[ResponsesToChatStream, list[dict[str, Any]]]:
    bridge = ResponsesToChatStream()
    chunks = [chunk for event in events for chunk in bridge.feed(event)]
    return bridge, chunks + bridge.finish()


def assemble_chat(chunks: list[dict[str, Any]]) -> Turn:
    assembler = chat.ChatStreamAssembler()
    for chunk in chunks:
        assembler.feed(json.loads(json.dumps(chunk)))
    assembler.done()
    return assembler.finish()


def test_responses_stream_with_arguments_only_at_the_end_reaches_chat_whole() -> None:
    item = {
        "type": "function_call",
        "id": "fc_9",
        "call_id": "call_A1",
        "name": "get_weather",
        "arguments": "",
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "m", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**item, "arguments": '{"city":"Paris"}'},
        },
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": []}},
    ]
    bridge, chunks = bridge_responses(events)
    fragments = [
        tc for c in chunks for ch in c.get("choices", []) for tc in ch["delta"].get("tool_calls", [])
    ]

    assert fragments[0]["id"] == "call_A1"
    assert assemble_chat(chunks).message.tool_calls == (
        ToolCall(id="call_A1", name="get_weather", arguments='{"city":"Paris"}'),
    )
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert bridge.failed is False


def test_responses_stream_restating_different_arguments_is_refused() -> None:
    item = {"type": "function_call", "id": "fc_9", "call_id": "call_A1", "name": "f", "arguments": ""}
    bridge = ResponsesToChatStream()
    bridge.feed({"type": "response.output_item.added", "output_index": 0, "item": item})
    bridge.feed({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"a":1'})

    with pytest.raises(ModelResponseError, match="differ"):
        bridge.feed(
            {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": '{"b":2}'}
        )


def test_responses_stream_with_a_hosted_call_is_refused() -> None:
    event = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"type": "web_search_call", "id": "ws_1"},
    }

    with pytest.raises(ConversionError, match=r"output\[0\] is a 'web_search_call' item"):
        ResponsesToChatStream().feed(event)


def test_cut_off_or_failed_responses_stream_ends_in_an_error_chunk() -> None:
    item = {"type": "function_call", "id": "fc_9", "call_id": "call_A1", "name": "f", "arguments": ""}
    cut, cut_chunks = bridge_responses(
        [{"type": "response.output_item.added", "output_index": 0, "item": item}]
    )
    failed, failed_chunks = bridge_responses(
        [{"type": "error", "code": "rate_limit_exceeded", "message": "slow"}]
    )

    assert cut.failed and "cut off" in cut_chunks[-1]["error"]["message"]
    assert failed.failed and failed_chunks == [
        {"error": {"message": "slow", "type": "server_error", "param": None, "code": "rate_limit_exceeded"}}
    ]


NAMES = st.from_regex(r"[a-zA-Z0-9_-]{1,16}", fullmatch=True)
ARGUMENTS = st.text(max_size=60) | st.dictionaries(
    st.text(max_size=6), st.integers() | st.text(max_size=6)
).map(json.dumps)
TURNS = st.builds(
    lambda text, calls: Turn(
        message=AssistantMessage(
            text=text,
            tool_calls=tuple(ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)),
        ),
        usage=Usage(input_tokens=7, output_tokens=9, requests=1),
    ),
    st.none() | st.text(min_size=1, max_size=60),
    st.lists(st.tuples(NAMES, ARGUMENTS), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(turn=TURNS, split=st.none() | st.integers(1, 5))
def test_responses_stream_bridged_to_chat_keeps_the_turn(turn: Turn, split: int | None) -> None:
    _, chunks = bridge_responses(list(responses.render_stream(turn, "m", "resp_p", split=split)))
    rebuilt = assemble_chat(chunks)

    assert rebuilt.message == turn.message
    assert rebuilt.usage == turn.usage


@settings(max_examples=60, deadline=None)
@given(turn=TURNS, split=st.none() | st.integers(1, 5))
def test_chat_stream_bridged_to_responses_keeps_the_turn(turn: Turn, split: int | None) -> None:
    events = bridge_chat(list(chat.render_stream(turn, "m", "chatcmpl-p", split=split)))
    assembler = ResponsesStreamAssembler()
    for event in events:
        assembler.feed(json.loads(json.dumps(event)))

    assert_well_formed(events)
    assert assembler.finish().message == turn.message
    assert assembler.finish().usage == turn.usage
