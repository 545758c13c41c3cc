"""Connection auth against the real tickets API: every auth type, wrong credentials, OAuth2 token
caching and refresh, and credentials never reaching what the model reads."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest

from toolwire.context import Context
from toolwire.demo.tickets import TicketsServer
from toolwire.tools.auth import AuthConfig, ConnectionAuth, connection_auth
from toolwire.tools.base import Tool
from toolwire.tools.http import Connection, FunctionDefinition, UpstreamError, http_tool, prepare

TOKEN = "tok-Ab9/+=xyz"
CLIENT_ID = "app-client"
CLIENT_SECRET = "s3cret/+ü:z"
AUTH_TYPES = ["api_key_header", "api_key_query", "basic", "bearer", "oauth2_client_credentials"]


def start(tmp_path: Any) -> TicketsServer:
    return TicketsServer(tmp_path / "t.db", token=TOKEN, client_id=CLIENT_ID, client_secret=CLIENT_SECRET)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    with start(tmp_path_factory.mktemp("auth")) as running:
        yield running


@pytest.fixture
def server(tmp_path: Any) -> Iterator[TicketsServer]:
    """A server of its own, for tests that count token requests or revoke tokens."""
    with start(tmp_path) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(trust_env=False) as http:
        yield http


def auth_config(kind: str, base_url: str, secret: str | None = None) -> AuthConfig:
    """A working configuration of `kind`, or one whose secret is replaced by `secret`."""
    configs = {
        "none": AuthConfig(),
        "api_key_header": AuthConfig(
            type="api_key_header", header_name="X-API-Key", secrets={"api_key": TOKEN}
        ),
        "api_key_query": AuthConfig(type="api_key_query", query_name="api_key", secrets={"api_key": TOKEN}),
        "basic": AuthConfig(type="basic", username=CLIENT_ID, secrets={"password": CLIENT_SECRET}),
        "bearer": AuthConfig(type="bearer", secrets={"token": TOKEN}),
        "oauth2_client_credentials": AuthConfig(
            type="oauth2_client_credentials",
            token_url=f"{base_url}/oauth/token",
            client_id=CLIENT_ID,
            scopes=("tickets",),
            secrets={"client_secret": CLIENT_SECRET},
        ),
    }
    config = configs[kind]
    if secret is not None:
        config = AuthConfig(**{**config.__dict__, "secrets": dict.fromkeys(config.secrets, secret)})
    return config


def function(path: str) -> FunctionDefinition:
    return FunctionDefinition(
        name=path.strip("/").replace("/", "_") or "root",
        description=f"GET {path}",
        parameters={"type": "object", "properties": {}},
        connection="tickets",
        path=path,
    )


def tool_for(
    server: TicketsServer, client: httpx2.AsyncClient, path: str, auth: AuthConfig | ConnectionAuth
) -> Tool:
    config = auth.config if isinstance(auth, ConnectionAuth) else auth
    connection = Connection(name="tickets", url=server.base_url, auth=config)
    flow = auth if isinstance(auth, ConnectionAuth) else None
    return http_tool(function(path), connection, client=client, auth=flow)


def secret_forms(*values: str) -> list[str]:
    forms = []
    for value in values:
        forms += [value, base64.b64encode(value.encode()).decode().rstrip("=")]
    return forms


@pytest.mark.parametrize("kind", AUTH_TYPES)
async def test_each_auth_type_is_accepted_and_never_shown_to_the_model(
    shared: TicketsServer, client: httpx2.AsyncClient, kind: str
) -> None:
    config = auth_config(kind, shared.base_url)
    listed = json.loads(await tool_for(shared, client, "/tickets", config).handler({}, Context()))
    assert listed["status"] == "success"

    # The echo endpoint sends the credential straight back; the model sees it redacted.
    content = await tool_for(shared, client, "/echo", config).handler({}, Context())
    for form in secret_forms(TOKEN, CLIENT_SECRET, f"{CLIENT_ID}:{CLIENT_SECRET}"):
        assert form not in content
    echoed = json.loads(content)
    shown = {
        "api_key_header": echoed["headers"].get("x-api-key"),
        "api_key_query": echoed["query"].get("api_key"),
        "basic": echoed["headers"].get("authorization"),
        "bearer": echoed["headers"].get("authorization"),
        "oauth2_client_credentials": echoed["headers"].get("authorization"),
    }[kind]
    expected = {"basic": "Basic [redacted]", "api_key_header": "[redacted]", "api_key_query": "[redacted]"}
    assert shown == expected.get(kind, "Bearer [redacted]")


@pytest.mark.parametrize("kind", ["none", *AUTH_TYPES])
async def test_a_wrong_credential_is_an_upstream_error_401_with_the_body(
    shared: TicketsServer, client: httpx2.AsyncClient, kind: str
) -> None:
    config = auth_config(kind, shared.base_url, secret="wrong-value")
    with pytest.raises(UpstreamError) as failed:
        await tool_for(shared, client, "/tickets", config).handler({}, Context())
    assert failed.value.code == "upstream_error" and failed.value.status == 401
    body = json.loads(failed.value.body)
    if kind == "oauth2_client_credentials":
        assert body == {"error": "invalid_client"} and "token endpoint" in str(failed.value)
    else:
        assert body == {
            "status": "error",
            "message": "Missing or invalid credentials: send Authorization: Bearer <token>.",
        }
    assert "wrong-value" not in str(failed.value)


async def test_oauth_token_is_fetched_once_cached_and_refreshed_after_expiry(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    now = [1000.0]
    auth = connection_auth(auth_config("oauth2_client_credentials", server.base_url), clock=lambda: now[0])
    listing = tool_for(server, client, "/tickets", auth)
    for _ in range(3):
        assert json.loads(await listing.handler({}, Context()))["status"] == "success"
    assert server.state.token_requests == 1

    now[0] += 3600 - 31  # still inside the lifetime minus the leeway
    await listing.handler({}, Context())
    assert server.state.token_requests == 1
    now[0] += 2
    await listing.handler({}, Context())
    assert server.state.token_requests == 2
    assert len(server.state.issued) == 2


async def test_oauth_token_is_refreshed_when_the_api_answers_401(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    auth = connection_auth(auth_config("oauth2_client_credentials", server.base_url))
    listing = tool_for(server, client, "/tickets", auth)
    await listing.handler({}, Context())
    server.state.revoke_tokens()
    assert json.loads(await listing.handler({}, Context()))["status"] == "success"
    assert server.state.token_requests == 2
    assert len(server.state.issued) == 1  # the request was sent again with the new token


async def test_oauth_concurrent_calls_share_one_token_request(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    auth = connection_auth(auth_config("oauth2_client_credentials", server.base_url))
    listing = tool_for(server, client, "/tickets", auth)
    answers = await asyncio.gather(*(listing.handler({}, Context()) for _ in range(5)))
    assert all(json.loads(a)["status"] == "success" for a in answers)
    assert server.state.token_requests == 1


async def test_oauth_client_secret_post_is_supported(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    config = auth_config("oauth2_client_credentials", server.base_url)
    config = AuthConfig(**{**config.__dict__, "token_auth_method": "client_secret_post"})
    assert (
        json.loads(await tool_for(server, client, "/tickets", config).handler({}, Context()))["status"]
        == "success"
    )
    assert server.state.token_requests == 1


async def test_a_token_endpoint_that_answers_no_token_is_a_clear_error(
    shared: TicketsServer, client: httpx2.AsyncClient
) -> None:
    # /echo accepts the client's Basic credentials and answers 200 with them, but no access_token.
    config = AuthConfig(
        type="oauth2_client_credentials",
        token_url=f"{shared.base_url}/echo",
        client_id=CLIENT_ID,
        secrets={"client_secret": CLIENT_SECRET},
    )
    with pytest.raises(UpstreamError, match="did not answer with a bearer access token") as failed:
        await tool_for(shared, client, "/tickets", config).handler({}, Context())
    assert failed.value.status == 200
    for form in secret_forms(CLIENT_SECRET, f"{CLIENT_ID}:{CLIENT_SECRET}"):
        assert form not in failed.value.body
    assert "Basic [redacted]" in failed.value.body


@pytest.mark.parametrize("kind", AUTH_TYPES)
def test_the_prepared_request_masks_the_credential(kind: str) -> None:
    config = auth_config(kind, "http://127.0.0.1:9")
    connection = Connection(name="tickets", url="http://127.0.0.1:9", auth=config)
    prepared = prepare(function("/tickets"), connection, {})
    shown = json.dumps([prepared.url, prepared.headers])
    assert all(form not in shown for form in secret_forms(TOKEN, CLIENT_SECRET))
    assert "[redacted]" in shown
    if kind == "api_key_query":
        assert prepared.url == "http://127.0.0.1:9/tickets?api_key=[redacted]"


@pytest.mark.parametrize(
    ("config", "paths"),
    [
        (AuthConfig(type="bearer"), ["auth.secrets.token"]),
        (AuthConfig(type="api_key_header", secrets={"api_key": "k"}), ["auth.header_name"]),
        (
            AuthConfig(type="api_key_header", header_name="Host", secrets={"api_key": "k"}),
            ["auth.header_name"],
        ),
        (AuthConfig(type="api_key_query", secrets={"api_key": "k"}), ["auth.query_name"]),
        (AuthConfig(type="basic", secrets={"password": "p"}), ["auth.username"]),
        (
            AuthConfig(type="oauth2_client_credentials", token_url="/token"),
            ["auth.secrets.client_secret", "auth.token_url", "auth.client_id"],
        ),
        (AuthConfig(type="kerberos"), ["auth.type"]),  # type: ignore[arg-type]
    ],
)
def test_incomplete_auth_settings_are_named_by_path(config: AuthConfig, paths: list[str]) -> None:
    assert [path for path, _ in config.problems()] == paths
    connection = Connection(name="c", url="https://api.example.com", auth=config)
    assert [path for path, _ in connection.problems()] == paths


def test_settings_never_show_their_secrets() -> None:
    config = auth_config("oauth2_client_credentials", "https://auth.example.com")
    connection = Connection(name="c", url="https://api.example.com", auth=config)
    assert CLIENT_SECRET not in repr(config) and CLIENT_SECRET not in repr(connection)
    assert CLIENT_SECRET not in repr(connection_auth(config))
