"""Bad gateway input gets a clear 4xx in OpenAI's error body; a client leaving mid-stream harms nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest

from service_support import add_user, bearer, server_thread, serving, sqlite_url, wait_for
from toolwire.messages import AssistantMessage, Message, RequestOptions, ToolCall, ToolSpec, Turn
from toolwire.models.base import StreamEvent, TextDelta, TurnComplete
from toolwire.service import create_app
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest
from toolwire.testing.server import ScriptedServer, Step

ERROR_KEYS = {"message", "type", "param", "code"}
UPSTREAM = "up-model"
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
HELLO = [{"role": "user", "content": "Hello"}]


def echo(request: ModelRequest) -> str:
    return "hello"


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer([Step.reply("Fine.")]) as server:
        yield server


@pytest.fixture
async def client(tmp_path: Path, upstream: ScriptedServer) -> AsyncIterator[tuple[httpx2.AsyncClient, str]]:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    settings = Settings(database_url=url, base_url=upstream.base_url, model=UPSTREAM, max_body_bytes=4096)
    async with serving(settings, FunctionModel(echo)) as (_, http):
        yield http, key


def error_of(response: httpx2.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    assert "Traceback" not in response.text
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize("path", [CHAT, RESPONSES])
@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"model": "up-model", "messages": [', "invalid_json"),
        (b"", "missing_body"),
        (b"[1, 2]", "invalid_type"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_400(
    client: tuple[httpx2.AsyncClient, str], path: str, content: bytes, code: str
) -> None:
    http, key = client
    headers = {**bearer(key), "content-type": "application/json"}
    error = error_of(await http.post(path, content=content, headers=headers), 400)
    assert (error["type"], error["code"]) == ("invalid_request_error", code)


@pytest.mark.parametrize(
    ("path", "change", "param"),
    [
        (CHAT, {"model": 5}, "model"),
        (CHAT, {"model": None}, "model"),
        (CHAT, {"messages": "Hello"}, "messages"),
        (CHAT, {"messages": [{"role": "robot", "content": "Hi"}]}, "messages.[0].role"),
        (CHAT, {"temperature": "hot"}, "temperature"),
        (CHAT, {"stream": "yes"}, "stream"),
        (CHAT, {"stream_options": ["include_usage"]}, "stream_options"),
        (CHAT, {"tools": {"name": "x"}}, "tools"),
        (CHAT, {"max_tokens": "10"}, "max_tokens"),
        (RESPONSES, {"input": 5}, "input"),
        (RESPONSES, {"tool_choice": 5}, "tool_choice"),
        (RESPONSES, {"instructions": ["Be brief."]}, "instructions"),
    ],
)
async def test_a_field_of_the_wrong_type_is_400_naming_it(
    client: tuple[httpx2.AsyncClient, str], path: str, change: dict[str, Any], param: str
) -> None:
    http, key = client
    body = {"model": UPSTREAM, **({"messages": HELLO} if path == CHAT else {"input": "Hello"}), **change}
    error = error_of(await http.post(path, json=body, headers=bearer(key)), 400)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("path", "change", "param", "code"),
    [
        (CHAT, {"colour": "blue"}, "colour", "unknown_parameter"),
        (RESPONSES, {"messages": HELLO}, "messages", "unknown_parameter"),
        (CHAT, {"n": 2}, "n", "unsupported_parameter"),
        (CHAT, {"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
        (RESPONSES, {"text": {"format": {"type": "json_object"}}}, "text", "unsupported_parameter"),
        (RESPONSES, {"background": True}, "background", "unsupported_parameter"),
    ],
)
async def test_an_unknown_field_or_one_asking_for_another_answer_is_refused(
    client: tuple[httpx2.AsyncClient, str], path: str, change: dict[str, Any], param: str, code: str
) -> None:
    http, key = client
    body = {"model": UPSTREAM, **({"messages": HELLO} if path == CHAT else {"input": "Hello"}), **change}
    error = error_of(await http.post(path, json=body, headers=bearer(key)), 400)
    assert (error["param"], error["code"]) == (param, code)


async def test_sampling_and_bookkeeping_fields_are_accepted(
    client: tuple[httpx2.AsyncClient, str], upstream: ScriptedServer
) -> None:
    http, key = client
    body = {"model": UPSTREAM, "messages": HELLO, "top_p": 0.9, "user": "u-1", "metadata": {"a": "b"}, "n": 1}
    response = await http.post(CHAT, json=body, headers=bearer(key))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Fine."


@pytest.mark.parametrize(
    ("path", "change", "param", "named"),
    [
        (RESPONSES, {"tools": [{"type": "web_search"}]}, "tools[0]", "web_search"),
        (
            RESPONSES,
            {"input": [{"role": "user", "content": "Hi"}, {"type": "web_search_call", "id": "ws_1"}]},
            "input[1]",
            "web_search_call",
        ),
        (RESPONSES, {"previous_response_id": "resp_1"}, "previous_response_id", "stored responses"),
        (CHAT, {"tools": [{"type": "web_search"}]}, "tools.[0]", "not a function tool"),
        (
            CHAT,
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
                        ],
                    }
                ]
            },
            "messages.[0].content.[1]",
            "image_url",
        ),
    ],
)
async def test_what_the_transcript_cannot_carry_is_refused_naming_the_item(
    client: tuple[httpx2.AsyncClient, str],
    upstream: ScriptedServer,
    path: str,
    change: dict[str, Any],
    param: str,
    named: str,
) -> None:
    http, key = client
    body = {"model": UPSTREAM, **({"messages": HELLO} if path == CHAT else {"input": "Hello"}), **change}
    error = error_of(await http.post(path, json=body, headers=bearer(key)), 400)
    assert error["param"] == param
    assert named in error["message"]
    assert upstream.requests == []  # refused here, never forwarded


async def test_a_declared_oversized_body_is_413(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client
    body = {"model": UPSTREAM, "messages": [{"role": "user", "content": "x" * 5000}]}
    error = error_of(await http.post(CHAT, json=body, headers=bearer(key)), 413)
    assert error["code"] == "request_too_large"


async def test_a_streamed_oversized_body_is_413(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"model": "up-model", "input": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    headers = {**bearer(key), "content-type": "application/json"}
    error = error_of(await http.post(RESPONSES, content=chunks(), headers=headers), 413)
    assert error["code"] == "request_too_large"


@pytest.mark.parametrize("path", [CHAT, RESPONSES])
async def test_an_unknown_model_is_404_naming_the_models_there_are(
    client: tuple[httpx2.AsyncClient, str], path: str
) -> None:
    http, key = client
    body = {"model": "gpt-7", **({"messages": HELLO} if path == CHAT else {"input": "Hello"})}
    error = error_of(await http.post(path, json=body, headers=bearer(key)), 404)
    assert (error["param"], error["code"]) == ("model", "model_not_found")
    assert "toolwire" in error["message"] and UPSTREAM in error["message"]


async def test_without_an_upstream_the_servers_own_model_answers_as_local(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")

    def own_model(request: ModelRequest) -> AssistantMessage | str:
        # The client's own tool reaches the server's model, and the call goes back to the client.
        if request.tools and request.tools[0].name == "get_weather":
            return AssistantMessage(tool_calls=(ToolCall(id="call_w", name="get_weather", arguments="{}"),))
        return "hello"

    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    async with serving(Settings(database_url=url, model=UPSTREAM), FunctionModel(own_model)) as (_, http):
        error = error_of(
            await http.post(CHAT, json={"model": UPSTREAM, "messages": HELLO}, headers=bearer(key)), 404
        )
        listed = (await http.get("/v1/models", headers=bearer(key))).json()
        answered = await http.post(CHAT, json={"model": "toolwire", "messages": HELLO}, headers=bearer(key))
        local = await http.post(
            CHAT, json={"model": "local", "messages": HELLO, "tools": [weather]}, headers=bearer(key)
        )
    assert error["code"] == "model_not_found"
    assert "use one of toolwire, toolwire/assistant, local (GET" in error["message"]
    assert [m["id"] for m in listed["data"]] == ["toolwire", "toolwire/assistant", "local"]
    assert answered.json()["choices"][0]["message"]["content"] == "hello"
    [call] = local.json()["choices"][0]["message"]["tool_calls"]
    assert (call["id"], call["function"]["name"]) == ("call_w", "get_weather")


async def test_client_tools_for_the_toolwire_model_are_refused(
    client: tuple[httpx2.AsyncClient, str],
) -> None:
    http, key = client
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    body = {"model": "toolwire", "input": "Weather?", "tools": [tool]}
    error = error_of(await http.post(RESPONSES, json=body, headers=bearer(key)), 400)
    assert (error["param"], error["code"]) == ("tools", "unsupported_parameter")


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer tw_0000000000000000_wrong-key-wrong-key"}, "invalid_api_key"),
    ],
)
@pytest.mark.parametrize("method_path", [("POST", CHAT), ("POST", RESPONSES), ("GET", "/v1/models")])
async def test_every_gateway_route_needs_a_valid_key(
    client: tuple[httpx2.AsyncClient, str], headers: dict[str, str], code: str, method_path: tuple[str, str]
) -> None:
    http, _ = client
    method, path = method_path
    # The key is checked before the body is read: a malformed body still gets the 401.
    response = await http.request(method, path, content=b"{not json", headers=headers)
    error = error_of(response, 401)
    assert error["code"] == code
    assert response.headers["www-authenticate"] == "Bearer"


async def _logged(caplog: pytest.LogCaptureFixture, message: str) -> bool:
    return any(record.getMessage() == message for record in caplog.records)


class GatedModel:
    """Says "Hello", then waits for the test before it finishes the sentence."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Event()

    @property
    def name(self) -> str:
        return "gated"

    async def request(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        raise AssertionError("the gateway streams this model")

    async def stream(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="Hello")
        await asyncio.to_thread(self.release.wait, 10)
        yield TextDelta(text=" world")
        self.finished.set()
        yield TurnComplete(turn=Turn(message=AssistantMessage(text="Hello world")))

    async def aclose(self) -> None:
        return None


async def test_a_client_leaving_mid_stream_leaves_the_server_healthy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    model = GatedModel()
    long_text = "All work and no play. " * 100
    caplog.set_level(logging.INFO)
    async with ScriptedServer([Step.reply(long_text), Step.reply("Still here.")], split=1) as upstream:
        settings = Settings(database_url=url, base_url=upstream.base_url, model=UPSTREAM)
        with server_thread(create_app(settings, model=model)) as server:
            async with httpx2.AsyncClient(base_url=server.url, headers=bearer(key), timeout=10) as http:
                # The server's own tool loop: the client goes while the model is mid-sentence.
                body = {"model": "toolwire", "messages": HELLO, "stream": True}
                async with http.stream("POST", CHAT, json=body) as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        if "Hello" in line:
                            break
                # Once the server saw the client go (its access line is written), the model goes on.
                await wait_for(lambda: _logged(caplog, f"POST {CHAT} 200"))
                model.release.set()
                # An upstream stream of many pieces: the client goes after the first.
                body = {"model": UPSTREAM, "input": "Talk", "stream": True}
                async with http.stream("POST", RESPONSES, json=body) as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        if "output_text.delta" in line:
                            break
                # The run the client left still ran to its end.
                assert await asyncio.to_thread(model.finished.wait, 10)
                after = await http.post(RESPONSES, json={"model": UPSTREAM, "input": "Still there?"})
                health = await http.get("/healthz")

    assert after.status_code == 200, after.text
    assert after.json()["output"][0]["content"][0]["text"] == "Still here."
    assert health.status_code == 200
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures == [], [r.getMessage() for r in failures]
