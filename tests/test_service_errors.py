"""Bad input gets a clear 4xx with OpenAI's error body; nothing unexpected leaks a traceback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from service_support import add_user, bearer, chat_body, server_thread, serving, sqlite_url
from toolwire.service import create_app
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest

ERROR_KEYS = {"message", "type", "param", "code"}


def echo(request: ModelRequest) -> str:
    return "hello"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx2.AsyncClient, str]]:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    settings = Settings(database_url=url, max_body_bytes=4096)
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


async def test_malformed_json_is_400_invalid_json(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client
    response = await http.post(
        "/v1/chat", content=b'{"messages": [', headers={**bearer(key), "content-type": "application/json"}
    )
    error = error_of(response, 400)
    assert error["code"] == "invalid_json"
    assert error["type"] == "invalid_request_error"


async def test_a_missing_body_is_400(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client
    error = error_of(await http.post("/v1/chat", headers=bearer(key)), 400)
    assert error["code"] == "missing_body"


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        ({"stream": "yes"}, "stream", "invalid_type"),
        ({"request_id": 42}, "request_id", "invalid_type"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": "hello"}, "messages", "invalid_type"),
        ({"messages": []}, "messages", "invalid_value"),
        ({"request_id": "has space"}, "request_id", "invalid_value"),
        ({"conversation_id": "../etc"}, "conversation_id", "invalid_value"),
        ({"temperature": 0.2}, "temperature", "unknown_parameter"),
        (
            {"messages": [{"role": "user", "content": "x", "name": "bob"}]},
            "messages[0].name",
            "unknown_parameter",
        ),
    ],
)
async def test_wrong_types_and_unknown_fields_name_the_field(
    client: tuple[httpx2.AsyncClient, str], change: dict[str, Any], param: str, code: str
) -> None:
    http, key = client
    error = error_of(
        await http.post("/v1/chat", json={**chat_body("hi"), **change}, headers=bearer(key)), 400
    )
    assert error["param"] == param
    assert error["code"] == code
    assert param in error["message"]


async def test_a_missing_field_is_named(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client
    body = {"messages": [{"role": "user", "content": "hi"}]}
    error = error_of(await http.post("/v1/chat", json=body, headers=bearer(key)), 400)
    assert (error["param"], error["code"]) == ("request_id", "missing_required_parameter")


async def test_the_last_message_must_be_the_users(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client
    body = {
        **chat_body("hi"),
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    }
    error = error_of(await http.post("/v1/chat", json=body, headers=bearer(key)), 400)
    assert "last message" in error["message"]


async def test_a_declared_oversized_body_is_413(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, key = client
    response = await http.post("/v1/chat", json=chat_body("x" * 5000), headers=bearer(key))
    error = error_of(response, 413)
    assert error["code"] == "request_too_large"
    assert "4096" in error["message"]


async def test_an_oversized_chunked_body_is_413_on_a_real_server(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    app = create_app(Settings(database_url=url, max_body_bytes=4096), model=FunctionModel(echo))

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"x" * 1000  # no Content-Length: the limit is counted while reading
        yield b'"}], "request_id": "big"}'

    with server_thread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as http:
            response = await http.post(
                "/v1/chat", content=chunks(), headers={**bearer(key), "content-type": "application/json"}
            )
    assert "content-length" not in response.request.headers
    assert error_of(response, 413)["code"] == "request_too_large"


async def test_an_unknown_path_is_404_and_a_wrong_method_405(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, _ = client
    assert error_of(await http.get("/v1/nothing"), 404)["code"] == "not_found"
    error = error_of(await http.get("/v1/chat"), 405)
    assert error["code"] == "method_not_allowed"
    assert "POST" in error["message"]


async def test_an_admin_body_with_unknown_fields_is_400(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, admin = await add_user(url, "root", scopes=("admin",))
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, http):
        unknown = await http.post(
            "/admin/api/users", json={"name": "x", "tenant_id": "other"}, headers=bearer(admin)
        )
        bad_scope = await http.post(
            "/admin/api/users", json={"name": "x", "scopes": ["NOT OK"]}, headers=bearer(admin)
        )
        bad_name = await http.post("/admin/api/users", json={"name": "a b"}, headers=bearer(admin))

    assert error_of(unknown, 400)["param"] == "tenant_id"
    assert error_of(bad_scope, 400)["code"] == "invalid_value"
    assert error_of(bad_name, 400)["code"] == "invalid_value"


async def test_an_unexpected_failure_is_500_without_a_traceback(tmp_path: Path) -> None:
    def broken(request: ModelRequest) -> str:
        raise RuntimeError("internal detail /srv/secret/path")

    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    async with serving(Settings(database_url=url), FunctionModel(broken), raise_app_exceptions=False) as (
        _,
        http,
    ):
        response = await http.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))

    error = error_of(response, 500)
    assert error["type"] == "server_error"
    assert "secret" not in response.text
    assert response.headers["x-request-id"]


async def test_the_openapi_document_describes_the_service(client: tuple[httpx2.AsyncClient, str]) -> None:
    http, _ = client
    document = (await http.get("/openapi.json")).json()

    assert {
        "/v1/chat",
        "/admin/api/users",
        "/admin/api/users/{user_id}",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= set(document["paths"])
    chat = document["paths"]["/v1/chat"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ChatRequest")
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    assert chat["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorResponse"
    )
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in str(document)
    assert document["components"]["schemas"]["ChatRequest"]["additionalProperties"] is False
