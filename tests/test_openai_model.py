from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Sequence

import httpx2
import pytest

from toolwire.exceptions import (
    ConfigError,
    ModelConnectionError,
    ModelHTTPError,
    ModelResponseError,
    RouteUnsupportedError,
)
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
from toolwire.models.base import Model, RequestOptions, TextDelta, TurnComplete
from toolwire.models.openai import OpenAIModel, clear_route_memory
from toolwire.testing.server import ScriptedServer, Step

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
ASK: list[Message] = [SystemMessage(content="Be brief."), UserMessage(content="Weather in Paris?")]
NO_OPTIONS = RequestOptions()


@pytest.fixture(autouse=True)
def _fresh_route_memory() -> None:
    clear_route_memory()


@pytest.fixture(params=[False, True], ids=["request", "stream"])
def streaming(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


async def ask(
    model: OpenAIModel,
    streaming: bool,
    transcript: Sequence[Message] = ASK,
    tools: Sequence[ToolSpec] = (WEATHER,),
    options: RequestOptions = NO_OPTIONS,
) -> tuple[Turn, list[str]]:
    """One turn, the way the runner asks for it; returns the turn and the streamed text pieces."""
    if not streaming:
        return await model.request(transcript, tools, options), []
    events = [e async for e in model.stream(transcript, tools, options)]
    assert sum(isinstance(e, TurnComplete) for e in events) == 1
    assert isinstance(events[-1], TurnComplete)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    return events[-1].turn, deltas


def model_for(srv: ScriptedServer, name: str = "gpt-test", **kwargs: object) -> OpenAIModel:
    return OpenAIModel(name, base_url=srv.base_url, api_key="sk-test", **kwargs)  # type: ignore[arg-type]


async def test_text_answer_with_usage(streaming: bool) -> None:
    step = Step.reply("It is sunny in Paris.", usage=Usage(input_tokens=21, output_tokens=6))
    async with ScriptedServer.from_steps(step) as srv, model_for(srv) as model:
        turn, deltas = await ask(model, streaming)

        assert isinstance(model, Model)
        assert turn.message == AssistantMessage(text="It is sunny in Paris.")
        assert turn.usage == Usage(input_tokens=21, output_tokens=6, requests=1)
        assert turn.route == "chat"
        if streaming:
            assert len(deltas) > 1 and "".join(deltas) == "It is sunny in Paris."
            assert srv.requests[0]["stream_options"] == {"include_usage": True}
        assert srv.requests[0]["tools"][0]["function"]["name"] == "get_weather"
        assert srv.requests[0]["model"] == "gpt-test"


async def test_full_tool_round_trip_passes_the_transcript_check(streaming: bool) -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}), Step.reply("18 degrees and sunny.")]
    async with ScriptedServer(steps) as srv, model_for(srv) as model:
        first, _ = await ask(model, streaming)
        [call] = first.message.tool_calls
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
        assert call.id == "call_1_0"

        transcript = [
            *ASK,
            first.message,
            ToolResult(call_id=call.id, name=call.name, content='{"temp_c": 18}'),
        ]
        final, _ = await ask(model, streaming, transcript, tools=())

        assert final.message.text == "18 degrees and sunny."
        sent = srv.requests[1]
        assert "tools" not in sent
        assert sent["messages"][2]["tool_calls"][0] == {
            "id": "call_1_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": call.arguments},
        }
        assert sent["messages"][3] == {
            "role": "tool",
            "tool_call_id": "call_1_0",
            "content": '{"temp_c": 18}',
        }
        srv.assert_complete()


async def test_stream_reassembles_calls_from_awkward_fragments() -> None:
    steps = [
        Step(
            tool_calls=[
                ("get_weather", {"city": "Paris"}, "call_P"),
                ("get_weather", {"city": "Rome"}, "call_R"),
            ]
        ),
        Step.call("get_weather", {"city": "Oslo"}, id="call_O", empty_string_id=True),
        Step.call("get_weather", {"city": "Oslo"}, id=""),
        Step.call("get_weather", {"city": "Oslo"}, ids_only_first_fragment=False),
    ]
    async with ScriptedServer(steps, split=2) as srv, model_for(srv) as model:
        two, _ = await ask(model, True)
        empty_later, _ = await ask(model, True)
        never_an_id, _ = await ask(model, True)
        repeated, _ = await ask(model, True)

    assert [(c.id, json.loads(c.arguments)["city"]) for c in two.message.tool_calls] == [
        ("call_P", "Paris"),
        ("call_R", "Rome"),
    ]
    assert empty_later.message.tool_calls[0].id == "call_O"
    assert never_an_id.message.tool_calls[0].id == "call_0"
    assert repeated.message.tool_calls[0].name == "get_weather"
    assert json.loads(repeated.message.tool_calls[0].arguments) == {"city": "Oslo"}


async def test_options_are_passed_through_when_set(server: ScriptedServer) -> None:
    server.enqueue(Step.reply("a"), Step.reply("b"))
    choice = {"type": "function", "function": {"name": "get_weather"}}
    async with model_for(server) as model:
        await model.request(ASK, [WEATHER], RequestOptions(tool_choice=choice, parallel_tool_calls=False))
        await model.request(ASK, [WEATHER], NO_OPTIONS)
    assert server.requests[0]["tool_choice"] == choice and server.requests[0]["parallel_tool_calls"] is False
    assert "tool_choice" not in server.requests[1] and "parallel_tool_calls" not in server.requests[1]


async def test_refused_tools_fall_back_to_the_json_plan(streaming: bool) -> None:
    steps = [
        Step.plan("get_weather", {"city": "Paris"}, reply="Let me check."),
        Step.reply("It is 18 degrees in Paris."),
        Step.plan("none", reply="Hello again!"),
    ]
    async with ScriptedServer(steps, reject_tools=True) as srv, model_for(srv, "tiny-model") as model:
        turn, deltas = await ask(model, streaming)

        assert turn.route == "jsonplan"
        assert turn.message.tool_calls == (
            ToolCall(id="plan_1", name="get_weather", arguments='{"city": "Paris"}'),
        )
        assert turn.message.text == "Let me check."
        assert model.route == "jsonplan"
        refused, retried = srv.requests
        assert "tools" in refused and "tools" not in retried
        assert retried["messages"][0]["role"] == "system"
        assert retried["messages"][0]["content"].startswith("Be brief.\n\n")
        assert "- get_weather: Current weather for a city." in retried["messages"][0]["content"]
        if streaming:
            assert deltas == ["Let me check."]  # the plan's JSON never reaches the user

        [call] = turn.message.tool_calls
        transcript = [*ASK, turn.message, ToolResult(call_id=call.id, name=call.name, content="18C")]
        final, _ = await ask(model, streaming, transcript, tools=())
        assert final.message.text == "It is 18 degrees in Paris." and final.route == "jsonplan"
        summary_request = srv.requests[2]["messages"]
        assert summary_request[-1] == {"role": "user", "content": "Result of get_weather: 18C"}
        assert json.loads(summary_request[-2]["content"])["action"]["name"] == "get_weather"

        # Remembered: the next request goes straight to the plan, without a refused attempt.
        again, _ = await ask(model, streaming, [UserMessage(content="Hi")])
        assert again.message == AssistantMessage(text="Hello again!")
        assert len(srv.requests) == 4 and "tools" not in srv.requests[3]
        srv.assert_complete()


async def test_configured_json_plan_route_reads_prose_and_plans_in_any_wrapping(streaming: bool) -> None:
    steps = [
        Step.reply(
            'Sure:\n```json\n{"action": {"name": "get_weather", "args": {"city": "Rome"}}, "reply": ""}\n```'
        ),
        Step.reply("I can only help with the weather."),
        Step.reply('{"action": {"name": "none", "args": {}}, "reply": "All done: 18 degrees."}'),
    ]
    async with ScriptedServer(steps) as srv, model_for(srv, route="jsonplan") as model:
        fenced, _ = await ask(model, streaming)
        prose, prose_deltas = await ask(model, streaming)
        summary, summary_deltas = await ask(model, streaming, tools=())

    assert fenced.message.tool_calls == (
        ToolCall(id="plan_1", name="get_weather", arguments='{"city": "Rome"}'),
    )
    assert fenced.message.text is None and fenced.route == "jsonplan"
    assert prose.message == AssistantMessage(text="I can only help with the weather.")
    assert summary.message == AssistantMessage(text="All done: 18 degrees.")
    if streaming:
        assert "".join(prose_deltas) == "I can only help with the weather."
        assert summary_deltas == ["All done: 18 degrees."]
    assert all("tools" not in r for r in srv.requests)


async def test_tool_call_written_as_text_becomes_a_real_call(streaming: bool) -> None:
    steps = [
        Step.call("get_weather", {"city": "Paris"}, tool_call_as_text=True),
        Step.reply('{"name": "get_weather", "arguments": {"city": "Paris"}}'),
    ]
    async with ScriptedServer(steps) as srv, model_for(srv) as model:
        turn, deltas = await ask(model, streaming)
        # Without tools offered, the same text is just text.
        plain, plain_deltas = await ask(model, streaming, tools=())

    assert turn.route == "chat" and turn.finish_reason == "text_tool_call"
    assert turn.message.text is None
    [call] = turn.message.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert deltas == []
    assert plain.message.tool_calls == () and plain.message.text is not None
    if streaming:
        assert "".join(plain_deltas) == plain.message.text


async def test_http_errors_keep_status_and_body(server: ScriptedServer) -> None:
    server.enqueue(
        Step.error(401, "Incorrect API key provided."), Step.error(503, "Overloaded.", code="overloaded")
    )
    async with model_for(server) as model:
        with pytest.raises(ModelHTTPError) as unauthorized:
            await model.request(ASK, [WEATHER], NO_OPTIONS)
        with pytest.raises(ModelHTTPError) as overloaded:
            [e async for e in model.stream(ASK, [WEATHER], NO_OPTIONS)]
    assert unauthorized.value.status_code == 401
    assert "Incorrect API key provided." in unauthorized.value.body
    assert "TOOLWIRE_API_KEY" in str(unauthorized.value)
    assert overloaded.value.status_code == 503 and "overloaded" in overloaded.value.body


async def test_wrong_base_url_path_is_a_route_error(server: ScriptedServer) -> None:
    model = OpenAIModel("m", base_url=server.base_url.removesuffix("/v1") + "/api")
    async with model:
        with pytest.raises(RouteUnsupportedError, match="usually ends in /v1") as info:
            await model.request(ASK, (), NO_OPTIONS)
    assert info.value.status_code == 404


async def test_cut_off_and_malformed_answers_raise(streaming: bool) -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}, cut_stream=True), Step.reply("x", malformed=True)]
    async with ScriptedServer(steps) as srv, model_for(srv) as model:
        with pytest.raises(ModelResponseError, match="cut off" if streaming else "JSON object"):
            await ask(model, streaming)
        with pytest.raises(ModelResponseError, match="JSON object"):
            await ask(model, streaming)


async def test_connection_refused_is_one_sentence() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before use: nothing listens there
    async with OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1") as model:
        for attempt in (model.request(ASK, (), NO_OPTIONS), _drain(model)):
            with pytest.raises(ModelConnectionError) as info:
                await attempt
            message = str(info.value)
            assert message.startswith(
                f"Could not reach the model endpoint at http://127.0.0.1:{port}/v1/chat/completions"
            )
            assert "check TOOLWIRE_BASE_URL" in message
            assert message.endswith(".") and message.count(". ") == 0


async def _drain(model: OpenAIModel) -> None:
    async for _ in model.stream(ASK, (), NO_OPTIONS):
        pass


async def test_given_client_is_shared_and_left_open(server: ScriptedServer) -> None:
    server.enqueue(Step.reply("a"), Step.reply("b"))
    async with httpx2.AsyncClient() as client:
        first = OpenAIModel("m", base_url=server.base_url, client=client)
        second = OpenAIModel("m", base_url=server.base_url, client=client)
        await first.request(ASK, (), NO_OPTIONS)
        await first.aclose()
        assert not client.is_closed
        assert (await second.request(ASK, (), NO_OPTIONS)).message.text == "b"


async def test_raw_arguments_reach_the_turn_unchanged(streaming: bool) -> None:
    async with (
        ScriptedServer.from_steps(Step.call("get_weather", '{"city": "Par')) as srv,
        model_for(srv) as model,
    ):
        turn, _ = await ask(model, streaming)
    assert turn.message.tool_calls[0].arguments == '{"city": "Par'


async def test_api_key_and_extra_headers_are_sent(server: ScriptedServer) -> None:
    server.enqueue(Step.reply("ok"))
    model = OpenAIModel("m", base_url=server.base_url, api_key="sk-secret", headers={"X-Tenant": "acme"})
    async with model:
        await model.request(ASK, (), NO_OPTIONS)
    assert server.headers[0]["authorization"] == "Bearer sk-secret"
    assert server.headers[0]["x-tenant"] == "acme"
    assert server.headers[0]["content-type"] == "application/json"


async def test_slow_endpoint_times_out_as_a_connection_error(server: ScriptedServer) -> None:
    server.enqueue(Step.reply("too late", latency=0.5))
    async with OpenAIModel("m", base_url=server.base_url, timeout=0.1) as model:
        with pytest.raises(ModelConnectionError, match=r"did not answer within 0\.1 s; raise the timeout"):
            await model.request(ASK, (), NO_OPTIONS)


def test_configuration_mistakes_are_reported_early() -> None:
    with pytest.raises(ConfigError, match="TOOLWIRE_BASE_URL"):
        OpenAIModel("m", base_url="localhost:8000/v1")
    with pytest.raises(ConfigError, match="'chat' or 'jsonplan'"):
        OpenAIModel("m", base_url="http://x/v1", route="grpc")  # type: ignore[arg-type]
    assert OpenAIModel("m", base_url="http://x/v1/").name == "m"


def test_unknown_route_message_names_every_route() -> None:
    with pytest.raises(ConfigError, match="use 'auto', 'responses', 'chat' or 'jsonplan'"):
        OpenAIModel("m", base_url="http://x/v1", route="grpc")  # type: ignore[arg-type]
    assert OpenAIModel("m", base_url="http://x/v1", route="responses").route == "responses"
    assert OpenAIModel("m", base_url="http://x/v1", route="auto").route == "chat"


async def test_chat_stream_ignores_what_it_does_not_know_and_waits_for_whole_arguments() -> None:
    steps = [
        Step.text_and_call("On it.", "get_weather", {"city": "Paris"}, novel_events=True),
        Step.call("get_weather", {"city": "Rome"}, arguments_only_in_done=True),
    ]
    async with ScriptedServer(steps, split=2) as srv, model_for(srv) as model:
        novel, deltas = await ask(model, True)
        late, _ = await ask(model, True)
    assert "".join(deltas) == "On it."
    assert json.loads(novel.message.tool_calls[0].arguments) == {"city": "Paris"}
    assert json.loads(late.message.tool_calls[0].arguments) == {"city": "Rome"}


async def test_chat_error_in_place_of_a_turn_is_a_clear_error(streaming: bool) -> None:
    step = Step.call("get_weather", {"city": "Paris"}, stream_error="Engine overloaded.")
    async with ScriptedServer.from_steps(step) as srv, model_for(srv) as model:
        with pytest.raises(ModelResponseError, match="reported an error: Engine overloaded.; check its logs"):
            await ask(model, streaming)


async def test_tools_refused_on_responses_fall_back_to_the_json_plan_on_that_wire(streaming: bool) -> None:
    steps = [Step.plan("get_weather", {"city": "Paris"})]
    async with (
        ScriptedServer(steps, reject_tools=True) as srv,
        model_for(srv, "tiny-model", route="responses") as model,
    ):
        turn, _ = await ask(model, streaming)
    assert turn.route == "jsonplan" and model.route == "jsonplan"
    assert turn.message.tool_calls == (
        ToolCall(id="plan_1", name="get_weather", arguments='{"city": "Paris"}'),
    )
    assert srv.routes == ["responses", "responses"]
    assert "tools" in srv.requests[0] and "tools" not in srv.requests[1]
    assert "- get_weather: Current weather for a city." in srv.requests[1]["instructions"]


async def test_stateful_has_no_effect_on_the_chat_wire() -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}), Step.reply("18 degrees.")]
    async with ScriptedServer(steps) as srv, model_for(srv, stateful=True) as model:
        first, _ = await ask(model, False)
        [call] = first.message.tool_calls
        await ask(
            model, False, [*ASK, first.message, ToolResult(call_id=call.id, name=call.name, content="18C")]
        )
    assert all("previous_response_id" not in r for r in srv.requests)
    assert len(srv.requests[1]["messages"]) == 4


async def test_bad_chat_answers_end_cleanly_and_never_half_run_a_call() -> None:
    from toolwire.context import Context
    from toolwire.runner import RunComplete, Runner
    from toolwire.tools import Tool

    executed: list[dict[str, object]] = []

    async def handler(args: dict[str, object], ctx: Context) -> str:
        executed.append(args)
        return "18C"

    weather = Tool(name="get_weather", description="", parameters=WEATHER.parameters, handler=handler)
    steps = [Step.call("get_weather", {"city": "Paris"}, cut_stream=True), Step(), Step()]
    async with ScriptedServer(steps) as srv, model_for(srv) as model:
        runner = Runner(model, [weather])
        with pytest.raises(ModelResponseError, match="cut off"):
            [e async for e in runner.stream("Weather?")]
        streamed = [e async for e in runner.stream("Weather?")]
        whole = await runner.run("Weather?")
    assert executed == []
    assert isinstance(streamed[-1], RunComplete)
    for result in (streamed[-1].result, whole):
        assert result.answer == "" and result.calls == () and result.rounds == 1


@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_streamed_requests_reuse_one_connection(route: str) -> None:
    # A stream left unread after [DONE] closes its connection: every request would reconnect.
    with ScriptedServer([Step.reply("one"), Step.reply("two"), Step.reply("three")]) as server:
        async with OpenAIModel("m", base_url=server.base_url, route=route) as model:  # type: ignore[arg-type]
            for _ in range(3):
                events = [e async for e in model.stream([UserMessage(content="hi")], [], RequestOptions())]
                assert isinstance(events[-1], TurnComplete)
        assert len(server.clients) == 3
        assert len(set(server.clients)) == 1
