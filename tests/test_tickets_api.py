"""The demo tickets API: a real FastAPI + SQLite service on 127.0.0.1, and its HTTP functions."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest

from toolwire.context import Context
from toolwire.demo.tickets import TicketsServer, tickets_functions
from toolwire.tools.http import UpstreamError, http_tools

TOKEN = "tickets-token-4711"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    db = tmp_path_factory.mktemp("tickets") / "tickets.db"
    with TicketsServer(db, token=TOKEN, client_id="app", client_secret="app-secret") as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(trust_env=False) as http:
        yield http


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_create_then_read_back_a_ticket(server: TicketsServer, client: httpx2.AsyncClient) -> None:
    created = await client.post(
        f"{server.base_url}/tickets",
        json={"title": "Login broken", "priority": "High", "description": "Nobody can log in."},
        headers=bearer(),
    )
    assert created.status_code == 201
    body = created.json()
    assert body["status"] == "success" and body["ticket_id"].startswith("SUP-")

    one = await client.get(f"{server.base_url}/tickets/{body['ticket_id']}", headers=bearer())
    assert one.json()["ticket"] | {"created_at": None} == {
        "ticket_id": body["ticket_id"],
        "title": "Login broken",
        "priority": "High",
        "description": "Nobody can log in.",
        "created_at": None,
    }
    listed = await client.get(f"{server.base_url}/tickets", params={"priority": "High"}, headers=bearer())
    assert body["ticket_id"] in [t["ticket_id"] for t in listed.json()["tickets"]]
    assert all(t["priority"] == "High" for t in listed.json()["tickets"])


async def test_errors_have_the_standard_shape(server: TicketsServer, client: httpx2.AsyncClient) -> None:
    missing = await client.get(f"{server.base_url}/tickets/SUP-999999", headers=bearer())
    assert (missing.status_code, missing.json()) == (
        404,
        {"status": "error", "message": "Ticket SUP-999999 not found."},
    )
    invalid = await client.post(
        f"{server.base_url}/tickets", json={"title": "x", "priority": "Urgent"}, headers=bearer()
    )
    assert invalid.status_code == 422
    assert invalid.json()["status"] == "error" and "priority" in invalid.json()["message"]
    unauthorized = await client.get(f"{server.base_url}/tickets")
    assert unauthorized.status_code == 401 and unauthorized.json()["status"] == "error"
    assert unauthorized.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("headers", "params"),
    [
        ({"Authorization": f"Bearer {TOKEN}"}, {}),
        ({"X-API-Key": TOKEN}, {}),
        ({}, {"api_key": TOKEN}),
        ({}, {}),  # Basic, through httpx2's own auth below
    ],
    ids=["bearer", "api-key-header", "api-key-query", "basic"],
)
async def test_every_credential_form_is_accepted_and_a_wrong_one_is_not(
    server: TicketsServer, client: httpx2.AsyncClient, headers: dict[str, str], params: dict[str, str]
) -> None:
    basic = httpx2.BasicAuth("app", "app-secret") if not headers and not params else None
    ok = await client.get(f"{server.base_url}/tickets", headers=headers, params=params, auth=basic)
    assert ok.status_code == 200
    wrong_headers = {k: v.replace(TOKEN, "nope") for k, v in headers.items()}
    wrong_params = dict.fromkeys(params, "nope")
    wrong_basic = httpx2.BasicAuth("app", "wrong") if basic else None
    refused = await client.get(
        f"{server.base_url}/tickets", headers=wrong_headers, params=wrong_params, auth=wrong_basic
    )
    assert refused.status_code == 401


async def test_oauth_token_endpoint_hands_out_working_tokens_and_counts_calls(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    before = server.state.token_requests
    refused = await client.post(
        f"{server.base_url}/oauth/token", data={"grant_type": "client_credentials"}, auth=("app", "bad")
    )
    assert (refused.status_code, refused.json()) == (401, {"error": "invalid_client"})
    issued = await client.post(
        f"{server.base_url}/oauth/token",
        data={"grant_type": "client_credentials", "client_id": "app", "client_secret": "app-secret"},
    )
    token = issued.json()
    assert token["token_type"] == "Bearer" and token["expires_in"] == 3600
    assert server.state.token_requests == before + 2
    assert (
        await client.get(f"{server.base_url}/tickets", headers=bearer(token["access_token"]))
    ).status_code == 200
    server.state.revoke_tokens()
    assert (
        await client.get(f"{server.base_url}/tickets", headers=bearer(token["access_token"]))
    ).status_code == 401


async def test_an_idempotency_key_creates_one_ticket(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    ticket = {"title": "Printer", "priority": "Low"}
    headers = bearer() | {"Idempotency-Key": "req-1:create_ticket:0"}
    first = (await client.post(f"{server.base_url}/tickets", json=ticket, headers=headers)).json()
    again = (await client.post(f"{server.base_url}/tickets", json=ticket, headers=headers)).json()
    other = (await client.post(f"{server.base_url}/tickets", json=ticket, headers=bearer())).json()
    assert first["ticket_id"] == again["ticket_id"] and again["replayed"] is True
    assert other["ticket_id"] != first["ticket_id"]


async def test_echo_shows_the_request_it_received(server: TicketsServer, client: httpx2.AsyncClient) -> None:
    answer = await client.post(f"{server.base_url}/echo/a%2Fb?x=1", content=b'{"k": 1}', headers=bearer())
    echoed = answer.json()
    assert echoed["method"] == "POST" and echoed["raw_path"] == "/echo/a%2Fb"
    assert echoed["query"] == {"x": "1"} and json.loads(echoed["body"]) == {"k": 1}
    assert echoed["headers"]["authorization"] == f"Bearer {TOKEN}"


async def test_the_demo_functions_drive_the_api_through_tools(
    server: TicketsServer, client: httpx2.AsyncClient
) -> None:
    connection, definitions = tickets_functions(server.base_url + "/", TOKEN)
    assert [d.name for d in definitions] == ["create_ticket", "list_tickets", "get_ticket"]
    tools = {t.name: t for t in http_tools(definitions, [connection], client=client)}
    assert {n: t.effect for n, t in tools.items()} == {
        "create_ticket": "write",
        "list_tickets": "read",
        "get_ticket": "read",
    }

    created = await tools["create_ticket"].handler(
        {"title": "Zugangsdaten verloren", "priority": "High"}, Context()
    )
    # The API's answer reaches the model unchanged.
    body = json.loads(created)
    assert body == {
        "status": "success",
        "ticket_id": body["ticket_id"],
        "message": "Ticket created successfully",
    }
    fetched = json.loads(await tools["get_ticket"].handler({"ticket_id": body["ticket_id"]}, Context()))
    assert fetched["ticket"]["title"] == "Zugangsdaten verloren" and fetched["ticket"]["description"] == ""
    listed = json.loads(await tools["list_tickets"].handler({"priority": "High", "limit": 500}, Context()))
    assert body["ticket_id"] in [t["ticket_id"] for t in listed["tickets"]]

    with pytest.raises(UpstreamError) as failed:
        await tools["create_ticket"].handler({"title": "", "priority": "High"}, Context())
    assert failed.value.status == 422 and json.loads(failed.value.body)["status"] == "error"


def test_the_server_listens_on_loopback_and_stops(tmp_path: Path) -> None:
    with TicketsServer(tmp_path / "t.db") as running:
        url = running.base_url
        assert url.startswith("http://127.0.0.1:")
        assert httpx2.get(f"{url}/tickets", headers=bearer("demo-token"), trust_env=False).status_code == 200
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(f"{url}/tickets", trust_env=False)
