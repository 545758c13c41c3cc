"""The admin API for functions and connections: CRUD per tenant, write-only credentials, test runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI

from service_support import add_user, bearer, serving, sqlite_url
from toolwire.demo.tickets import TicketsServer
from toolwire.settings import Settings
from toolwire.testing import ScriptedModel

TOKEN = "tickets-token-3b7e-secret"


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    with TicketsServer(tmp_path_factory.mktemp("tickets") / "tickets.db", token=TOKEN) as server:
        yield server


@dataclass
class Service:
    app: FastAPI
    client: httpx2.AsyncClient
    admin: dict[str, str]
    """Headers of an admin of tenant acme."""
    other_admin: dict[str, str]
    """Headers of an admin of tenant zeta."""
    user: dict[str, str]
    """Headers of a user of acme without the admin scope."""


@pytest.fixture
async def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Service]:
    monkeypatch.setenv("TOOLWIRE_SECRET_KEY", Fernet.generate_key().decode())
    url = sqlite_url(tmp_path)
    _, admin = await add_user(url, "root", tenant="acme", scopes=("admin",))
    _, other = await add_user(url, "root", tenant="zeta", scopes=("admin",))
    _, user = await add_user(url, "alice", tenant="acme")
    async with serving(Settings(database_url=url), ScriptedModel()) as (app, client):
        yield Service(app, client, bearer(admin), bearer(other), bearer(user))


def tickets_connection(server: TicketsServer, **changes: Any) -> dict[str, Any]:
    body = {
        "name": "tickets",
        "url": server.base_url,
        "auth": {"type": "bearer", "secrets": {"token": TOKEN}},
    }
    return body | changes


CREATE_TICKET = {
    "name": "create_ticket",
    "description": "Create a support ticket.",
    "connection": "tickets",
    "definition": {
        "parameters": {
            "type": "object",
            "required": ["title", "priority"],
            "properties": {
                "title": {"type": "string"},
                "priority": {"type": "string", "enum": ["Low", "Medium", "High"]},
            },
            "additionalProperties": False,
        },
        "http_request_body": {"title": "$title", "priority": "$priority"},
        "method": "POST",
        "path": "/tickets",
    },
}


async def test_connections_are_created_shown_and_updated_without_returning_credentials(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin = service.client, service.admin

    created = await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)
    listed = await client.get("/admin/api/connections", headers=admin)
    shown = await client.get("/admin/api/connections/tickets", headers=admin)
    moved = tickets_connection(tickets, timeout=5.0, auth={"type": "bearer"})
    updated = await client.put("/admin/api/connections/tickets", json=moved, headers=admin)

    assert created.status_code == 201, created.text
    assert created.json()["secrets_set"] == ["token"] and created.json()["auth"] == {"type": "bearer"}
    assert [c["name"] for c in listed.json()["data"]] == ["tickets"]
    assert updated.status_code == 200 and updated.json()["timeout"] == 5.0
    assert updated.json()["secrets_set"] == ["token"]  # kept: not given again
    for response in (created, listed, shown, updated):
        assert TOKEN not in response.text


async def test_a_function_is_created_and_tested_with_the_request_shown_masked(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin = service.client, service.admin
    await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)

    created = await client.post("/admin/api/functions", json=CREATE_TICKET, headers=admin)
    tested = await client.post(
        "/admin/api/functions/create_ticket/test",
        json={"arguments": {"title": "Cannot log in", "priority": "High"}},
        headers=admin,
    )

    assert created.status_code == 201, created.text
    assert created.json()["request"] == {"method": "POST", "url": f"{tickets.base_url}/tickets"}
    assert tested.status_code == 200, tested.text
    result = tested.json()
    assert result["ok"] is True and result["error"] is None
    assert result["request"]["method"] == "POST" and result["request"]["url"] == f"{tickets.base_url}/tickets"
    assert result["request"]["headers"]["Authorization"] == "Bearer [redacted]"
    assert result["request"]["body"] == {"title": "Cannot log in", "priority": "High"}
    assert result["response"]["status"] == 201
    assert json.loads(result["response"]["body"])["ticket_id"].startswith("SUP-")
    assert TOKEN not in tested.text


async def test_a_broken_definition_is_422_naming_each_json_path(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin = service.client, service.admin
    await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)
    broken = json.loads(json.dumps(CREATE_TICKET))
    broken["definition"]["http_request_body"] = {"fields": {"project": {"key": "$project_key"}}}
    broken["definition"]["parameters"]["required"].append("summary")

    response = await client.post("/admin/api/functions", json=broken, headers=admin)

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_definition"
    assert error["param"] == "definition.parameters.required[2]"
    assert [p["param"] for p in error["problems"]] == [
        "definition.parameters.required[2]",
        "definition.http_request_body.fields.project.key",
    ]
    assert "$project_key" in error["message"]
    assert (await client.get("/admin/api/functions", headers=admin)).json()["data"] == []


async def test_tenants_see_only_their_own_functions_and_connections(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin, other = service.client, service.admin, service.other_admin
    await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)
    await client.post("/admin/api/functions", json=CREATE_TICKET, headers=admin)

    hidden = await client.get("/admin/api/functions/create_ticket", headers=other)
    test = await client.post("/admin/api/functions/create_ticket/test", json={}, headers=other)
    remove = await client.delete("/admin/api/connections/tickets", headers=other)

    assert hidden.status_code == test.status_code == remove.status_code == 404
    assert hidden.json()["error"]["code"] == "not_found"
    assert (await client.get("/admin/api/connections", headers=other)).json()["data"] == []


async def test_a_connection_in_use_is_kept_until_its_functions_are_gone(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin = service.client, service.admin
    await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)
    await client.post("/admin/api/functions", json=CREATE_TICKET, headers=admin)

    refused = await client.delete("/admin/api/connections/tickets", headers=admin)
    gone = await client.delete("/admin/api/functions/create_ticket", headers=admin)
    removed = await client.delete("/admin/api/connections/tickets", headers=admin)

    assert refused.status_code == 409 and refused.json()["error"]["code"] == "connection_in_use"
    assert "create_ticket" in refused.json()["error"]["message"]
    assert gone.status_code == removed.status_code == 204


async def test_importing_the_tickets_apis_own_openapi_document(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin = service.client, service.admin
    await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)
    async with httpx2.AsyncClient() as plain:
        document = (await plain.get(f"{tickets.base_url}/openapi.json")).json()

    imported = await client.post(
        "/admin/api/functions/import-openapi",
        json={"connection": "tickets", "document": document},
        headers=admin,
    )
    names = {f["name"]: f for f in imported.json()["functions"]}
    listing = next(
        name
        for name, f in names.items()
        if f["request"]["method"] == "GET" and "{" not in f["request"]["url"]
    )
    run = await client.post(
        f"/admin/api/functions/{listing}/test", json={"arguments": {"priority": "High"}}, headers=admin
    )

    assert imported.status_code == 201, imported.text
    assert len(names) == 3
    creating = next(f for f in names.values() if f["request"]["method"] == "POST")
    assert creating["definition"]["http_request_body"] == {
        "title": "$title",
        "priority": "$priority",
        "description": "$description",
    }
    assert run.json()["ok"] is True and run.json()["request"]["url"].endswith("/tickets?priority=High")
    again = await client.post(
        "/admin/api/functions/import-openapi",
        json={"connection": "tickets", "document": document},
        headers=admin,
    )
    assert again.status_code == 409


async def test_a_new_function_is_a_tool_of_the_next_chat_of_its_tenant(
    service: Service, tickets: TicketsServer
) -> None:
    client, admin = service.client, service.admin
    assistant = service.app.state.toolwire.started
    before = await assistant.runner_for("acme")
    await client.post("/admin/api/connections", json=tickets_connection(tickets), headers=admin)
    await client.post("/admin/api/functions", json=CREATE_TICKET, headers=admin)

    after = await assistant.runner_for("acme")

    assert "create_ticket" not in before.toolbox
    assert "create_ticket" in after.toolbox and "create_item" in after.toolbox
    assert "create_ticket" not in (await assistant.runner_for("zeta")).toolbox


async def test_the_admin_api_needs_an_admin_key(service: Service) -> None:
    client = service.client

    anonymous = await client.get("/admin/api/functions")
    user = await client.post(
        "/admin/api/connections", json={"name": "x", "url": "https://x.example"}, headers=service.user
    )

    assert anonymous.status_code == 401
    assert user.status_code == 403 and user.json()["error"]["code"] == "insufficient_scope"


async def test_request_bodies_are_strict(service: Service) -> None:
    response = await service.client.post(
        "/admin/api/connections",
        json={"name": "x", "url": "https://x.example", "auth": {"type": "bearer", "token": "oops"}},
        headers=service.admin,
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "auth.token"
    assert "oops" not in response.text
