"""The Responses route of `OpenAIModel`, end to end against the scripted server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from toolwire.context import Context
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
from toolwire.models.base import RequestOptions, TextDelta, TurnComplete
from toolwire.models.openai import OpenAIModel, clear_route_memory
from toolwire.runner import CallProposed, RunComplete, Runner
from toolwire.testing.server import ScriptedServer, Step
from toolwire.tools import Tool

STATUS = ToolSpec(
    name="get_delivery_status",
    description="Return the current delivery status for one order.",
    parameters={
        "type": "object",
        "properties": {"order_id": {"type": "string", "pattern": "^ORDER-[0-9]{4}$"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
    strict=True,
)
ASK: list[Message] = [SystemMessage(content="Be brief."), UserMessage(content="Where is ORDER-1001?")]
NO_OPTIONS = RequestOptions()


@pytest.fixture(autouse=True)
def _fresh_route_memory() -> None:
    clear_route_memory()


@pytest.fixture(params=[False, True], ids=["request", "stream"])
def streaming(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def responses_model(srv: ScriptedServer, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("gpt-test", base_url=srv.base_url, route="responses", **kwargs)


async def ask(
    model: OpenAIModel,
    streaming: bool,
    transcript: Sequence[Message] = ASK,
    tools: Sequence[ToolSpec] = (STATUS,),
) -> tuple[Turn, list[str]]:
    if not streaming:
        return await model.request(transcript, tools, NO_OPTIONS), []
    events = [e async for e in model.stream(transcript, tools, NO_OPTIONS)]
    assert isinstance(events[-1], TurnComplete)
    assert sum(isinstance(e, TurnComplete) for e in events) == 1
    return events[-1].turn, [e.text for e in events if isinstance(e, TextDelta)]


def delivery_tool(executed: list[str]) -> Tool:
    async def handler(args: dict[str, Any], ctx: Context) -> dict[str, str]:
        executed.append(args["order_id"])
        return {"order_id": args["order_id"], "status": "in transit"}

    return Tool(
        name=STATUS.name,
        description=STATUS.description,
        parameters=STATUS.parameters,
        handler=handler,
        strict=True,
    )


async def test_text_answer_uses_the_responses_wire(streaming: bool) -> None:
    step = Step.reply("It is on its way.", usage=Usage(input_tokens=30, output_tokens=5))
    async with ScriptedServer.from_steps(step) as srv, responses_model(srv) as model:
        turn, deltas = await ask(model, streaming)

    assert turn.message == AssistantMessage(text="It is on its way.")
    assert turn.route == "responses" and turn.finish_reason == "stop"
    assert turn.usage == Usage(input_tokens=30, output_tokens=5, requests=1)
    if streaming:
        assert len(deltas) > 1 and "".join(deltas) == "It is on its way."
    [sent] = srv.requests
    assert srv.routes == ["responses"]
    assert sent["instructions"] == "Be brief."
    assert sent["input"] == [{"type": "message", "role": "user", "content": "Where is ORDER-1001?"}]
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "get_delivery_status",
            "description": STATUS.description,
            "parameters": STATUS.parameters,
            "strict": True,
        }
    ]
    assert "previous_response_id" not in sent


async def test_round_trip_joins_the_result_by_call_id_and_resends_everything(streaming: bool) -> None:
    steps = [Step.call("get_delivery_status", {"order_id": "ORDER-1001"}), Step.reply("In transit.")]
    async with ScriptedServer(steps) as srv, responses_model(srv) as model:
        first, _ = await ask(model, streaming)
        [call] = first.message.tool_calls
        [item] = srv.stored["resp_scripted_1"][1:]
        # The correlation key is the call_id; the item id is something else.
        assert call.id == item["call_id"] == "call_1_0"
        assert item["id"].startswith("fc_") and item["id"] != call.id
        assert first.finish_reason == "tool_calls"

        result = ToolResult(call_id=call.id, name=call.name, content='{"status": "in transit"}')
        final, _ = await ask(model, streaming, [*ASK, first.message, result], tools=())

    assert final.message.text == "In transit."
    continued = srv.requests[1]
    assert "previous_response_id" not in continued and "tools" not in continued
    assert continued["input"][1:] == [
        {
            "type": "function_call",
            "id": item["id"],
            "call_id": "call_1_0",
            "name": "get_delivery_status",
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": "call_1_0", "output": '{"status": "in transit"}'},
    ]
    srv.assert_complete()


async def test_stateful_model_continues_with_previous_response_id(streaming: bool) -> None:
    steps = [
        Step.call("get_delivery_status", {"order_id": "ORDER-1001"}),
        Step.reply("In transit."),
        Step.reply("Hello."),
    ]
    async with ScriptedServer(steps) as srv, responses_model(srv, stateful=True) as model:
        first, _ = await ask(model, streaming)
        [call] = first.message.tool_calls
        result = ToolResult(call_id=call.id, name=call.name, content="in transit")
        final, _ = await ask(model, streaming, [*ASK, first.message, result], tools=())
        fresh, _ = await ask(model, streaming, [UserMessage(content="Hi")])

    assert final.message.text == "In transit." and fresh.message.text == "Hello."
    continued = srv.requests[1]
    assert continued["previous_response_id"] == "resp_scripted_1"
    # Only what is new since the stored response; the instructions are not inherited, so resent.
    assert continued["input"] == [
        {"type": "function_call_output", "call_id": call.id, "output": "in transit"}
    ]
    assert continued["instructions"] == "Be brief."
    assert "previous_response_id" not in srv.requests[2]


async def test_stateful_model_resends_everything_when_the_stored_response_is_gone(streaming: bool) -> None:
    steps = [Step.call("get_delivery_status", {"order_id": "ORDER-1001"}), Step.reply("In transit.")]
    async with ScriptedServer(steps) as srv, responses_model(srv, stateful=True) as model:
        first, _ = await ask(model, streaming)
        srv.stored.clear()  # the endpoint forgot it (expired, or stored elsewhere)
        [call] = first.message.tool_calls
        result = ToolResult(call_id=call.id, name=call.name, content="in transit")
        final, _ = await ask(model, streaming, [*ASK, first.message, result], tools=())

    assert final.message.text == "In transit."
    refused, resent = srv.requests[1:]
    assert refused["previous_response_id"] == "resp_scripted_1"
    assert "previous_response_id" not in resent and len(resent["input"]) == 3


async def test_a_turn_changed_after_receipt_is_continued_statelessly() -> None:
    steps = [Step.call("get_delivery_status", {"order_id": "ORDER-1001"}), Step.reply("Done.")]
    async with ScriptedServer(steps) as srv, responses_model(srv, stateful=True) as model:
        first, _ = await ask(model, False)
        changed = AssistantMessage(text="Let me check.", tool_calls=first.message.tool_calls)
        result = ToolResult(call_id="call_1_0", name=STATUS.name, content="in transit")
        await ask(model, False, [*ASK, changed, result], tools=())
    assert "previous_response_id" not in srv.requests[1]


async def test_arguments_sent_only_at_the_end_still_make_the_whole_call() -> None:
    step = Step.call("get_delivery_status", {"order_id": "ORDER-1001"}, arguments_only_in_done=True)
    async with ScriptedServer.from_steps(step, split=2) as srv, responses_model(srv) as model:
        turn, _ = await ask(model, True)
    [call] = turn.message.tool_calls
    assert (call.id, call.name) == ("call_1_0", "get_delivery_status")
    assert json.loads(call.arguments) == {"order_id": "ORDER-1001"}


async def test_parallel_calls_keep_their_own_call_ids() -> None:
    calls = [
        ("get_delivery_status", {"order_id": "ORDER-1001"}, "call_A"),
        ("get_delivery_status", {"order_id": "ORDER-2002"}, "call_B"),
    ]
    step = Step.text_and_call("Checking both.", *calls[0][:2])
    step.tool_calls = calls
    async with ScriptedServer.from_steps(step, split=3) as srv, responses_model(srv) as model:
        turn, deltas = await ask(model, True)
    assert "".join(deltas) == "Checking both."
    assert [(c.id, json.loads(c.arguments)["order_id"]) for c in turn.message.tool_calls] == [
        ("call_A", "ORDER-1001"),
        ("call_B", "ORDER-2002"),
    ]


async def test_failed_response_and_error_event_are_clear_errors(streaming: bool) -> None:
    step = Step.call("get_delivery_status", {"order_id": "ORDER-1001"}, stream_error="The model crashed.")
    async with ScriptedServer.from_steps(step) as srv, responses_model(srv) as model:
        with pytest.raises(ModelHTTPError) as info:
            await ask(model, streaming)
    assert info.value.status_code == 500
    assert "server_error: The model crashed" in str(info.value)
    assert str(info.value).endswith("retry the request or check the endpoint.")


async def test_stream_cut_mid_arguments_or_malformed_is_an_error_and_nothing_runs() -> None:
    executed: list[str] = []
    steps = [
        Step.call("get_delivery_status", {"order_id": "ORDER-1001"}, cut_stream=True),
        Step.reply("x", malformed=True),
    ]
    async with ScriptedServer(steps) as srv, responses_model(srv) as model:
        runner = Runner(model, [delivery_tool(executed)])
        with pytest.raises(ModelResponseError, match="cut off before its final event"):
            [e async for e in runner.stream("Where is ORDER-1001?")]
        with pytest.raises(ModelResponseError, match="not a JSON object"):
            [e async for e in runner.stream("Where is ORDER-1001?")]
    assert executed == []


async def test_non_streaming_malformed_body_is_an_error() -> None:
    async with (
        ScriptedServer.from_steps(Step.reply("x", malformed=True)) as srv,
        responses_model(srv) as model,
    ):
        with pytest.raises(ModelResponseError, match="something other than a JSON object"):
            await ask(model, False)


async def test_event_types_never_seen_before_are_ignored() -> None:
    step = Step.text_and_call("On it.", "get_delivery_status", {"order_id": "ORDER-1001"}, novel_events=True)
    async with ScriptedServer.from_steps(step) as srv, responses_model(srv) as model:
        turn, deltas = await ask(model, True)
    assert "".join(deltas) == "On it."
    [call] = turn.message.tool_calls
    assert call.id == "call_1_0" and json.loads(call.arguments) == {"order_id": "ORDER-1001"}


async def test_response_with_neither_text_nor_calls_is_a_clean_empty_answer(streaming: bool) -> None:
    async with ScriptedServer.from_steps(Step()) as srv, responses_model(srv) as model:
        runner = Runner(model, [delivery_tool([])])
        if streaming:
            events = [e async for e in runner.stream("Hello?")]
            assert isinstance(events[-1], RunComplete)
            result = events[-1].result
        else:
            result = await runner.run("Hello?")
    assert result.answer == "" and result.calls == () and result.rounds == 1
    assert result.route == "responses"


async def test_call_without_call_id_is_refused_not_guessed(streaming: bool) -> None:
    step = Step.call("get_delivery_status", {"order_id": "ORDER-1001"}, empty_string_id=True)
    async with ScriptedServer.from_steps(step) as srv, responses_model(srv) as model:
        with pytest.raises(ModelResponseError, match="without a call_id"):
            await ask(model, streaming)


async def test_unanswered_call_id_is_rejected_with_openais_message() -> None:
    async with ScriptedServer.from_steps(Step.reply("never")) as srv, responses_model(srv) as model:
        unanswered = ToolCall(id="call_9", name=STATUS.name, arguments='{"order_id": "ORDER-1001"}')
        call_turn = AssistantMessage(tool_calls=(unanswered,))
        with pytest.raises(ModelHTTPError) as info:
            await ask(model, False, [*ASK, call_turn, UserMessage(content="and?")])
    assert info.value.status_code == 400
    assert "No tool output found for function call call_9." in str(info.value)
    assert srv.remaining == 1


async def test_runner_on_responses_runs_the_tool_and_answers(streaming: bool) -> None:
    executed: list[str] = []
    steps = [
        Step.text_and_call("Let me look.", "get_delivery_status", {"order_id": "ORDER-1001"}),
        Step.reply("ORDER-1001 is in transit."),
    ]
    async with ScriptedServer(steps, split=4) as srv, responses_model(srv) as model:
        runner = Runner(model, [delivery_tool(executed)])
        if streaming:
            events = [e async for e in runner.stream("Where is ORDER-1001?")]
            proposed = [e.call for e in events if isinstance(e, CallProposed)]
            assert [c.id for c in proposed] == ["call_1_0"]
            assert isinstance(events[-1], RunComplete)
            result = events[-1].result
        else:
            result = await runner.run("Where is ORDER-1001?")
    assert executed == ["ORDER-1001"]
    assert result.answer == "ORDER-1001 is in transit." and result.route == "responses"
    [trace] = result.calls
    assert (trace.call_id, trace.outcome) == ("call_1_0", "ok")
    outputs = [i for i in srv.requests[1]["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_1_0"]
    assert json.loads(outputs[0]["output"]) == {"order_id": "ORDER-1001", "status": "in transit"}
