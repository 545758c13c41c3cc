"""Upstream faults: 500s, timeouts, cut streams and closed connections fail a run cleanly.

The service runs in this event loop on a SQLite file, with a real `OpenAIModel` talking HTTP to an
upstream on 127.0.0.1: the scripted server for HTTP-level faults, and a raw asyncio server for
connections closed half-way through a response. Each fault strikes either the first model request
(nothing has run yet) or the second (the booking has run). Either way the caller gets one clear
error, the run is stored as failed without a transcript, the ledger holds no half-done claim, and
repeating the request once the upstream is healthy books exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from service_support import BOOK, add_user, bearer, chat_body, read_events, serving, sqlite_url
from toolwire.messages import Message, ToolResult, Turn, Usage
from toolwire.models.openai import OpenAIModel
from toolwire.settings import Settings
from toolwire.testing import ScriptedServer, Step
from toolwire.testing.fakes import call, reply
from toolwire.wire import chat
from toolwire.wire.sse import encode_event

_ANSWER = "Booked your lunch."


def booking_turn(transcript: list[Message]) -> Turn:
    """What a healthy model answers: book first, then confirm."""
    if isinstance(transcript[-1], ToolResult):
        return Turn(message=reply(_ANSWER), usage=Usage())
    return Turn(message=reply(None, call("create_item", BOOK, id="call_book")), usage=Usage())


# --- the upstreams -------------------------------------------------------------------------------


@dataclass
class ScriptedFault:
    """A scripted-server script: healthy answers, and `fault` at model request number `at`."""

    fault: Callable[[Step], Step] | None
    at: int
    seen: int = 0

    def __call__(self, body: dict[str, Any], route: str) -> Step:
        self.seen += 1
        turn = booking_turn(ScriptedServer.read_transcript(body, route))
        step = (
            Step.reply(turn.message.text or "")
            if turn.message.text
            else Step.call("create_item", BOOK, id="call_book")
        )
        if self.fault is not None and self.seen == self.at:
            return self.fault(step)
        return step


@dataclass
class HalfwayServer:
    """A raw HTTP/1.1 upstream that answers like a model, or closes the socket half-way through.

    `modes` is consumed one per request: `answer`, `close-before` (no byte of a response),
    `close-mid-body` (headers and half the declared body, then the socket closes).
    """

    modes: list[str] = field(default_factory=list)
    requests: int = 0
    _server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aenter__(self) -> HalfwayServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = json.loads(await reader.readexactly(length))
            self.requests += 1
            mode = self.modes.pop(0) if self.modes else "answer"
            if mode == "close-before":
                return
            turn = booking_turn(chat.parse_request(body)[0])
            if body.get("stream"):
                chunks = chat.render_stream(turn, "halfway", "chatcmpl-halfway")
                payload = "".join(encode_event(json.dumps(c)) for c in chunks) + encode_event("[DONE]")
                kind = "text/event-stream"
            else:
                payload, kind = (
                    json.dumps(chat.render_response(turn, "halfway", "chatcmpl-halfway")),
                    ("application/json"),
                )
            data = payload.encode()
            headers = (
                f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(headers.encode())
            writer.write(data if mode == "answer" else data[: len(data) // 2])
            await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


# --- the service ---------------------------------------------------------------------------------


@dataclass
class Service:
    client: httpx2.AsyncClient
    key: str
    path: Path

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            return db.execute(query).fetchall()

    async def chat(self, request_id: str, *, stream: bool = False) -> tuple[int, dict[str, Any]]:
        """The status and the body; for a stream, the `done` or `error` event that ends it."""
        body = chat_body("Book lunch for 12.50", request_id, stream=stream)
        async with asyncio.timeout(30):
            if not stream:
                response = await self.client.post("/v1/chat", json=body, headers=bearer(self.key))
                return response.status_code, response.json()
            async with self.client.stream(
                "POST", "/v1/chat", json=body, headers=bearer(self.key)
            ) as response:
                events = [event async for event in read_events(response)]
        name, data = events[-1]
        if name == "done":
            return 200, data
        assert name == "error"
        # The status line went out long before; the status the error would have had otherwise.
        return {"model_error": 502, "timeout": 504}[data["error"]["code"]], data


@contextlib.asynccontextmanager
async def service_on(
    tmp_path: Path, base_url: str, *, model_timeout: float = 10.0, run_timeout: float = 600.0
) -> AsyncIterator[Service]:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    model = OpenAIModel("scripted", base_url=base_url, timeout=model_timeout)
    settings = Settings(database_url=url, run_timeout=run_timeout)
    async with serving(settings, model) as (_, client):
        yield Service(client, key, tmp_path / "service.db")


def assert_one_sentence_error(body: dict[str, Any], code: str) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error = body["error"]
    assert error["code"] == code and error["type"] == "server_error"
    message: str = error["message"]
    assert message.endswith(".") and "\n" not in message and "Traceback" not in message
    # One sentence: no full stop inside it except in numbers, URLs and host names.
    assert ". " not in message, message
    return message


def assert_failed_and_consistent(service: Service, *, booked: int) -> None:
    """The run is stored as failed with no transcript; the ledger has only finished claims."""
    [(state, outcome)] = service.rows("SELECT state, outcome FROM runs")
    assert state == "failed" and "error" in json.loads(outcome)
    assert service.rows("SELECT count(*) FROM conversations") == [(0,)]
    assert service.rows("SELECT count(*) FROM items") == [(booked,)]
    assert service.rows("SELECT state, count(*) FROM ledger GROUP BY state") == (
        [("done", 1)] if booked else []
    )


async def assert_retry_books_once(service: Service, request_id: str, *, stream: bool, replayed: bool) -> None:
    status, body = await service.chat(request_id, stream=stream)
    assert status == 200, body
    assert body["answer"] == _ANSWER
    [booking] = body["calls"]
    assert (booking["outcome"], booking["replayed"]) == ("ok", replayed)
    [(item_id,)] = service.rows("SELECT id FROM items")
    assert booking["result"]["item"]["id"] == item_id
    assert service.rows("SELECT state, count(*) FROM ledger GROUP BY state") == [("done", 1)]
    assert service.rows("SELECT state, attempt FROM runs") == [("done", 2)]
    assert service.rows("SELECT count(*) FROM conversations") == [(1,)]
    # And once more: the stored outcome, no third run.
    again = await service.client.post(
        "/v1/chat", json=chat_body("Book lunch for 12.50", request_id), headers=bearer(service.key)
    )
    assert again.headers["idempotent-replayed"] == "true"
    assert service.rows("SELECT count(*) FROM items") == [(1,)]


# --- HTTP-level faults from the scripted server ---------------------------------------------------

FAULTS: dict[str, tuple[Callable[[Step], Step], str]] = {
    "http 500": (
        lambda step: Step.error(500, "The server had an error while processing your request."),
        "500",
    ),
    "http 503": (lambda step: Step.error(503, "The engine is currently overloaded."), "503"),
    "invalid json": (lambda step: Step(text="x", malformed=True), "JSON object"),
    "cut stream": (lambda step: Step(text=step.text, tool_calls=step.tool_calls, cut_stream=True), ""),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("at", [1, 2], ids=["before-the-call", "after-the-call"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_an_upstream_fault_fails_the_run_cleanly_and_a_retry_books_once(
    tmp_path: Path, fault: str, at: int, stream: bool
) -> None:
    make, says = FAULTS[fault]
    script = ScriptedFault(make, at)
    async with ScriptedServer(script) as upstream, service_on(tmp_path, upstream.base_url) as service:
        status, body = await service.chat("req-fault", stream=stream)

        assert status == 502, body
        message = assert_one_sentence_error(body, "model_error")
        assert message.startswith("The model endpoint failed: ") and says in message
        assert_failed_and_consistent(service, booked=1 if at == 2 else 0)
        # The upstream is healthy again (the fault struck once): the same request books once.
        await assert_retry_books_once(service, "req-fault", stream=stream, replayed=at == 2)
    assert script.seen == at + 2


async def test_an_upstream_that_never_answers_times_out_with_502(tmp_path: Path) -> None:
    script = ScriptedFault(lambda step: Step(text=step.text, tool_calls=step.tool_calls, latency=3.0), 2)
    async with (
        ScriptedServer(script) as upstream,
        service_on(tmp_path, upstream.base_url, model_timeout=1.0) as service,
    ):
        status, body = await service.chat("req-slow")

        assert status == 502
        message = assert_one_sentence_error(body, "model_error")
        assert "did not answer within 1 s" in message
        assert_failed_and_consistent(service, booked=1)
        await assert_retry_books_once(service, "req-slow", stream=False, replayed=True)


async def test_a_run_longer_than_the_run_timeout_is_504(tmp_path: Path) -> None:
    script = ScriptedFault(lambda step: Step(text=step.text, tool_calls=step.tool_calls, latency=3.0), 2)
    async with (
        ScriptedServer(script) as upstream,
        service_on(tmp_path, upstream.base_url, run_timeout=2.0) as service,
    ):
        status, body = await service.chat("req-long")

        assert status == 504
        assert "took longer than the service allows" in assert_one_sentence_error(body, "timeout")
        assert_failed_and_consistent(service, booked=1)
        await assert_retry_books_once(service, "req-long", stream=False, replayed=True)


# --- connections closed half-way -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("at", [1, 2], ids=["before-the-call", "after-the-call"])
@pytest.mark.parametrize("mode", ["close-before", "close-mid-body"])
async def test_a_connection_closed_mid_response_fails_the_run_cleanly(
    tmp_path: Path, mode: str, at: int, stream: bool
) -> None:
    upstream = HalfwayServer(modes=["answer"] * (at - 1) + [mode])
    async with upstream, service_on(tmp_path, upstream.base_url) as service:
        status, body = await service.chat("req-closed", stream=stream)

        assert status == 502, body
        message = assert_one_sentence_error(body, "model_error")
        assert "broke mid-response" in message and "retry the request" in message
        assert_failed_and_consistent(service, booked=1 if at == 2 else 0)
        await assert_retry_books_once(service, "req-closed", stream=stream, replayed=at == 2)
    assert upstream.requests == at + 2
