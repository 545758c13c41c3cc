"""The OpenAI-compatible gateway over HTTP: both modes, both wires, stream framing, upstream failures."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from service_support import BOOK, add_user, bearer, serving, sqlite_url
from toolwire.messages import TextDelta, ToolResult, UserMessage
from toolwire.models.base import StreamEvent
from toolwire.service.gateway_stream import Feed, chat_sse
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest, call, reply
from toolwire.testing.server import ScriptedServer, Step

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER}
UPSTREAM = "up-model"


def bookkeeper(request: ModelRequest) -> Any:
    """Says what it does, books lunch, then reports the stored item."""
    last = request.transcript[-1]
    if isinstance(last, ToolResult):
        item = json.loads(last.content)["item"]
        return f"Booked {item['title']} for {item['amount']:.2f}."
    if isinstance(last, UserMessage) and last.content.startswith("Book") and request.tools:
        return reply("Booking it now.", call("create_item", BOOK))
    return "Nothing to book."


@pytest.fixture
async def alice(tmp_path: Path) -> tuple[str, str]:
    return await add_user(sqlite_url(tmp_path), "alice", tenant="acme")


@pytest.fixture
def key(alice: tuple[str, str]) -> str:
    return alice[1]


def settings_for(tmp_path: Path, upstream: ScriptedServer | None = None, **extra: Any) -> Settings:
    base_url = upstream.base_url if upstream is not None else None
    return Settings(database_url=sqlite_url(tmp_path), base_url=base_url, model=UPSTREAM, **extra)


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as server:
        yield server


@pytest.fixture
async def http(tmp_path: Path, upstream: ScriptedServer) -> AsyncIterator[httpx2.AsyncClient]:
    async with serving(settings_for(tmp_path, upstream), FunctionModel(bookkeeper)) as (_, client):
        yield client


def blocks(body: str) -> list[str]:
    """The events of an SSE body, each as its raw lines."""
    assert body.endswith("\n\n")
    return body[:-2].split("\n\n")


def chat_chunks(body: str) -> list[Any]:
    """Every `data:` payload of a Chat stream, checking that nothing else is on the wire."""
    payloads = []
    for block in blocks(body):
        assert block.startswith("data: ") and "\n" not in block, block
        data = block[6:]
        payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def responses_events(body: str) -> list[dict[str, Any]]:
    """Every event of a Responses stream, checking that each names its type on an `event:` line."""
    events = []
    for block in blocks(body):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        event = json.loads(data[6:])
        assert event["type"] == name[7:]
        events.append(event)
    return events


def items_in_db(tmp_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "service.db") as db:
        return db.execute("SELECT title, tenant_id, user_id FROM items").fetchall()


async def test_models_lists_the_tool_loop_and_every_upstream_model(
    tmp_path: Path, key: str, upstream: ScriptedServer
) -> None:
    settings = settings_for(tmp_path, upstream, upstream_models="other-model, up-model,")
    async with serving(settings, FunctionModel(bookkeeper)) as (_, http):
        listed = (await http.get("/v1/models", headers=bearer(key))).json()
        one = await http.get("/v1/models/toolwire/assistant", headers=bearer(key))
        missing = await http.get("/v1/models/gpt-5", headers=bearer(key))

    assert listed["object"] == "list"
    ids = [(m["id"], m["owned_by"]) for m in listed["data"]]
    assert ids == [
        ("toolwire", "toolwire"),
        ("toolwire/assistant", "toolwire"),
        ("up-model", "upstream"),
        ("other-model", "upstream"),
    ]
    assert one.json()["id"] == "toolwire/assistant"
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


async def test_a_chat_stream_is_framed_as_openai_sends_it(
    http: httpx2.AsyncClient, key: str, upstream: ScriptedServer
) -> None:
    upstream.enqueue(Step.text_and_call("Checking the sky.", "get_weather", {"city": "Paris"}, id="call_w1"))
    body = {
        "model": UPSTREAM,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [CHAT_TOOL],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = await http.post("/v1/chat/completions", json=body, headers=bearer(key))

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    *chunks, usage, done = chat_chunks(response.text)
    assert done == "[DONE]"
    assert usage["choices"] == [] and set(usage["usage"]) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
    }
    assert {c["id"] for c in chunks} == {usage["id"]} and usage["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == UPSTREAM for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    texts = [d["content"] for d in deltas if d.get("content")]
    # The upstream's pieces go on as pieces: the text is not gathered into one chunk.
    assert len(texts) > 1 and "".join(texts) == "Checking the sky."
    fragments = [f for d in deltas for f in d.get("tool_calls", ())]
    assert fragments[0] == {
        "index": 0,
        "id": "call_w1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert "".join(f["function"]["arguments"] for f in fragments) == '{"city": "Paris"}'
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"
    # The upstream was offered the client's tool, on its own route.
    assert upstream.routes == ["chat"]
    assert upstream.requests[0]["tools"][0]["function"]["name"] == "get_weather"


async def test_a_responses_stream_names_each_event_and_numbers_it(
    http: httpx2.AsyncClient, key: str, upstream: ScriptedServer
) -> None:
    upstream.enqueue(Step.text_and_call("Looking.", "get_weather", {"city": "Rome"}, id="call_r1"))
    body = {"model": UPSTREAM, "input": "Weather in Rome?", "tools": [RESPONSES_TOOL], "stream": True}
    response = await http.post("/v1/responses", json=body, headers=bearer(key))

    assert response.status_code == 200
    events = responses_events(response.text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    final = events[-1]["response"]
    assert final["model"] == UPSTREAM and final["status"] == "completed"
    message, function_call = final["output"]
    assert message["content"][0]["text"] == "Looking."
    assert (function_call["call_id"], function_call["name"]) == ("call_r1", "get_weather")
    assert json.loads(function_call["arguments"]) == {"city": "Rome"}
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "Looking."


async def test_an_upstream_refusal_of_the_request_passes_through_with_its_status(
    http: httpx2.AsyncClient, key: str, upstream: ScriptedServer
) -> None:
    upstream.enqueue(
        Step.error(400, "This model's maximum context length is 8 tokens.", code="context_length_exceeded")
    )
    body = {"model": UPSTREAM, "messages": [{"role": "user", "content": "A long story..."}]}
    response = await http.post("/v1/chat/completions", json=body, headers=bearer(key))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 8 tokens" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_failure_is_a_502_that_keeps_the_upstream_address_private(
    http: httpx2.AsyncClient, key: str, upstream: ScriptedServer, stream: bool
) -> None:
    upstream.enqueue(Step.error(500, "Engine on fire."))
    body = {"model": UPSTREAM, "input": "Hi", "stream": stream}
    response = await http.post("/v1/responses", json=body, headers=bearer(key))

    # Streamed too: the failure came before any text, so it still has its own status.
    assert response.status_code == 502
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "upstream_error")
    assert "HTTP 500" in error["message"]
    assert "127.0.0.1" not in error["message"]


async def test_a_chat_stream_failing_mid_way_ends_with_an_error_chunk_and_no_done(
    http: httpx2.AsyncClient, key: str, upstream: ScriptedServer
) -> None:
    upstream.enqueue(Step.reply("Once upon a time, far away", stream_error="The engine stalled."))
    body = {"model": UPSTREAM, "messages": [{"role": "user", "content": "A story"}], "stream": True}
    response = await http.post("/v1/chat/completions", json=body, headers=bearer(key))

    assert response.status_code == 200
    chunks = chat_chunks(response.text)
    assert "[DONE]" not in chunks
    assert chunks[1]["choices"][0]["delta"]["content"]  # text went out before the failure
    assert set(chunks[-1]) == {"error"}
    assert chunks[-1]["error"]["code"] == "upstream_error"


async def test_a_responses_stream_failing_mid_way_ends_with_error_and_response_failed(
    http: httpx2.AsyncClient, key: str, upstream: ScriptedServer
) -> None:
    upstream.enqueue(Step.reply("Once upon a time, far away", stream_error="The engine stalled."))
    body = {"model": UPSTREAM, "input": "A story", "stream": True}
    response = await http.post("/v1/responses", json=body, headers=bearer(key))

    events = responses_events(response.text)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "upstream_error"
    assert events[-1]["response"]["error"]["code"] == "upstream_error"
    assert any(e["type"] == "response.output_text.delta" for e in events)


async def test_the_toolwire_model_runs_the_tool_loop_and_answers_the_final_message_only(
    http: httpx2.AsyncClient, alice: tuple[str, str], tmp_path: Path
) -> None:
    user_id, key = alice
    body = {"model": "toolwire", "messages": [{"role": "user", "content": "Book lunch"}]}
    response = await http.post("/v1/chat/completions", json=body, headers=bearer(key))

    assert response.status_code == 200, response.text
    completion = response.json()
    assert completion["model"] == "toolwire"
    [choice] = completion["choices"]
    assert choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]
    # The round that called the tool spoke first; its words lead the answer.
    assert choice["message"]["content"] == "Booking it now.\n\nBooked lunch for 12.50."
    assert completion["usage"]["prompt_tokens"] == 20  # two rounds of the scripted model
    # The tool wrote with the key's identity, never anything the body claimed.
    assert items_in_db(tmp_path) == [("lunch", "acme", user_id)]


async def test_the_toolwire_model_streams_on_responses_what_it_answers_whole(
    http: httpx2.AsyncClient, key: str
) -> None:
    body = {"model": "toolwire/assistant", "input": "Book lunch", "stream": True}
    response = await http.post("/v1/responses", json=body, headers=bearer(key))

    events = responses_events(response.text)
    assert events[-1]["type"] == "response.completed"
    [message] = events[-1]["response"]["output"]  # the final message only: no function_call items
    assert message["type"] == "message"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == message["content"][0]["text"] == "Booking it now.\n\nBooked lunch for 12.50."


async def test_an_idempotency_key_makes_a_retried_request_write_once(
    http: httpx2.AsyncClient, key: str, tmp_path: Path
) -> None:
    body = {"model": "toolwire", "messages": [{"role": "user", "content": "Book lunch"}]}
    retried = {**bearer(key), "Idempotency-Key": "order-17"}
    answers = []
    for _ in range(2):
        response = await http.post("/v1/chat/completions", json=body, headers=retried)
        answers.append(response.json()["choices"][0]["message"]["content"])
    assert len(items_in_db(tmp_path)) == 1
    assert answers[0] == answers[1] == "Booking it now.\n\nBooked lunch for 12.50."
    # Without a key, two requests are two bookings.
    for _ in range(2):
        assert (await http.post("/v1/chat/completions", json=body, headers=bearer(key))).status_code == 200
    assert len(items_in_db(tmp_path)) == 3


@pytest.mark.parametrize(("client_wire", "route"), [("responses", "chat"), ("chat", "responses")])
async def test_a_client_on_one_wire_is_served_by_an_upstream_on_the_other(
    tmp_path: Path, key: str, upstream: ScriptedServer, client_wire: str, route: str
) -> None:
    upstream.enqueue(Step.reply("Sunny."))
    async with serving(settings_for(tmp_path, upstream, route=route), FunctionModel(bookkeeper)) as (_, http):
        if client_wire == "chat":
            body: dict[str, Any] = {
                "model": UPSTREAM,
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sky?"}],
            }
            answer = (await http.post("/v1/chat/completions", json=body, headers=bearer(key))).json()
            text = answer["choices"][0]["message"]["content"]
        else:
            body = {"model": UPSTREAM, "instructions": "Be brief.", "input": "Sky?"}
            answer = (await http.post("/v1/responses", json=body, headers=bearer(key))).json()
            text = answer["output"][0]["content"][0]["text"]

    assert text == "Sunny."
    assert upstream.routes == [route]
    [sent] = upstream.requests
    if route == "chat":
        assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    else:
        assert sent["instructions"] == "Be brief."


async def test_a_run_stopped_by_shutdown_ends_its_stream_with_an_error_not_a_done() -> None:
    async def events() -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="Hi")
        await asyncio.Event().wait()  # never set: only a cancel ends this run
        yield TextDelta(text="unreachable")

    feed = Feed(events(), detached=True)
    stream = chat_sse(feed, model="toolwire", id="chatcmpl-1", include_usage=False)
    opening = [await anext(stream), await anext(stream)]
    feed.task.cancel()
    rest = [chunk async for chunk in stream]

    assert [c["choices"][0]["delta"] for c in chat_chunks("".join(opening))] == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
    ]
    [last] = chat_chunks("".join(rest))
    assert last["error"]["code"] == "cancelled"
