"""Real OpenAI clients against the gateway on 127.0.0.1: the `openai` SDK and the OpenAI Agents SDK.

Each test runs the service with uvicorn on a port of its own; in the upstream mode it forwards to
a scripted OpenAI-compatible server, in the `toolwire` mode a scripted model runs the server's tool
loop. The client code is what an application writes, unchanged apart from `base_url`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from service_support import BOOK, add_user, server_thread, sqlite_url
from toolwire.messages import ToolResult, UserMessage
from toolwire.models.base import Model
from toolwire.models.openai import clear_route_memory
from toolwire.service import create_app
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest, call, reply
from toolwire.testing.server import ScriptedServer, Step

UPSTREAM = "up-model"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER}
ANSWER = "It is sunny in Paris."


@pytest.fixture(autouse=True)
def fresh_routes() -> Iterator[None]:
    # Route switches are remembered per endpoint; a port used again must not inherit them.
    clear_route_memory()
    yield
    clear_route_memory()


def weather(city: str) -> str:
    """The client's own tool: it runs in the client, never in the gateway."""
    return json.dumps({"city": city, "sky": "sunny"})


def bookkeeper(request: ModelRequest) -> Any:
    """Books lunch when asked with tools, then reports the stored item."""
    last = request.transcript[-1]
    if isinstance(last, ToolResult):
        item = json.loads(last.content)["item"]
        return f"Booked {item['title']} for {item['amount']:.2f}."
    if isinstance(last, UserMessage) and last.content.startswith("Book") and request.tools:
        return reply(None, call("create_item", BOOK))
    return "Nothing to book."


@asynccontextmanager
async def gateway(
    tmp_path: Path, upstream: ScriptedServer | None = None, model: Model | None = None, **settings: Any
) -> AsyncIterator[tuple[AsyncOpenAI, str]]:
    """The service on a real port, and an `AsyncOpenAI` client pointed at it; also the user's id."""
    url = sqlite_url(tmp_path)
    user_id, key = await add_user(url, "alice", tenant="acme")
    config = Settings(
        database_url=url, base_url=upstream.base_url if upstream else None, model=UPSTREAM, **settings
    )
    with server_thread(create_app(config, model=model or FunctionModel(bookkeeper))) as server:
        async with AsyncOpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0) as client:
            yield client, user_id


async def chat_turn(client: AsyncOpenAI, model: str, messages: list[Any], *, stream: bool) -> Any:
    """One assistant message, asked for whole or through the SDK's streaming helper."""
    tools: Any = [CHAT_TOOL] if model == UPSTREAM else []
    extra: Any = {"tools": tools} if tools else {}
    if not stream:
        completion = await client.chat.completions.create(model=model, messages=messages, **extra)
        return completion.choices[0].message
    async with client.chat.completions.stream(model=model, messages=messages, **extra) as events:
        kinds = [event.type async for event in events]
        completion = await events.get_final_completion()
    if completion.choices[0].message.content:
        assert kinds.count("content.delta") > 1  # the text came in pieces, as it was produced
    return completion.choices[0].message


async def responses_turn(client: AsyncOpenAI, model: str, input: list[Any] | str, *, stream: bool) -> Any:
    """One response, asked for whole or through the SDK's streaming helper."""
    extra: Any = {"tools": [RESPONSES_TOOL]} if model == UPSTREAM else {}
    if not stream:
        return await client.responses.create(model=model, input=input, **extra)
    async with client.responses.stream(model=model, input=input, **extra) as events:
        kinds = [event.type async for event in events]
        response = await events.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    return response


async def chat_tool_loop(client: AsyncOpenAI, *, stream: bool) -> str:
    """The client side of a two-round loop on Chat Completions: run the proposed call, send its result."""
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = await chat_turn(client, UPSTREAM, messages, stream=stream)
    [proposed] = first.tool_calls
    assert proposed.function.name == "get_weather"
    messages.append(first)
    result = weather(**json.loads(proposed.function.arguments))
    messages.append({"role": "tool", "tool_call_id": proposed.id, "content": result})
    second = await chat_turn(client, UPSTREAM, messages, stream=stream)
    assert not second.tool_calls
    return str(second.content)


async def responses_tool_loop(client: AsyncOpenAI, *, stream: bool) -> str:
    """The client side of a two-round loop on Responses: run the function_call, send its output."""
    input: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = await responses_turn(client, UPSTREAM, input, stream=stream)
    [proposed] = [item for item in first.output if item.type == "function_call"]
    assert proposed.name == "get_weather"
    input += first.output
    result = weather(**json.loads(proposed.arguments))
    input.append({"type": "function_call_output", "call_id": proposed.call_id, "output": result})
    second = await responses_turn(client, UPSTREAM, input, stream=stream)
    assert not [item for item in second.output if item.type == "function_call"]
    return str(second.output_text)


def sent_result(upstream: ScriptedServer) -> tuple[str, str]:
    """The call id and the result the upstream received in the second round, on whichever route."""
    [*_, result] = ScriptedServer.read_transcript(upstream.requests[-1], upstream.routes[-1])
    assert isinstance(result, ToolResult)
    return result.call_id, result.content


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_the_openai_sdk_runs_its_own_tools_through_an_upstream_model(
    tmp_path: Path, wire: str, stream: bool
) -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}, id="call_paris"), Step.reply(ANSWER)]
    async with ScriptedServer(steps) as upstream, gateway(tmp_path, upstream, route=wire) as (client, _):
        loop = chat_tool_loop if wire == "chat" else responses_tool_loop
        answer = await loop(client, stream=stream)

    assert answer == ANSWER
    assert upstream.routes == [wire, wire]
    # The client's call id and tool result reached the upstream unchanged (the upstream checks the
    # transcript too, as OpenAI does, and would have refused an unanswered call).
    assert sent_result(upstream) == ("call_paris", weather("Paris"))
    upstream.assert_complete()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_the_openai_sdk_gets_the_final_answer_of_the_servers_tool_loop(
    tmp_path: Path, wire: str, stream: bool
) -> None:
    model = FunctionModel(bookkeeper)
    async with gateway(tmp_path, model=model) as (client, user_id):
        if wire == "chat":
            messages = [{"role": "user", "content": "Book lunch for 12.50"}]
            message = await chat_turn(client, "toolwire", messages, stream=stream)
            assert not message.tool_calls
            answer = message.content
        else:
            response = await responses_turn(client, "toolwire", "Book lunch for 12.50", stream=stream)
            assert [item.type for item in response.output] == ["message"]
            answer = response.output_text

    assert answer == "Booked lunch for 12.50."
    # Two rounds ran on the server: the call, then the answer; the tool wrote as the key's user.
    assert len(model.requests) == 2
    assert isinstance(model.requests[1].transcript[-1], ToolResult)
    with sqlite3.connect(tmp_path / "service.db") as db:
        rows = db.execute("SELECT title, tenant_id, user_id FROM items").fetchall()
    assert rows == [("lunch", "acme", user_id)]


async def test_the_agents_sdk_runs_an_agent_with_a_function_tool_on_the_chat_route(tmp_path: Path) -> None:
    set_tracing_disabled(True)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city.

        Args:
            city: The city's name.
        """
        asked.append(city)
        return weather(city)

    steps = [Step.call("get_weather", {"city": "Paris"}), Step.reply(ANSWER)]
    async with ScriptedServer(steps) as upstream, gateway(tmp_path, upstream) as (client, _):
        agent = Agent(
            name="Forecaster",
            instructions="Answer questions about the weather.",
            tools=[get_weather],
            model=OpenAIChatCompletionsModel(model=UPSTREAM, openai_client=client),
        )
        result = await Runner.run(agent, "What is the weather in Paris?")

    assert result.final_output == ANSWER
    assert asked == ["Paris"]
    assert upstream.routes == ["chat", "chat"]
    assert upstream.requests[0]["messages"][0] == {
        "role": "system",
        "content": "Answer questions about the weather.",
    }
    assert sent_result(upstream)[1] == weather("Paris")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_responses_client_works_against_a_chat_only_upstream(tmp_path: Path, stream: bool) -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}, id="call_paris"), Step.reply(ANSWER)]
    async with (
        ScriptedServer(steps, serve_responses=False) as upstream,
        gateway(tmp_path, upstream, route="auto") as (client, _),
    ):
        answer = await responses_tool_loop(client, stream=stream)

    assert answer == ANSWER
    assert upstream.routes == ["chat", "chat"]
    assert sent_result(upstream) == ("call_paris", weather("Paris"))


async def test_a_chat_client_works_against_a_responses_only_upstream(tmp_path: Path) -> None:
    steps = [Step.call("get_weather", {"city": "Paris"}, id="call_paris"), Step.reply(ANSWER)]
    async with (
        ScriptedServer(steps, serve_chat=False) as upstream,
        gateway(tmp_path, upstream, route="auto") as (client, _),
    ):
        answer = await chat_tool_loop(client, stream=True)

    assert answer == ANSWER
    # The first request found Chat unserved; from then on Responses carried the conversation.
    assert upstream.routes == ["chat", "responses", "responses"]
    assert sent_result(upstream) == ("call_paris", weather("Paris"))


@pytest.mark.parametrize(("wire", "stream"), [("chat", False), ("responses", True)])
async def test_an_upstream_without_tool_support_becomes_tool_capable(
    tmp_path: Path, wire: str, stream: bool
) -> None:
    steps = [Step.plan("get_weather", {"city": "Paris"}), Step.plan("none", reply=ANSWER)]
    async with (
        ScriptedServer(steps, reject_tools=True) as upstream,
        gateway(tmp_path, upstream, route=wire) as (client, _),
    ):
        loop = chat_tool_loop if wire == "chat" else responses_tool_loop
        answer = await loop(client, stream=stream)

    assert answer == ANSWER
    # Offered tools, the upstream refused them; the plan took over and the client got real calls.
    assert "tools" in upstream.requests[0]
    assert all("tools" not in body for body in upstream.requests[1:])
    # On the plan route the result goes back to the upstream as text.
    [*_, result] = ScriptedServer.read_transcript(upstream.requests[-1], upstream.routes[-1])
    assert isinstance(result, UserMessage) and weather("Paris") in result.content
