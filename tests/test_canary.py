"""Canary secrets: credentials of every auth type never show up anywhere the service writes or sends.

A real `toolwire serve` process (JSON logs on stderr, at debug level) runs on a SQLite file, with a
scripted model server as its upstream. Five connections, one per auth type, each hold a canary
credential and point at a tickets API whose `/echo` answers with the request it received, headers
and query included: the worst case, an API that reflects the credential. The model calls every
echo function (reads and a write), then repeats everything it saw in its answer. Afterwards
everything is scanned for every canary, raw, URL-encoded, JSON-escaped and base64 (at every
alignment, so a canary inside `user:password` is found too): every request body the model server
received, the service's log, every API response of the run, every column of every table, and the
bytes of the SQLite file and its WAL. The model's API key, the secret key and the users' API keys
are canaries too, except where they must travel (the model key to the model, user keys from the
client).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx2
import pytest
from cryptography.fernet import Fernet

from service_support import add_user, bearer, chat_body, read_events, sqlite_url, toolwire_serve
from toolwire.demo.tickets import TicketsServer
from toolwire.messages import ToolResult
from toolwire.testing import ScriptedServer, Step


def _canary(kind: str) -> str:
    # `/`, `+` and `=` change under URL encoding; the hex part is unique to this run.
    return f"cnry-{kind}-{secrets.token_hex(8)}/+="


CANARIES = {kind: _canary(kind) for kind in ("header", "query", "bearer", "basic", "oauth", "model")}
CANARIES["fernet"] = FERNET = Fernet.generate_key().decode()
"""The service's secret key, which encrypts the stored credentials."""
BASIC_USER = "canary-basic-user"
OAUTH_CLIENT = "canary-oauth-client"


def forms(secret: str) -> set[str]:
    """Every way `secret` could be written down: raw, URL-encoded, JSON-escaped, base64."""
    found = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    found |= {f.lower() for f in found if "%" in f}
    if secret.startswith("cnry-"):
        found.add(secret.split("-")[2][:16])  # the unique hex part, alone
    for text in (secret, quote(secret, safe="")):
        for shift in range(3):
            # base64 of any text containing `text`: the middle of it does not depend on the rest.
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                encoded = encode(b"x" * shift + text.encode()).decode()
                found.add(encoded[4 * ((shift + 2) // 3) : -4])
    return found


def leaks(text: str, canaries: dict[str, str]) -> list[str]:
    return sorted(name for name, secret in canaries.items() for form in forms(secret) if form in text)


# --- the world: five tickets APIs, a model, the service ------------------------------------------


@pytest.fixture(scope="module")
def apis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TicketsServer]]:
    folder = tmp_path_factory.mktemp("canary")
    options = {
        "header": {"token": CANARIES["header"]},
        "query": {"token": CANARIES["query"]},
        "bearer": {"token": CANARIES["bearer"]},
        "basic": {"client_id": BASIC_USER, "client_secret": CANARIES["basic"]},
        "oauth": {"client_id": OAUTH_CLIENT, "client_secret": CANARIES["oauth"]},
    }
    with contextlib.ExitStack() as stack:
        yield {
            kind: stack.enter_context(TicketsServer(folder / f"{kind}.db", **values))
            for kind, values in options.items()
        }


def connections(apis: dict[str, TicketsServer]) -> list[dict[str, Any]]:
    auth = {
        "header": {
            "type": "api_key_header",
            "header_name": "X-API-Key",
            "secrets": {"api_key": CANARIES["header"]},
        },
        "query": {
            "type": "api_key_query",
            "query_name": "api_key",
            "secrets": {"api_key": CANARIES["query"]},
        },
        "bearer": {"type": "bearer", "secrets": {"token": CANARIES["bearer"]}},
        "basic": {"type": "basic", "username": BASIC_USER, "secrets": {"password": CANARIES["basic"]}},
        "oauth": {
            "type": "oauth2_client_credentials",
            "token_url": f"{apis['oauth'].base_url}/oauth/token",
            "client_id": OAUTH_CLIENT,
            "secrets": {"client_secret": CANARIES["oauth"]},
        },
    }
    return [{"name": kind, "url": f"{apis[kind].base_url}/echo", "auth": auth[kind]} for kind in auth]


def functions() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "additionalProperties": False}
    listed = [
        {
            "name": f"echo_{kind}",
            "description": f"Echo through {kind}.",
            "connection": kind,
            "definition": {"parameters": schema, "path": "/read"},
        }
        for kind in ("header", "query", "bearer", "basic", "oauth")
    ]
    write = {"parameters": schema, "method": "POST", "path": "/write", "http_request_body": {"note": "$note"}}
    return [
        *listed,
        {"name": "echo_write", "description": "Write.", "connection": "bearer", "definition": write},
    ]


def parrot(body: dict[str, Any], route: str) -> Step:
    """Call every echo function, then repeat every result it was given."""
    transcript = ScriptedServer.read_transcript(body, route)
    results = [m.content for m in transcript if isinstance(m, ToolResult)]
    if results or not body.get("tools"):
        return Step.reply("I saw: " + " ".join(results))
    names = [tool["function"]["name"] if "function" in tool else tool["name"] for tool in body["tools"]]
    return Step(tool_calls=[(name, {"note": "hello"}) for name in names if name.startswith("echo_")])


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, model_url: str) -> AsyncIterator[tuple[str, asyncio.Task[bytes]]]:
    values = {
        "TOOLWIRE_DATABASE_URL": sqlite_url(tmp_path),
        "TOOLWIRE_BASE_URL": model_url,
        "TOOLWIRE_MODEL": "scripted",
        "TOOLWIRE_API_KEY": CANARIES["model"],
        "TOOLWIRE_SECRET_KEY": FERNET,
        "TOOLWIRE_LOG_LEVEL": "debug",
    }
    async with toolwire_serve(values) as served:
        yield served.url, served.log


def database_text(path: Path) -> str:
    """Every value of every column of every table, as text."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for table in tables for row in db.execute(f'SELECT * FROM "{table}"'))


def file_bytes(path: Path) -> str:
    parts = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    return "".join(p.read_bytes().decode("latin-1") for p in parts if p.exists())


async def test_no_canary_reaches_the_model_the_logs_the_database_or_any_response(
    tmp_path: Path, apis: dict[str, TicketsServer]
) -> None:
    _, admin_key = await add_user(sqlite_url(tmp_path), "root", scopes=("admin",))
    _, user_key = await add_user(sqlite_url(tmp_path), "alice")
    # A user's key travels from the client; its secret part must be nowhere else.
    canaries = CANARIES | {"admin_key": admin_key.split("_", 2)[2], "user_key": user_key.split("_", 2)[2]}
    admin, user = bearer(admin_key), bearer(user_key)
    responses: list[str] = []
    written: list[str] = []

    async with (
        ScriptedServer(parrot) as model,
        serve(tmp_path, model.base_url) as (url, log),
        httpx2.AsyncClient(base_url=url, timeout=30) as client,
        asyncio.timeout(60),
    ):

        async def keep(response: httpx2.Response, status: int = 200) -> dict[str, Any]:
            assert response.status_code == status, response.text
            responses.append(response.text)
            return response.json() if response.content else {}

        for body in connections(apis):
            await keep(await client.post("/admin/api/connections", json=body, headers=admin), 201)
        for body in functions():
            await keep(await client.post("/admin/api/functions", json=body, headers=admin), 201)
        answer = await keep(await client.post("/v1/chat", json=chat_body("echo all"), headers=user))
        async with client.stream(
            "POST", "/v1/chat", json=chat_body("echo all", stream=True), headers=user
        ) as streamed:
            events = [event async for event in read_events(streamed)]
        responses.append(json.dumps(events))
        gateway = {"model": "toolwire", "messages": [{"role": "user", "content": "echo all"}]}
        await keep(await client.post("/v1/chat/completions", json=gateway, headers=user))
        for name in [f["name"] for f in functions()]:
            tested = await keep(
                await client.post(f"/admin/api/functions/{name}/test", json={"arguments": {}}, headers=admin)
            )
            assert tested["ok"] is True, tested
        for path in ("connections", "functions", "users", "audit?limit=1000"):
            await keep(await client.get(f"/admin/api/{path}", headers=admin))
        for kind in ("header", "query", "bearer", "basic", "oauth"):
            await keep(await client.get(f"/admin/api/connections/{kind}", headers=admin))
            await keep(await client.get(f"/admin/api/functions/echo_{kind}", headers=admin))
        written.append(file_bytes(tmp_path / "service.db"))  # the WAL, before a stop checkpoints it
    logged = (await log).decode()
    written.append(file_bytes(tmp_path / "service.db"))

    # The run did what it should: every echo ran and reflected its credential, redacted.
    calls = {c["name"]: c for c in answer["calls"]}
    assert sorted(calls) == sorted(f["name"] for f in functions())
    assert {c["outcome"] for c in calls.values()} == {"ok"}, answer
    assert calls["echo_bearer"]["result"]["headers"]["authorization"] == "Bearer [redacted]"
    assert calls["echo_basic"]["result"]["headers"]["authorization"] == "Basic [redacted]"
    assert calls["echo_header"]["result"]["headers"]["x-api-key"] == "[redacted]"
    assert calls["echo_query"]["result"]["query"] == {"api_key": "[redacted]", "note": "hello"}
    assert events[-1][0] == "done"
    issued = {token for api in apis.values() for token in api.state.issued}
    assert issued and apis["oauth"].state.token_requests >= 1
    canaries |= {f"oauth_token_{n}": token for n, token in enumerate(issued)}
    assert '"level": "debug"' in logged and "POST /v1/chat 200" in logged

    sent_to_model = [json.dumps(body) for body in model.requests]
    model_headers = [json.dumps({k: v for k, v in h.items() if k != "authorization"}) for h in model.headers]
    assert {h["authorization"] for h in model.headers} == {f"Bearer {CANARIES['model']}"}
    found = {
        "model requests": leaks("\n".join(sent_to_model + model_headers), canaries),
        "log": leaks(logged, canaries),
        "responses": leaks("\n".join(responses), canaries),
        "database rows": leaks(database_text(tmp_path / "service.db"), canaries),
        "database files": leaks("".join(written), canaries),
    }
    assert found == {where: [] for where in found}
