"""`POST /v1/chat`: the tool loop over HTTP, conversations, request-id replay, and SSE on a real server."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pg import postgres_database
from service_support import (
    BOOK,
    add_user,
    bearer,
    chat_body,
    read_events,
    server_thread,
    serving,
    sqlite_url,
    wait_for,
)
from toolwire.exceptions import ModelHTTPError
from toolwire.messages import AssistantMessage, ToolResult, UserMessage
from toolwire.results import result_json
from toolwire.service import create_app
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest, call, reply


def bookkeeper(request: ModelRequest) -> Any:
    """Books lunch when asked with tools, then reports the stored item."""
    last = request.transcript[-1]
    if isinstance(last, ToolResult):
        item = json.loads(last.content)["item"]
        return f"Booked {item['title']} for {item['amount']:.2f}."
    if request.tools and isinstance(last, UserMessage) and last.content.startswith("Book"):
        return reply(None, call("create_item", BOOK))
    return f"You said: {last.content}" if isinstance(last, UserMessage) else "?"


def rows(tmp_path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "service.db") as db:
        return db.execute(query).fetchall()


@pytest.fixture
async def alice(tmp_path: Path) -> tuple[str, str]:
    return await add_user(sqlite_url(tmp_path), "alice", tenant="acme")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(database_url=sqlite_url(tmp_path))


async def test_chat_runs_the_tool_loop_and_answers_in_the_cli_shape(
    settings: Settings, alice: tuple[str, str], tmp_path: Path
) -> None:
    user_id, key = alice
    async with serving(settings, FunctionModel(bookkeeper)) as (_, client):
        response = await client.post("/v1/chat", json=chat_body("Book lunch", "r1"), headers=bearer(key))

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"answer", "calls", "rounds", "route", "conversation_id"}
    assert body["answer"] == "Booked lunch for 12.50."
    assert body["rounds"] == 2
    assert body["conversation_id"].startswith("conv_")
    [booked] = body["calls"]
    assert (booked["name"], booked["outcome"], booked["arguments"]) == ("create_item", "ok", BOOK)
    assert booked["result"]["item"]["title"] == "lunch"
    # The key's user and tenant became the Context the tool wrote with.
    assert rows(tmp_path, "SELECT title, tenant_id, user_id FROM items") == [("lunch", "acme", user_id)]


async def test_the_answer_has_the_keys_of_chat_json(settings: Settings, alice: tuple[str, str]) -> None:
    from toolwire.runner import Runner

    cli = result_json(await Runner(FunctionModel(bookkeeper)).run("hello"))
    async with serving(settings, FunctionModel(bookkeeper)) as (_, client):
        response = await client.post("/v1/chat", json=chat_body("hello"), headers=bearer(alice[1]))
    assert set(response.json()) == set(cli) | {"conversation_id"}


async def test_a_conversation_continues_with_its_id(settings: Settings, alice: tuple[str, str]) -> None:
    model = FunctionModel(bookkeeper)
    async with serving(settings, model) as (_, client):
        first = (await client.post("/v1/chat", json=chat_body("Book lunch"), headers=bearer(alice[1]))).json()
        second = await client.post(
            "/v1/chat",
            json=chat_body("And now?", conversation_id=first["conversation_id"]),
            headers=bearer(alice[1]),
        )

    assert second.status_code == 200
    assert second.json()["conversation_id"] == first["conversation_id"]
    seen = model.requests[-1].transcript
    assert [m.content for m in seen if isinstance(m, UserMessage)] == ["Book lunch", "And now?"]
    assert any(isinstance(m, ToolResult) and m.name == "create_item" for m in seen)
    assert AssistantMessage(text="Booked lunch for 12.50.") in seen


async def test_a_repeated_request_id_gets_the_stored_outcome_and_nothing_runs_twice(
    settings: Settings, alice: tuple[str, str], tmp_path: Path
) -> None:
    model = FunctionModel(bookkeeper)
    async with serving(settings, model) as (_, client):
        first = await client.post("/v1/chat", json=chat_body("Book lunch", "same"), headers=bearer(alice[1]))
        asked = len(model.requests)
        again = await client.post("/v1/chat", json=chat_body("Book lunch", "same"), headers=bearer(alice[1]))

    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(model.requests) == asked
    assert rows(tmp_path, "SELECT count(*) FROM items") == [(1,)]


async def test_a_request_id_reused_for_other_messages_is_refused(
    settings: Settings, alice: tuple[str, str]
) -> None:
    async with serving(settings, FunctionModel(bookkeeper)) as (_, client):
        await client.post("/v1/chat", json=chat_body("hello", "dup"), headers=bearer(alice[1]))
        other = await client.post(
            "/v1/chat", json=chat_body("something else", "dup"), headers=bearer(alice[1])
        )

    assert other.status_code == 422
    assert other.json()["error"]["code"] == "request_id_reused"
    assert other.json()["error"]["param"] == "request_id"


async def test_a_concurrent_duplicate_gets_409_then_the_stored_outcome(
    settings: Settings, alice: tuple[str, str]
) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        await release.wait()
        return "done"

    model = FunctionModel(slow)
    async with serving(settings, model) as (_, client):
        first = asyncio.create_task(
            client.post("/v1/chat", json=chat_body("hi", "r"), headers=bearer(alice[1]))
        )

        async def started() -> bool:
            return len(model.requests) == 1

        await wait_for(started)
        duplicate = await client.post("/v1/chat", json=chat_body("hi", "r"), headers=bearer(alice[1]))
        release.set()
        done = await first
        later = await client.post("/v1/chat", json=chat_body("hi", "r"), headers=bearer(alice[1]))

    assert duplicate.status_code == 409
    assert duplicate.json()["error"]["code"] == "run_in_progress"
    assert duplicate.headers["retry-after"]
    assert done.status_code == 200
    assert later.json() == done.json()
    assert len(model.requests) == 1


async def test_a_second_message_while_the_conversation_is_busy_gets_409(
    settings: Settings, alice: tuple[str, str]
) -> None:
    release = asyncio.Event()

    async def model_fn(request: ModelRequest) -> str:
        if len(model.requests) > 1:
            await release.wait()
        return "ok"

    model = FunctionModel(model_fn)
    async with serving(settings, model) as (_, client):
        start = (await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(alice[1]))).json()
        conversation = start["conversation_id"]
        slow = asyncio.create_task(
            client.post(
                "/v1/chat", json=chat_body("one", conversation_id=conversation), headers=bearer(alice[1])
            )
        )

        async def started() -> bool:
            return len(model.requests) == 2

        await wait_for(started)
        busy = await client.post(
            "/v1/chat", json=chat_body("two", conversation_id=conversation), headers=bearer(alice[1])
        )
        release.set()
        assert (await slow).status_code == 200

    assert busy.status_code == 409
    assert busy.json()["error"]["code"] == "conversation_busy"


async def test_a_failing_model_is_502_stores_nothing_and_the_request_can_be_repeated(
    settings: Settings, alice: tuple[str, str], tmp_path: Path
) -> None:
    failures = [ModelHTTPError("The endpoint answered 500.", status_code=500)]

    def flaky(request: ModelRequest) -> str:
        if failures:
            raise failures.pop()
        return "recovered"

    async with serving(settings, FunctionModel(flaky)) as (_, client):
        failed = await client.post("/v1/chat", json=chat_body("hi", "again"), headers=bearer(alice[1]))
        assert rows(tmp_path, "SELECT state FROM runs") == [("failed",)]
        assert rows(tmp_path, "SELECT count(*) FROM conversations") == [(0,)]
        retried = await client.post("/v1/chat", json=chat_body("hi", "again"), headers=bearer(alice[1]))

    assert failed.status_code == 502
    assert failed.json()["error"]["code"] == "model_error"
    assert failed.json()["error"]["type"] == "server_error"
    assert retried.status_code == 200
    assert retried.json()["answer"] == "recovered"
    assert rows(tmp_path, "SELECT state, attempt FROM runs") == [("done", 2)]


# --- streaming, on a real server ------------------------------------------------------------------


async def test_a_stream_sends_text_deltas_each_call_and_then_the_final_object(
    settings: Settings, alice: tuple[str, str]
) -> None:
    app = create_app(settings, model=FunctionModel(bookkeeper))
    with server_thread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as client:
            body = chat_body("Book lunch", "streamed", stream=True)
            async with client.stream("POST", "/v1/chat", json=body, headers=bearer(alice[1])) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                events = [event async for event in read_events(response)]
            stored = await client.post("/v1/chat", json={**body, "stream": False}, headers=bearer(alice[1]))

    names = [name for name, _ in events]
    assert names[:2] == ["call.proposed", "call.finished"]
    assert set(names[2:-1]) == {"text.delta"}
    assert names[-1] == "done"
    proposed, finished = events[0][1], events[1][1]
    assert (proposed["name"], proposed["arguments"], proposed["round"]) == ("create_item", BOOK, 1)
    assert finished["call_id"] == proposed["call_id"]
    assert finished["outcome"] == "ok"
    assert "".join(data["text"] for name, data in events if name == "text.delta") == "Booked lunch for 12.50."
    final = events[-1][1]
    assert final["answer"] == "Booked lunch for 12.50."
    assert final["calls"][0]["call_id"] == proposed["call_id"]
    assert stored.json() == final


async def test_a_replayed_stream_carries_the_stored_outcome(
    settings: Settings, alice: tuple[str, str]
) -> None:
    app = create_app(settings, model=FunctionModel(bookkeeper))
    with server_thread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as client:
            body = chat_body("hello", "twice", stream=True)
            first = await client.post("/v1/chat", json={**body, "stream": False}, headers=bearer(alice[1]))
            async with client.stream("POST", "/v1/chat", json=body, headers=bearer(alice[1])) as response:
                events = [event async for event in read_events(response)]
                replayed = response.headers.get("idempotent-replayed")

    assert events == [("done", first.json())]
    assert replayed == "true"


async def test_a_model_failure_mid_stream_ends_with_an_error_event(
    settings: Settings, alice: tuple[str, str]
) -> None:
    def broken(request: ModelRequest) -> str:
        raise ModelHTTPError("The endpoint answered 503.", status_code=503)

    app = create_app(settings, model=FunctionModel(broken))
    with server_thread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as client:
            body = chat_body("hello", stream=True)
            async with client.stream("POST", "/v1/chat", json=body, headers=bearer(alice[1])) as response:
                events = [event async for event in read_events(response)]

    [(name, data)] = events
    assert name == "error"
    assert data["error"]["code"] == "model_error"
    assert set(data["error"]) == {"message", "type", "param", "code"}


async def test_a_client_leaving_mid_stream_leaves_a_finished_run_and_no_half_write(
    settings: Settings, alice: tuple[str, str], tmp_path: Path
) -> None:
    answer_now = threading.Event()

    async def model_fn(request: ModelRequest) -> Any:
        if not isinstance(request.transcript[-1], ToolResult):
            return reply(None, call("create_item", BOOK))
        # The second turn waits until the client is gone (the server runs in another thread).
        await asyncio.to_thread(answer_now.wait, 10)
        return "Booked it."

    model = FunctionModel(model_fn)
    app = create_app(settings, model=model)
    with server_thread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as client:
            body = chat_body("Book lunch", "leaving", stream=True)
            async with client.stream("POST", "/v1/chat", json=body, headers=bearer(alice[1])) as response:
                async for name, _ in read_events(response):
                    if name == "call.finished":
                        break  # leave: the connection closes with the block
            assert rows(tmp_path, "SELECT state FROM runs") == [("running",)]
            answer_now.set()

            async def finished() -> bool:
                return rows(tmp_path, "SELECT state FROM runs") == [("done",)]

            await wait_for(finished)
            again = await client.post("/v1/chat", json={**body, "stream": False}, headers=bearer(alice[1]))

    assert again.status_code == 200
    assert again.json()["answer"] == "Booked it."
    assert again.headers["idempotent-replayed"] == "true"
    assert len(model.requests) == 2
    assert rows(tmp_path, "SELECT count(*) FROM items") == [(1,)]
    [(transcript,)] = rows(tmp_path, "SELECT transcript FROM conversations")
    assert [m["role"] for m in json.loads(transcript)][-3:] == ["assistant", "tool", "assistant"]


async def test_stopping_the_server_lets_a_running_stream_finish(
    settings: Settings, alice: tuple[str, str]
) -> None:
    answer_now = threading.Event()

    async def slow(request: ModelRequest) -> str:
        await asyncio.to_thread(answer_now.wait, 10)
        return "finished in time"

    app = create_app(settings, model=FunctionModel(slow))
    server = server_thread(app, graceful=10)
    running = server.__enter__()
    try:
        async with httpx2.AsyncClient(base_url=running.url, timeout=10) as client:
            body = chat_body("hello", stream=True)
            async with client.stream("POST", "/v1/chat", json=body, headers=bearer(alice[1])) as response:
                assert response.status_code == 200
                stopping = asyncio.create_task(asyncio.to_thread(running.stop))
                await asyncio.sleep(0.3)
                assert not stopping.done(), "the server waits for the stream"
                answer_now.set()
                events = [event async for event in read_events(response)]
            await stopping
    finally:
        answer_now.set()
        server.__exit__(None, None, None)

    assert events[-1][0] == "done"
    assert events[-1][1]["answer"] == "finished in time"
    assert not running.thread.is_alive()


# --- several servers, one database ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    async with postgres_database() as url:
        yield url


async def test_two_servers_on_one_database_run_a_duplicate_once(shared_url: str) -> None:
    _, key = await add_user(shared_url, "alice")
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        await release.wait()
        return "once"

    first_model, second_model = FunctionModel(slow), FunctionModel(slow)
    settings = Settings(database_url=shared_url)
    async with serving(settings, first_model) as (_, first), serving(settings, second_model) as (_, second):
        body = chat_body("hi", "across-servers")
        racing = [
            asyncio.create_task(c.post("/v1/chat", json=body, headers=bearer(key))) for c in (first, second)
        ]

        async def one_started() -> bool:
            return len(first_model.requests) + len(second_model.requests) == 1

        await wait_for(one_started)

        async def one_answered() -> bool:
            return any(task.done() for task in racing)

        await wait_for(one_answered)  # the duplicate is answered while the first still runs
        release.set()
        answers = await asyncio.gather(*racing)
        later = [await c.post("/v1/chat", json=body, headers=bearer(key)) for c in (first, second)]

    assert sorted(a.status_code for a in answers) == [200, 409]
    assert len(first_model.requests) + len(second_model.requests) == 1
    winner = next(a for a in answers if a.status_code == 200)
    assert [a.json() for a in later] == [winner.json(), winner.json()]


async def test_a_conversation_started_on_one_server_continues_on_another(shared_url: str) -> None:
    _, key = await add_user(shared_url, "alice")
    model = FunctionModel(bookkeeper)
    settings = Settings(database_url=shared_url)
    async with (
        serving(settings, FunctionModel(bookkeeper)) as (_, first),
        serving(settings, model) as (_, second),
    ):
        started = (await first.post("/v1/chat", json=chat_body("Book lunch"), headers=bearer(key))).json()
        body = chat_body("And now?", conversation_id=started["conversation_id"])
        continued = await second.post("/v1/chat", json=body, headers=bearer(key))

    assert continued.status_code == 200
    seen = model.requests[-1].transcript
    assert [m.content for m in seen if isinstance(m, UserMessage)] == ["Book lunch", "And now?"]


def test_a_transcript_survives_the_store_and_a_damaged_one_is_a_storage_error() -> None:
    from toolwire.exceptions import StorageError
    from toolwire.messages import SystemMessage, ToolCall
    from toolwire.store.transcripts import dump_transcript, load_transcript

    transcript = (
        SystemMessage(content="be brief"),
        UserMessage(content="Book lunch"),
        AssistantMessage(text=None, tool_calls=(ToolCall(id="c1", name="create_item", arguments='{"a": 1'),)),
        ToolResult(
            call_id="c1", name="create_item", content='{"error": {}}', code="invalid_json", replayed=True
        ),
        AssistantMessage(text="Could not book it."),
    )
    stored = json.loads(json.dumps(dump_transcript(transcript)))

    assert load_transcript(stored) == transcript
    with pytest.raises(StorageError, match="start a new conversation"):
        load_transcript([{"role": "wizard", "content": "?"}])
