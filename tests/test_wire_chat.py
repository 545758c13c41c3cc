from __future__ import annotations

import json
from typing import Any

import pytest

from toolwire.exceptions import ModelHTTPError, ModelResponseError
from toolwire.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    UserMessage,
)
from toolwire.models.base import RequestOptions, TextDelta
from toolwire.wire import chat
from toolwire.wire.sse import SSEDecoder, SSEEvent, encode_event

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PARIS = ToolCall(id="call_A1", name="get_weather", arguments='{"city": "Paris"}')
ROME = ToolCall(id="call_B2", name="get_weather", arguments='{"city":"Rome"}')
TRANSCRIPT: list[Message] = [
    SystemMessage(content="Be brief."),
    UserMessage(content="Weather in Paris and Rome?"),
    AssistantMessage(text=None, tool_calls=(PARIS, ROME)),
    ToolResult(call_id="call_A1", name="get_weather", content='{"temp_c": 18}'),
    ToolResult(call_id="call_B2", name="get_weather", content="upstream timeout", code="timeout"),
]


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def fragment(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        out["id"] = id
        out["type"] = "function"
    if name is not None:
        out["function"]["name"] = name
    return out


# --- build_request ---------------------------------------------------------------------------


def test_build_request_resends_assistant_calls_unchanged_with_results_right_after() -> None:
    body = chat.build_request("gpt-x", TRANSCRIPT, [WEATHER], RequestOptions(), stream=False)

    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_A1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_B2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_A1", "content": '{"temp_c": 18}'},
        {"role": "tool", "tool_call_id": "call_B2", "content": "upstream timeout"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert "stream" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body


def test_build_request_without_tools_sends_no_tool_keys_even_when_options_set() -> None:
    options = RequestOptions(
        tool_choice="required", parallel_tool_calls=False, temperature=0.2, max_tokens=50
    )
    body = chat.build_request("m", [UserMessage(content="hi")], [], options, stream=False)

    assert set(body) == {"model", "messages", "temperature", "max_tokens"}
    assert body["temperature"] == 0.2 and body["max_tokens"] == 50


def test_build_request_passes_tool_choice_strict_and_streaming_options() -> None:
    strict = ToolSpec(name="t", parameters={"type": "object", "properties": {}}, strict=True)
    choice = {"type": "function", "function": {"name": "t"}}
    options = RequestOptions(tool_choice=choice, parallel_tool_calls=False)
    body = chat.build_request("m", [UserMessage(content="hi")], [strict], options, stream=True)

    assert body["tool_choice"] == choice and body["parallel_tool_calls"] is False
    assert body["tools"][0]["function"]["strict"] is True
    assert "description" not in body["tools"][0]["function"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_plain_assistant_turn_is_resent_as_text() -> None:
    body = chat.build_request("m", [AssistantMessage(text="Hello")], [], RequestOptions(), stream=False)
    assert body["messages"] == [{"role": "assistant", "content": "Hello"}]


# --- parse_response --------------------------------------------------------------------------


def completion(message: dict[str, Any], finish: str | None = "stop", **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        **extra,
    }


def test_parse_response_detects_calls_from_tool_calls_not_finish_reason() -> None:
    raw_call = {
        "id": "call_A1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    usage = {"prompt_tokens": 80, "completion_tokens": 40, "total_tokens": 120}
    named_choice = completion({"content": "Checking.", "tool_calls": [raw_call]}, finish="stop", usage=usage)

    turn = chat.parse_response(named_choice)

    assert turn.message == AssistantMessage(
        text="Checking.",
        tool_calls=(ToolCall(id="call_A1", name="get_weather", arguments='{"city":"Paris"}'),),
    )
    assert turn.usage == Usage(input_tokens=80, output_tokens=40, requests=1)
    assert turn.finish_reason == "stop" and turn.route == "chat"

    empty_list = chat.parse_response(completion({"content": "done", "tool_calls": []}, finish="tool_calls"))
    assert empty_list.message.tool_calls == ()
    assert empty_list.message.text == "done"


def test_parse_response_without_text_or_calls_is_a_clean_empty_answer() -> None:
    turn = chat.parse_response(completion({"content": None}))
    assert turn.message == AssistantMessage(text=None, tool_calls=())
    assert turn.usage == Usage(requests=1)


def test_parse_response_fills_missing_or_empty_ids_and_object_arguments() -> None:
    body = completion(
        {
            "content": None,
            "tool_calls": [
                {"id": "", "function": {"name": "a", "arguments": {"x": 1}}},
                {"function": {"name": "b"}},
                {"id": "call_0", "function": {"name": "c", "arguments": "{}"}},
            ],
        }
    )
    calls = chat.parse_response(body).message.tool_calls
    assert [c.id for c in calls] == ["call_0_1", "call_1", "call_0"]
    assert json.loads(calls[0].arguments) == {"x": 1}
    assert calls[1].arguments == ""


def test_parse_response_reads_content_parts_and_refusals() -> None:
    parts = completion({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert chat.parse_response(parts).message.text == "ab"
    refusal = completion({"content": None, "refusal": "I can't help with that."})
    assert chat.parse_response(refusal).message.text == "I can't help with that."


@pytest.mark.parametrize(
    "body",
    [{"choices": []}, {"object": "list", "data": []}, {"choices": [{"message": "hello"}]}, {"choices": "x"}],
)
def test_parse_response_rejects_malformed_shapes_in_one_sentence(body: dict[str, Any]) -> None:
    with pytest.raises(
        ModelResponseError, match=r"^The model endpoint answered something that is not a chat"
    ) as info:
        chat.parse_response(body)
    assert str(info.value).count(". ") == 0 and str(info.value).endswith(".")


def test_parse_response_raises_for_an_error_body() -> None:
    with pytest.raises(ModelHTTPError) as info:
        chat.parse_response({"error": {"message": "overloaded", "type": "BadRequestError", "code": 503}})
    assert info.value.status_code == 503 and "overloaded" in str(info.value)
    with pytest.raises(ModelResponseError, match="overloaded"):
        chat.parse_response({"error": {"message": "overloaded", "code": "server_error"}})


# --- ChatStreamAssembler ---------------------------------------------------------------------


def assemble(chunks: list[dict[str, Any]], *, done: bool = True) -> tuple[list[str], Turn]:
    assembler = chat.ChatStreamAssembler()
    texts = [d.text for c in chunks for d in assembler.feed(c)]
    if done:
        assembler.done()
    return texts, assembler.finish()


def test_stream_with_ids_only_in_first_fragment_and_arguments_in_many_pieces() -> None:
    arguments = '{"city": "Paris", "unit": "c"}'
    chunks = [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [fragment(0, id="call_A1", name="get_weather")],
            }
        )
    ]
    chunks += [chunk({"tool_calls": [fragment(0, arguments=ch)]}) for ch in arguments]
    chunks += [
        chunk({}, "tool_calls"),
        {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}},
    ]

    texts, turn = assemble(chunks)

    assert texts == []
    assert turn.message.tool_calls == (ToolCall(id="call_A1", name="get_weather", arguments=arguments),)
    assert turn.usage == Usage(input_tokens=9, output_tokens=3, requests=1)
    assert turn.finish_reason == "tool_calls"


def test_stream_with_empty_string_ids_keeps_the_first_real_id_or_generates_one() -> None:
    chunks = [
        chunk({"tool_calls": [fragment(0, id="call_A1", name="a", arguments='{"x":')]}),
        chunk({"tool_calls": [fragment(0, id="", name="", arguments="1}")]}),
        chunk({"tool_calls": [fragment(1, id="", name="b", arguments="{}")]}),
        chunk({"tool_calls": [fragment(1, id="", arguments="")]}),
        chunk({}, "tool_calls"),
    ]
    _, turn = assemble(chunks, done=False)
    assert turn.message.tool_calls == (
        ToolCall(id="call_A1", name="a", arguments='{"x":1}'),
        ToolCall(id="call_1", name="b", arguments="{}"),
    )


def test_stream_with_two_calls_interleaved_by_index() -> None:
    chunks = [
        chunk({"tool_calls": [fragment(0, id="call_A", name="first")]}),
        chunk({"tool_calls": [fragment(1, id="call_B", name="second")]}),
        chunk({"tool_calls": [fragment(1, arguments='{"b"')]}),
        chunk({"tool_calls": [fragment(0, arguments='{"a"')]}),
        chunk({"tool_calls": [fragment(0, arguments=":1}"), fragment(1, arguments=":2}")]}),
        chunk({}, "stop"),
    ]
    _, turn = assemble(chunks)
    assert turn.message.tool_calls == (
        ToolCall(id="call_A", name="first", arguments='{"a":1}'),
        ToolCall(id="call_B", name="second", arguments='{"b":2}'),
    )


def test_stream_returns_text_deltas_of_choice_zero_and_ignores_unknown_fields() -> None:
    chunks = [
        chunk({"role": "assistant", "content": ""}, obfuscation="xyz", system_fingerprint="fp"),
        chunk({"content": "Hel", "reasoning_content": "hmm"}, moderation={"flagged": False}),
        chunk({"content": "ignored"}, index=1),
        chunk({"content": "lo"}, logprobs=None),
        chunk({}, "stop"),
    ]
    texts, turn = assemble(chunks)
    assert texts == ["Hel", "lo"]
    assert turn.message == AssistantMessage(text="Hello")
    assert turn.usage == Usage(requests=1)


def test_cut_off_stream_raises_instead_of_returning_half_a_call() -> None:
    chunks = [chunk({"tool_calls": [fragment(0, id="call_A1", name="delete_item", arguments='{"id": 4')]})]
    with pytest.raises(ModelResponseError, match="cut off"):
        assemble(chunks, done=False)


def test_done_without_finish_reason_completes_the_turn() -> None:
    _, turn = assemble([chunk({"content": "ok"})], done=True)
    assert turn.message.text == "ok" and turn.finish_reason is None


def test_error_chunk_raises() -> None:
    assembler = chat.ChatStreamAssembler()
    assembler.feed(chunk({"content": "partial"}))
    with pytest.raises(ModelHTTPError) as info:
        assembler.feed({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})
    assert info.value.status_code == 500 and "engine died" in str(info.value)
    with pytest.raises(ModelResponseError, match="rate limited"):
        chat.ChatStreamAssembler().feed({"error": {"message": "rate limited", "code": "rate_limit_exceeded"}})


def test_unreadable_chunk_raises_model_response_error() -> None:
    with pytest.raises(ModelResponseError, match="cannot be read"):
        chat.ChatStreamAssembler().feed({"choices": [{"index": 0, "delta": "text"}]})


def test_fragments_without_index_start_a_new_call_on_a_new_id() -> None:
    chunks = [
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "a", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chunk({"tool_calls": [{"id": "c2", "function": {"name": "b", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
    ]
    _, turn = assemble(chunks)
    assert [(c.id, c.name, c.arguments) for c in turn.message.tool_calls] == [
        ("c1", "a", "{}"),
        ("c2", "b", "{}"),
    ]


# --- server side -----------------------------------------------------------------------------


def test_parse_request_reads_back_what_build_request_wrote() -> None:
    options = RequestOptions(tool_choice="auto", parallel_tool_calls=True, temperature=0.5, max_tokens=10)
    body = chat.build_request("m", TRANSCRIPT, [WEATHER], options, stream=True)

    transcript, tools, parsed_options, stream = chat.parse_request(json.loads(json.dumps(body)))

    # Chat has no error flag: a failed result comes back as plain content.
    expected = [
        *TRANSCRIPT[:4],
        ToolResult(call_id="call_B2", name="get_weather", content="upstream timeout"),
    ]
    assert transcript == expected
    assert tools == [WEATHER]
    assert parsed_options == options
    assert stream is True


def test_parse_request_translates_deprecated_functions() -> None:
    body = {
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "42"},
        ],
        "functions": [{"name": "f", "parameters": {"type": "object", "properties": {}}}],
        "function_call": {"name": "f"},
        "max_completion_tokens": 7,
    }
    transcript, tools, options, stream = chat.parse_request(body)
    call = transcript[2]
    assert isinstance(call, AssistantMessage) and call.tool_calls[0].name == "f"
    assert transcript[3] == ToolResult(call_id=call.tool_calls[0].id, name="f", content="42")
    assert transcript[0] == SystemMessage(content="rules")
    assert [t.name for t in tools] == ["f"]
    assert options.tool_choice == {"type": "function", "function": {"name": "f"}} and options.max_tokens == 7
    assert stream is False


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.[0]"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search"}]}, "tools.[0]"),
        (
            {"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": "yes"},
            "parallel_tool_calls",
        ),
    ],
)
def test_parse_request_names_the_bad_field(body: Any, param: str | None) -> None:
    with pytest.raises(chat.InvalidRequestError) as info:
        chat.parse_request(body)
    assert info.value.param == param
    assert str(info.value).endswith(".")


def test_render_response_round_trips_through_parse_response() -> None:
    turn = Turn(
        message=AssistantMessage(text="On it.", tool_calls=(PARIS, ROME)),
        usage=Usage(input_tokens=5, output_tokens=2, requests=1),
    )
    body = chat.render_response(turn, "m", "chatcmpl-9")
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    back = chat.parse_response(json.loads(json.dumps(body)))
    assert back.message == turn.message and back.usage == turn.usage


@pytest.mark.parametrize("split", [None, 1, 3])
def test_render_stream_round_trips_through_the_assembler(split: int | None) -> None:
    turn = Turn(
        message=AssistantMessage(text="Let me check.", tool_calls=(PARIS, ROME)),
        usage=Usage(input_tokens=11, output_tokens=4, requests=1),
        finish_reason="tool_calls",
    )
    chunks = list(chat.render_stream(turn, "m", "chatcmpl-7", split=split))

    later = [
        f
        for c in chunks
        if c["choices"]
        for f in c["choices"][0]["delta"].get("tool_calls", ())
        if "id" not in f
    ]
    assert later and all("name" not in f["function"] for f in later)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15
    texts, back = assemble(chunks, done=False)
    assert "".join(texts) == "Let me check."
    assert back == turn


def test_render_stream_text_only_finishes_with_stop_and_can_omit_usage() -> None:
    chunks = list(
        chat.render_stream(Turn(message=AssistantMessage(text="hi")), "m", "c", include_usage=False)
    )
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


# --- SSE -------------------------------------------------------------------------------------


def decode(lines: list[str]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [e for line in lines if (e := decoder.feed(line)) is not None]
    last = decoder.flush()
    return events + ([last] if last else [])


def test_sse_decoder_ignores_comments_joins_data_and_dispatches_on_blank_lines() -> None:
    lines = [
        ": keep-alive",
        'data: {"a":',
        "data:1}",
        "",
        "",
        "event: response.done",
        "id: 7",
        "data: x\r",
        "",
        "data: [DONE]",
    ]
    assert decode(lines) == [
        SSEEvent(data='{"a":\n1}'),
        SSEEvent(data="x", event="response.done"),
        SSEEvent(data="[DONE]"),
    ]


def test_sse_event_name_without_data_is_dropped() -> None:
    assert decode(["event: ping", "", "data: y", ""]) == [SSEEvent(data="y")]


def test_sse_encoder_round_trips_through_the_decoder() -> None:
    wire = encode_event("line one\nline two", event="message.delta") + encode_event("[DONE]")
    assert wire.endswith("data: [DONE]\n\n")
    assert decode(wire.split("\n")) == [
        SSEEvent(data="line one\nline two", event="message.delta"),
        SSEEvent(data="[DONE]"),
    ]


def test_text_delta_is_the_models_event_type() -> None:
    assembler = chat.ChatStreamAssembler()
    assert assembler.feed(chunk({"content": "x"})) == [TextDelta(text="x")]
