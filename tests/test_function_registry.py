"""The function registry on SQLite and PostgreSQL: checks on save, secrets encrypted, tools per tenant."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text

from pg import postgres_database
from toolwire.context import Context
from toolwire.demo.tickets import TicketsServer, tickets_functions
from toolwire.store import Database
from toolwire.store.secrets import SecretBox, SecretKeyError
from toolwire.tools.auth import AuthConfig
from toolwire.tools.http import Connection, DefinitionError, FunctionDefinition
from toolwire.tools.registry import (
    AlreadyExistsError,
    ConnectionInUseError,
    FunctionRegistry,
    NotFoundError,
    function_from_json,
)

TOKEN = "tok-9f3a-very-secret"
KEY = Fernet.generate_key().decode()


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    with TicketsServer(tmp_path_factory.mktemp("tickets") / "tickets.db", token=TOKEN) as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        database = await Database.open(f"sqlite:///{tmp_path / 'functions.db'}")
        yield database
        await database.aclose()
        return
    async with postgres_database() as url:
        database = await Database.open(url)
        yield database
        await database.aclose()


@pytest.fixture
def registry(db: Database) -> FunctionRegistry:
    return FunctionRegistry(db, SecretBox([KEY]), reserved={"create_item"})


async def register_tickets(registry: FunctionRegistry, server: TicketsServer, tenant: str = "acme") -> None:
    connection, functions = tickets_functions(server.base_url, TOKEN)
    await registry.add_connection(tenant, connection)
    await registry.add_functions(tenant, functions)


def weather_connection(**changes: Any) -> Connection:
    return dataclasses.replace(
        Connection(
            name="weather",
            url="https://api.example.com/v1/forecast",
            auth=AuthConfig(type="api_key_query", query_name="key", secrets={"api_key": "wk-123456"}),
        ),
        **changes,
    )


def weather_function(**changes: Any) -> FunctionDefinition:
    definition = FunctionDefinition(
        name="get_weather",
        description="Current weather for a city.",
        parameters={
            "type": "object",
            "required": ["city"],
            "properties": {"city": {"type": "string"}},
            "additionalProperties": False,
        },
        connection="weather",
    )
    return dataclasses.replace(definition, **changes)


# --- storage and views ---------------------------------------------------------------------------


async def test_views_name_the_stored_secrets_but_never_show_them(
    registry: FunctionRegistry, tickets: TicketsServer
) -> None:
    await register_tickets(registry, tickets)

    shown = await registry.get_connection("acme", "tickets")
    listed = await registry.list_connections("acme")

    assert shown.secrets_set == ["token"]
    assert shown.auth == {"type": "bearer"}
    assert shown.functions == ["create_ticket", "get_ticket", "list_tickets"]
    assert [c.to_json() for c in listed] == [shown.to_json()]
    functions = [f.to_json() for f in await registry.list_functions("acme")]
    assert TOKEN not in json.dumps([shown.to_json(), functions])
    create = await registry.get_function("acme", "create_ticket")
    assert (create.method, create.url) == ("POST", f"{tickets.base_url}/tickets")
    assert create.definition["http_request_body"]["priority"] == "$priority"


async def test_credentials_are_encrypted_at_rest(registry: FunctionRegistry, db: Database) -> None:
    await registry.add_connection("acme", weather_connection())

    async with db.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM connections"))).mappings().one()
    everything = json.dumps(
        {k: v if not isinstance(v, bytes) else v.decode() for k, v in row.items()}, default=str
    )
    assert "wk-123456" not in everything
    assert b"wk-123456" not in bytes(row["secrets"])
    assert json.loads(Fernet(KEY.encode()).decrypt(bytes(row["secrets"]))) == {"api_key": "wk-123456"}


async def test_a_wrong_key_is_a_clear_error(registry: FunctionRegistry, db: Database) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_function("acme", weather_function())
    other = FunctionRegistry(db, SecretBox([Fernet.generate_key().decode()]))

    with pytest.raises(
        SecretKeyError, match=r"^The stored credentials cannot be decrypted with this TOOLWIRE_SECRET_KEY;"
    ):
        await other.resolve("acme", "get_weather")
    # Reading the definitions needs no key at all.
    assert [f.name for f in await other.list_functions("acme")] == ["get_weather"]


async def test_a_rotated_key_still_reads_what_the_old_key_wrote(
    registry: FunctionRegistry, db: Database
) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_function("acme", weather_function())
    rotated = FunctionRegistry(
        db, SecretBox.from_env({"TOOLWIRE_SECRET_KEY": f"{Fernet.generate_key().decode()},{KEY}"})
    )

    _, connection = await rotated.resolve("acme", "get_weather")

    assert connection.auth.secrets == {"api_key": "wk-123456"}


# --- checks on save ------------------------------------------------------------------------------


async def test_definition_problems_name_their_json_paths(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection(method="POST"))
    broken = weather_function(http_request_body={"fields": {"project": {"key": "$project_key"}}})

    with pytest.raises(DefinitionError) as caught:
        await registry.add_function("acme", broken)

    assert (
        "http_request_body.fields.project.key",
        "placeholder $project_key has no parameter; add it to parameters.properties",
    ) in caught.value.problems
    assert await registry.list_functions("acme") == []


async def test_a_function_needs_a_connection_of_its_tenant(registry: FunctionRegistry) -> None:
    await registry.add_connection("other", weather_connection())

    with pytest.raises(DefinitionError) as caught:
        await registry.add_function("acme", weather_function())

    assert [path for path, _ in caught.value.problems] == ["connection"]


async def test_built_in_tool_names_are_refused(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection())
    with pytest.raises(DefinitionError) as caught:
        await registry.add_function("acme", weather_function(name="create_item"))
    assert caught.value.problems[0][0] == "name"


async def test_a_connection_without_its_credential_is_refused(registry: FunctionRegistry) -> None:
    with pytest.raises(DefinitionError) as caught:
        await registry.add_connection("acme", weather_connection(auth=AuthConfig(type="basic", username="u")))
    assert ("auth.secrets.password", "auth type basic needs the secret 'password'") in caught.value.problems


async def test_names_are_unique_per_tenant(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_connection("zeta", weather_connection())
    await registry.add_function("acme", weather_function())
    await registry.add_function("zeta", weather_function(description="Zeta's own."))

    with pytest.raises(AlreadyExistsError, match="replace"):
        await registry.add_function("acme", weather_function())
    with pytest.raises(AlreadyExistsError):
        await registry.add_connection("acme", weather_connection())
    replaced = await registry.add_function("acme", weather_function(description="Replaced."), replace=True)

    assert replaced.description == "Replaced."
    assert (await registry.get_function("zeta", "get_weather")).description == "Zeta's own."


async def test_replacing_a_connection_keeps_credentials_not_given_again(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_function("acme", weather_function())
    bare = AuthConfig(type="api_key_query", query_name="key")

    view = await registry.add_connection(
        "acme", weather_connection(url="https://eu.example.com/v1/forecast", auth=bare), replace=True
    )

    assert view.secrets_set == ["api_key"] and view.functions == ["get_weather"]
    _, connection = await registry.resolve("acme", "get_weather")
    assert connection.url == "https://eu.example.com/v1/forecast"
    assert connection.auth.secrets == {"api_key": "wk-123456"}
    # A new auth type needs its own credential: nothing is carried over from another type.
    with pytest.raises(DefinitionError, match=r"auth\.secrets\.token"):
        await registry.update_connection(
            "acme", "weather", weather_connection(auth=AuthConfig(type="bearer"))
        )


async def test_a_connection_change_that_breaks_a_function_is_refused(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_function("acme", weather_function())

    with pytest.raises(DefinitionError) as caught:
        await registry.update_connection("acme", "weather", weather_connection(method="POST"))

    assert caught.value.problems[0][0] == "functions.get_weather.http_request_body"
    assert (await registry.get_connection("acme", "weather")).method == "GET"


async def test_a_connection_in_use_cannot_be_removed(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_function("acme", weather_function())

    with pytest.raises(ConnectionInUseError, match="Connection 'weather' is used by get_weather; remove"):
        await registry.remove_connection("acme", "weather")
    await registry.remove_function("acme", "get_weather")
    await registry.remove_connection("acme", "weather")

    with pytest.raises(NotFoundError):
        await registry.get_connection("acme", "weather")


async def test_a_function_can_be_renamed_and_moved(registry: FunctionRegistry) -> None:
    await registry.add_connection("acme", weather_connection())
    await registry.add_connection("acme", weather_connection(name="backup", url="https://b.example.com/w"))
    await registry.add_function("acme", weather_function())
    before = await registry.version("acme")

    view = await registry.update_function(
        "acme", "get_weather", weather_function(name="weather_now", connection="backup")
    )

    assert (view.name, view.connection, view.url) == ("weather_now", "backup", "https://b.example.com/w")
    assert [f.name for f in await registry.list_functions("acme")] == ["weather_now"]
    assert await registry.version("acme") != before
    with pytest.raises(NotFoundError):
        await registry.get_function("acme", "get_weather")


def test_a_document_with_wrong_types_names_each_path() -> None:
    document = {"name": "x", "definition": {"parameters": [], "strict": "yes", "extra": 1}, "other": 2}

    with pytest.raises(DefinitionError) as caught:
        function_from_json(document)

    assert sorted(path for path, _ in caught.value.problems) == [
        "connection",
        "definition.extra",
        "definition.parameters",
        "definition.strict",
        "description",
        "other",
    ]


def test_a_shown_function_is_read_back_unchanged() -> None:
    definition = weather_function()
    shown: dict[str, Any] = {
        "name": "get_weather",
        "description": definition.description,
        "connection": "weather",
    }
    shown |= {"definition": definition.to_json(), "request": {"method": "GET"}, "created_at": "x"}
    assert function_from_json(shown) == definition
    assert function_from_json(definition.to_json(), name="n", description="d", connection="c").parameters == (
        definition.parameters
    )


# --- use -----------------------------------------------------------------------------------------


async def test_stored_functions_become_tools_that_call_the_api(
    registry: FunctionRegistry, tickets: TicketsServer
) -> None:
    await register_tickets(registry, tickets)

    async with httpx2.AsyncClient() as client:
        tools = {tool.name: tool for tool in await registry.load_tools("acme", client)}
        created = json.loads(
            await tools["create_ticket"].handler(
                {"title": "Cannot log in", "priority": "High"}, Context(tenant_id="acme")
            )
        )
        fetched = json.loads(
            await tools["get_ticket"].handler({"ticket_id": created["ticket_id"]}, Context(tenant_id="acme"))
        )
        with pytest.raises(PermissionError, match="another tenant"):
            await tools["list_tickets"].handler({}, Context(tenant_id="zeta"))
        assert await registry.load_tools("zeta", client) == []

    assert sorted(tools) == ["create_ticket", "get_ticket", "list_tickets"]
    assert (tools["create_ticket"].effect, tools["list_tickets"].effect) == ("write", "read")
    assert fetched["ticket"]["title"] == "Cannot log in" and fetched["ticket"]["priority"] == "High"


async def test_a_test_run_shows_the_request_sent_with_auth_masked(
    registry: FunctionRegistry, tickets: TicketsServer
) -> None:
    await register_tickets(registry, tickets)

    result = await registry.test_function("acme", "create_ticket", {"title": "Printer", "priority": "Low"})

    assert result.ok and result.status == 201
    assert result.request is not None
    assert (result.request.method, result.request.url) == ("POST", f"{tickets.base_url}/tickets")
    assert result.request.headers["Authorization"] == "Bearer [redacted]"
    assert result.request.body == {"title": "Printer", "priority": "Low"}
    assert json.loads(result.response)["ticket_id"].startswith("SUP-")
    assert TOKEN not in json.dumps(result.to_json())


async def test_a_test_run_masks_a_key_in_the_query_and_in_an_echo(
    registry: FunctionRegistry, tickets: TicketsServer
) -> None:
    auth = AuthConfig(type="api_key_query", query_name="api_key", secrets={"api_key": TOKEN})
    await registry.add_connection("acme", Connection(name="echo", url=f"{tickets.base_url}/echo", auth=auth))
    await registry.add_function("acme", weather_function(name="echo", connection="echo"))

    result = await registry.test_function("acme", "echo", {"city": "Berlin"})

    assert result.ok and result.request is not None
    assert result.request.url == f"{tickets.base_url}/echo?city=Berlin&api_key=[redacted]"
    assert json.loads(result.response)["query"] == {"city": "Berlin", "api_key": "[redacted]"}
    assert TOKEN not in json.dumps(result.to_json())


async def test_a_test_run_with_oauth2_shows_the_api_request_not_the_token_request(
    registry: FunctionRegistry, tickets: TicketsServer
) -> None:
    auth = AuthConfig(
        type="oauth2_client_credentials",
        token_url=f"{tickets.base_url}/oauth/token",
        client_id="demo-client",
        secrets={"client_secret": "demo-secret"},
    )
    connection, functions = tickets_functions(tickets.base_url, TOKEN)
    await registry.add_connection("acme", dataclasses.replace(connection, auth=auth))
    await registry.add_functions("acme", functions)

    result = await registry.test_function("acme", "list_tickets", {"limit": 1})

    assert result.ok and result.status == 200 and result.request is not None
    assert result.request.url == f"{tickets.base_url}/tickets?limit=1"
    assert result.request.headers["Authorization"] == "Bearer [redacted]"
    assert "demo-secret" not in json.dumps(result.to_json())


async def test_a_test_run_reports_upstream_errors_and_invalid_arguments(
    registry: FunctionRegistry, tickets: TicketsServer
) -> None:
    await register_tickets(registry, tickets)

    missing = await registry.test_function("acme", "get_ticket", {"ticket_id": "SUP-999999"})
    invalid = await registry.test_function("acme", "create_ticket", {"title": "x", "priority": "Urgent"})

    assert missing.status == 404 and missing.error is not None and missing.error["code"] == "upstream_error"
    assert "not found" in missing.response
    assert invalid.request is None and invalid.error is not None
    assert (
        invalid.error["code"] == "invalid_arguments" and invalid.error["details"][0]["path"] == "$.priority"
    )


# --- the key -------------------------------------------------------------------------------------


def test_the_key_file_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    key_file = tmp_path / "config" / "toolwire" / "secret.key"
    token = SecretBox(key_file=key_file).encrypt({"token": "t"})

    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert SecretBox(key_file=key_file).decrypt(token) == {"token": "t"}
    assert [p.name for p in key_file.parent.iterdir()] == ["secret.key"]


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_text(Fernet.generate_key().decode())
    os.chmod(key_file, 0o644)

    with pytest.raises(SecretKeyError, match="chmod 600"):
        SecretBox(key_file=key_file).encrypt({"token": "t"})


def test_nothing_is_read_or_created_without_credentials(tmp_path: Path) -> None:
    box = SecretBox(key_file=tmp_path / "secret.key")
    assert box.encrypt({}) is None and box.decrypt(None) == {}
    assert not (tmp_path / "secret.key").exists()


def test_a_malformed_key_says_how_to_make_one() -> None:
    with pytest.raises(SecretKeyError, match="Fernet.generate_key"):
        SecretBox.from_env({"TOOLWIRE_SECRET_KEY": "hunter2"}).encrypt({"token": "t"})
