from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionUserMessageParam

from toolwire.testing.server import ScriptedServer, Step

USER = {"role": "user", "content": "Weather in Paris?"}
SDK_USER: ChatCompletionUserMessageParam = {"role": "user", "content": "Weather in Paris?"}
CALL_A = {
    "id": "call_A",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}
CALL_B = {
    "id": "call_B",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]

MISSING = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: "
)
ORPHAN = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)


@pytest.fixture
def http() -> Iterator[httpx2.Client]:
    with httpx2.Client(timeout=10) as client:
        yield client


def post(http: httpx2.Client, srv: ScriptedServer, body: dict[str, Any]) -> httpx2.Response:
    return http.post(f"{srv.base_url}/chat/completions", json={"model": "scripted", **body})


def data_lines(response: httpx2.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")]


def test_unanswered_call_id_gets_openais_400(http: httpx2.Client) -> None:
    with ScriptedServer.from_steps(Step.reply("never sent")) as srv:
        messages = [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL_A, CALL_B]},
            {"role": "tool", "tool_call_id": "call_A", "content": "18C"},
            {"role": "user", "content": "and?"},
        ]
        response = post(http, srv, {"messages": messages})

        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "message": MISSING + "call_B",
                "type": "invalid_request_error",
                "param": "messages.[3].role",
                "code": None,
            }
        }
        assert srv.remaining == 1  # a rejected request consumes no step
        assert srv.requests[0]["messages"] == messages


def test_transcript_ending_in_unanswered_calls_is_rejected(http: httpx2.Client) -> None:
    with ScriptedServer.from_steps(Step.reply("x")) as srv:
        response = post(http, srv, {"messages": [USER, {"role": "assistant", "tool_calls": [CALL_A]}]})
        assert response.status_code == 400
        assert response.json()["error"]["message"] == MISSING + "call_A"


@pytest.mark.parametrize(
    "messages",
    [
        [USER, {"role": "tool", "tool_call_id": "call_A", "content": "x"}],
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL_A]},
            {"role": "tool", "tool_call_id": "call_Z", "content": "x"},
        ],
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL_A]},
            {"role": "tool", "tool_call_id": "call_A", "content": "x"},
            {"role": "tool", "tool_call_id": "call_A", "content": "again"},
        ],
    ],
    ids=["no-call-before", "unknown-id", "answered-twice"],
)
def test_tool_message_answering_no_call_is_rejected(
    http: httpx2.Client, messages: list[dict[str, Any]]
) -> None:
    with ScriptedServer.from_steps(Step.reply("x")) as srv:
        response = post(http, srv, {"messages": messages})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["message"] == ORPHAN
        assert error["param"] == f"messages.[{len(messages) - 1}].role"


def test_results_answered_after_a_later_message_are_rejected(http: httpx2.Client) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL_A]},
        {"role": "user", "content": "hurry"},
        {"role": "tool", "tool_call_id": "call_A", "content": "x"},
    ]
    with ScriptedServer.from_steps(Step.reply("x")) as srv:
        response = post(http, srv, {"messages": messages})
        assert response.status_code == 400
        assert response.json()["error"]["message"] == MISSING + "call_A"


def test_result_order_is_free_unless_strict(http: httpx2.Client) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL_A, CALL_B]},
        {"role": "tool", "tool_call_id": "call_B", "content": "Rome"},
        {"role": "tool", "tool_call_id": "call_A", "content": "Paris"},
    ]
    with ScriptedServer.from_steps(Step.reply("Both sunny.")) as srv:
        assert (
            post(http, srv, {"messages": messages}).json()["choices"][0]["message"]["content"]
            == "Both sunny."
        )
    with ScriptedServer.from_steps(Step.reply("x"), strict_result_order=True) as srv:
        response = post(http, srv, {"messages": messages})
        assert response.status_code == 400
        assert "expected call_A, got call_B" in response.json()["error"]["message"]
    with ScriptedServer.from_steps(Step.reply("anything goes"), check_transcript=False) as srv:
        assert post(http, srv, {"messages": messages[:2]}).status_code == 200


def test_exhausted_script_answers_500_saying_so(http: httpx2.Client) -> None:
    with ScriptedServer.from_steps(Step.reply("one")) as srv:
        assert post(http, srv, {"messages": [USER]}).status_code == 200
        response = post(http, srv, {"messages": [USER]})
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "script_exhausted"
        assert "no step left for request #2" in response.json()["error"]["message"]
        srv.assert_complete()


def test_unused_steps_fail_assert_complete() -> None:
    with (
        ScriptedServer.from_steps(Step.reply("unused")) as srv,
        pytest.raises(AssertionError, match="never requested"),
    ):
        srv.assert_complete()


def test_reject_tools_answers_like_a_model_without_tool_support(http: httpx2.Client) -> None:
    with ScriptedServer.from_steps(Step.reply("plain"), reject_tools=True) as srv:
        refused = post(http, srv, {"messages": [USER], "tools": TOOLS})
        assert refused.status_code == 400
        assert refused.json()["error"] == {
            "message": "Model 'scripted' does not support tools.",
            "type": "invalid_request_error",
            "param": "tools",
            "code": "unsupported_parameter",
        }
        assert post(http, srv, {"messages": [USER]}).json()["choices"][0]["message"]["content"] == "plain"


def test_invalid_request_is_answered_with_the_field_named(http: httpx2.Client) -> None:
    with ScriptedServer.from_steps(Step.reply("x")) as srv:
        response = post(http, srv, {"messages": [{"role": "robot", "content": "x"}]})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "messages.[0].role"
        not_json = http.post(f"{srv.base_url}/chat/completions", content=b"{nope")
        assert not_json.status_code == 400


def test_callable_script_sees_the_body_and_the_route(http: httpx2.Client) -> None:
    seen: list[tuple[str, str]] = []

    def script(body: dict[str, Any], route: str) -> Step:
        seen.append((body["messages"][-1]["content"], route))
        return Step.reply(f"echo: {body['messages'][-1]['content']}")

    with ScriptedServer(script) as srv:
        response = post(http, srv, {"messages": [{"role": "user", "content": "ping"}]})
        assert response.json()["choices"][0]["message"]["content"] == "echo: ping"
    assert seen == [("ping", "chat")]


def test_models_endpoint(http: httpx2.Client) -> None:
    with ScriptedServer() as srv:
        assert srv.base_url.endswith("/v1")
        body = http.get(f"{srv.base_url}/models").json()
        assert body["object"] == "list" and body["data"][0]["id"] == "scripted"


def test_stream_sends_ids_only_in_first_fragment_then_done(http: httpx2.Client) -> None:
    with ScriptedServer.from_steps(Step.call("get_weather", {"city": "Paris"}, id="call_X")) as srv:
        response = post(
            http, srv, {"messages": [USER], "stream": True, "stream_options": {"include_usage": True}}
        )
    lines = data_lines(response)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    fragments = [f for c in chunks if c["choices"] for f in c["choices"][0]["delta"].get("tool_calls", ())]
    assert fragments[0]["id"] == "call_X" and fragments[0]["function"]["name"] == "get_weather"
    assert len(fragments) > 2 and all("id" not in f and "name" not in f["function"] for f in fragments[1:])
    assert "".join(f["function"]["arguments"] for f in fragments) == '{"city": "Paris"}'
    assert chunks[-1]["choices"] == [] and "usage" in chunks[-1]


def test_stream_misbehaviours(http: httpx2.Client) -> None:
    steps = [
        Step.call("get_weather", {"city": "Paris"}, ids_only_first_fragment=False, empty_string_id=True),
        Step.call("get_weather", {"city": "Paris"}, cut_stream=True),
        Step.reply("x", malformed=True),
    ]
    with ScriptedServer(steps) as srv:
        repeated, cut, malformed = (post(http, srv, {"messages": [USER], "stream": True}) for _ in steps)

    later = [json.loads(x)["choices"][0]["delta"]["tool_calls"][0] for x in data_lines(repeated)[2:-2]]
    assert later and all(f["id"] == "" and f["function"]["name"] == "get_weather" for f in later)
    cut_lines = data_lines(cut)
    assert "[DONE]" not in cut_lines and all('"finish_reason": "' not in line for line in cut_lines)
    assert '"arguments": "{' in cut_lines[-1]
    with pytest.raises(ValueError):
        json.loads(data_lines(malformed)[0])


def test_step_errors_and_latency(http: httpx2.Client) -> None:
    steps = [
        Step.error(429, "Slow down.", code="rate_limit_exceeded"),
        Step(status=502, error_body="bad gateway"),
        Step.reply("late", latency=0.05),
    ]
    with ScriptedServer(steps) as srv:
        limited, gateway, late = (post(http, srv, {"messages": [USER]}) for _ in steps)
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert gateway.status_code == 502 and gateway.text == "bad gateway"
    assert late.json()["choices"][0]["message"]["content"] == "late"


def test_tool_call_as_text_and_text_and_call() -> None:
    steps = [
        Step.call("get_weather", {"city": "Paris"}, tool_call_as_text=True),
        Step.text_and_call("Checking.", "get_weather", {"city": "Rome"}),
    ]
    with ScriptedServer(steps) as srv, httpx2.Client() as http:
        as_text = post(http, srv, {"messages": [USER]}).json()["choices"][0]["message"]
        both = post(http, srv, {"messages": [USER]}).json()["choices"][0]
    assert as_text.get("tool_calls") is None
    assert json.loads(as_text["content"]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert both["message"]["content"] == "Checking." and both["finish_reason"] == "tool_calls"
    assert json.loads(both["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Rome"}


def test_official_sdk_reads_the_stream_and_the_completion() -> None:
    steps = [Step.text_and_call("Let me look.", "get_weather", {"city": "Paris"}), Step.reply("Sunny.")]
    with ScriptedServer(steps) as srv, openai.OpenAI(base_url=srv.base_url, api_key="test") as client:
        with client.chat.completions.stream(model="scripted", messages=[SDK_USER]) as stream:
            final = stream.get_final_completion()
        message = final.choices[0].message
        assert message.content == "Let me look."
        assert message.tool_calls is not None
        call = message.tool_calls[0]
        assert call.type == "function" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        reply = client.chat.completions.create(model="scripted", messages=[SDK_USER])
        assert reply.choices[0].message.content == "Sunny."


async def test_async_context_manager() -> None:
    async with ScriptedServer.from_steps(Step.reply("hi")) as srv, httpx2.AsyncClient() as client:
        response = await client.post(
            f"{srv.base_url}/chat/completions", json={"model": "m", "messages": [USER]}
        )
    assert response.json()["choices"][0]["message"]["content"] == "hi"


# --- the Responses route ---------------------------------------------------------------------------

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]
FUNCTION_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_A",
    "name": "get_weather",
    "arguments": '{"city":"Paris"}',
}


def post_responses(http: httpx2.Client, srv: ScriptedServer, body: dict[str, Any]) -> httpx2.Response:
    return http.post(f"{srv.base_url}/responses", json={"model": "scripted", **body})


def sse_events(response: httpx2.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) per event; fails on any data line that is not JSON."""
    events, name = [], ""
    for line in response.text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[len("data: ") :])))
    return events


def test_responses_call_carries_a_call_id_apart_from_its_item_id(http: httpx2.Client) -> None:
    steps = [Step.text_and_call("Checking.", "get_weather", {"city": "Paris"}, id="call_X")]
    with ScriptedServer(steps) as srv:
        body = post_responses(http, srv, {"input": "Weather in Paris?", "tools": RESPONSES_TOOLS}).json()
    assert srv.routes == ["responses"]
    assert body["object"] == "response" and body["status"] == "completed"
    message, call = body["output"]
    assert message["content"][0] == {"type": "output_text", "text": "Checking.", "annotations": []}
    assert call["call_id"] == "call_X" and call["id"].startswith("fc_") and call["id"] != "call_X"
    assert json.loads(call["arguments"]) == {"city": "Paris"}


def test_responses_stream_is_typed_events_ending_in_completed(http: httpx2.Client) -> None:
    steps = [
        Step.call("get_weather", {"city": "Paris"}),
        Step.call("get_weather", {"city": "Paris"}, arguments_only_in_done=True),
    ]
    with ScriptedServer(steps) as srv:
        plain, only_done = (post_responses(http, srv, {"input": "Weather?", "stream": True}) for _ in steps)
    events = sse_events(plain)
    assert "[DONE]" not in plain.text
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    kinds = [data["type"] for _, data in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.function_call_arguments.delta") > 1
    late = [data["type"] for _, data in sse_events(only_done)]
    assert "response.function_call_arguments.delta" not in late
    done = next(data for _, data in sse_events(only_done) if data["type"].endswith("arguments.done"))
    assert json.loads(done["arguments"]) == {"city": "Paris"}


def test_responses_stream_misbehaviours(http: httpx2.Client) -> None:
    steps = [
        Step.call("get_weather", {"city": "Paris"}, cut_stream=True),
        Step.call("get_weather", {"city": "Paris"}, stream_error="Engine overloaded."),
        Step.reply("hi", novel_events=True),
        Step.reply("x", malformed=True),
    ]
    with ScriptedServer(steps) as srv:
        cut, failed, novel, malformed = (
            post_responses(http, srv, {"input": "Weather?", "stream": True}) for _ in steps
        )
    cut_kinds = [data["type"] for _, data in sse_events(cut)]
    assert cut_kinds[-1] == "response.function_call_arguments.delta"
    assert not {"response.completed", "response.failed"} & set(cut_kinds)
    failed_events = [data for _, data in sse_events(failed)]
    assert failed_events[-2] == {
        "type": "error",
        "code": "server_error",
        "message": "Engine overloaded.",
        "param": None,
        "sequence_number": len(failed_events) - 2,
    }
    assert failed_events[-1]["type"] == "response.failed"
    assert failed_events[-1]["response"]["error"]["message"] == "Engine overloaded."
    novel_kinds = [data["type"] for _, data in sse_events(novel)]
    assert "response.novel_feature.delta" in novel_kinds and novel_kinds[-2] == "response.completed"
    with pytest.raises(ValueError):
        sse_events(malformed)


def test_responses_unanswered_or_orphan_call_ids_get_openais_400(http: httpx2.Client) -> None:
    user = {"role": "user", "content": "Weather in Paris?"}
    output = {"type": "function_call_output", "call_id": "call_Z", "output": "18C"}
    with ScriptedServer.from_steps(Step.reply("never sent")) as srv:
        missing = post_responses(
            http, srv, {"input": [user, FUNCTION_CALL, {"role": "user", "content": "and?"}]}
        )
        orphan = post_responses(http, srv, {"input": [user, output]})
        assert srv.remaining == 1
    assert missing.status_code == orphan.status_code == 400
    assert missing.json()["error"] == {
        "message": "No tool output found for function call call_A.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert (
        orphan.json()["error"]["message"]
        == "No tool call found for function call output with call_id call_Z."
    )
    assert orphan.json()["error"]["param"] == "input"


def test_previous_response_id_continues_the_stored_items(http: httpx2.Client) -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}, id="call_P"), Step.reply("18 degrees.")]
    with ScriptedServer(steps) as srv:
        first = post_responses(http, srv, {"input": "Weather in Paris?"}).json()
        output = {"type": "function_call_output", "call_id": "call_P", "output": "18C"}
        unknown = post_responses(http, srv, {"previous_response_id": "resp_nope", "input": [output]})
        # Without the stored call, the same output alone would be an orphan.
        second = post_responses(http, srv, {"previous_response_id": first["id"], "input": [output]})
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "previous_response_not_found"
    assert unknown.json()["error"]["message"] == "Previous response with id 'resp_nope' not found."
    assert second.status_code == 200 and second.json()["output"][0]["content"][0]["text"] == "18 degrees."
    assert [i.get("type", "message") for i in srv.stored[second.json()["id"]]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (404, {"detail": "Not Found"}),
        (405, {"detail": "Method Not Allowed"}),
        (400, {"error": {"message": "The Responses API is not supported by this server."}}),
    ],
)
def test_a_route_not_served_answers_like_a_server_without_it(
    http: httpx2.Client, status: int, expected: dict[str, Any]
) -> None:
    with ScriptedServer.from_steps(
        Step.reply("chat works"), serve_responses=False, unserved_status=status
    ) as srv:
        refused = post_responses(http, srv, {"input": "hi"})
        served = post(http, srv, {"messages": [USER]})
    assert refused.status_code == status
    body = refused.json()
    if "error" in body:
        body = {"error": {"message": body["error"]["message"]}}
    assert body == expected
    assert served.json()["choices"][0]["message"]["content"] == "chat works"
    assert srv.routes == ["responses", "chat"] and srv.remaining == 0
    with ScriptedServer.from_steps(Step.reply("x"), serve_chat=False) as srv:
        assert post(http, srv, {"messages": [USER]}).status_code == 404


def test_read_transcript_gives_one_view_of_both_routes(http: httpx2.Client) -> None:
    seen = []

    def script(body: dict[str, Any], route: str) -> Step:
        seen.append(ScriptedServer.read_transcript(body, route))
        return Step.reply("ok")

    chat_messages = [
        {"role": "system", "content": "Be brief."},
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL_A]},
        {"role": "tool", "tool_call_id": "call_A", "content": "18C"},
    ]
    items = [USER, FUNCTION_CALL, {"type": "function_call_output", "call_id": "call_A", "output": "18C"}]
    with ScriptedServer(script) as srv:
        post(http, srv, {"messages": chat_messages})
        post_responses(http, srv, {"instructions": "Be brief.", "input": items})
    assert seen[0] == seen[1] and len(seen[0]) == 4


def test_chat_stream_misbehaviours_beyond_ids(http: httpx2.Client) -> None:
    steps = [
        Step.call("get_weather", {"city": "Paris"}, arguments_only_in_done=True),
        Step.call("get_weather", {"city": "Paris"}, stream_error="Engine overloaded."),
        Step.reply("hi", novel_events=True),
    ]
    with ScriptedServer(steps, split=3) as srv:
        late, failed, novel = (post(http, srv, {"messages": [USER], "stream": True}) for _ in steps)
    chunks = [json.loads(x) for x in data_lines(late)[:-1]]
    fragments = [f for c in chunks if c["choices"] for f in c["choices"][0]["delta"].get("tool_calls", ())]
    assert [f["function"]["arguments"] for f in fragments] == ["", '{"city": "Paris"}']
    finish = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"])
    whole = chunks[finish - 1]["choices"][0]["delta"]["tool_calls"][0]
    assert whole == {"index": 0, "function": {"arguments": '{"city": "Paris"}'}}  # right before the end
    failed_lines = data_lines(failed)
    assert "[DONE]" not in failed_lines
    assert json.loads(failed_lines[-1])["error"]["message"] == "Engine overloaded."
    assert ": keep-alive" in novel.text
    assert any(json.loads(x).get("obfuscation") for x in data_lines(novel)[:-1])


def test_official_sdk_reads_the_responses_stream_and_response() -> None:
    steps = [Step.text_and_call("Let me look.", "get_weather", {"city": "Paris"}), Step.reply("Sunny.")]
    with ScriptedServer(steps) as srv, openai.OpenAI(base_url=srv.base_url, api_key="test") as client:
        with client.responses.stream(model="scripted", input="Weather in Paris?") as stream:
            final = stream.get_final_response()
        assert final.output_text == "Let me look."
        [call] = [item for item in final.output if item.type == "function_call"]
        assert call.call_id == "call_1_0" and call.id != call.call_id
        assert json.loads(call.arguments) == {"city": "Paris"}
        reply = client.responses.create(
            model="scripted",
            input=[
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
            ],
        )
        assert reply.output_text == "Sunny."
