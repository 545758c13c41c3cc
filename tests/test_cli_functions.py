"""`toolwire connections` and `toolwire functions` as an administrator runs them: real processes.

The functions call the demo tickets API on 127.0.0.1; the store is a SQLite file, the key a fixed
`TOOLWIRE_SECRET_KEY`. No output, in any command, may contain the connection's credential.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.fernet import Fernet

from toolwire.demo.tickets import TicketsServer

TOKEN = "cli-token-5c1d-secret"

CREATE_TICKET = {
    "description": "Create a support ticket.",
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
}


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    with TicketsServer(tmp_path_factory.mktemp("tickets") / "tickets.db", token=TOKEN) as server:
        yield server


def environment(folder: Path, key: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLWIRE_", "XDG_"))}
    clean["TOOLWIRE_DATABASE_URL"] = f"sqlite:///{folder / 'toolwire.db'}"
    clean["TOOLWIRE_SECRET_KEY"] = key
    clean["XDG_CONFIG_HOME"] = str(folder / "config")
    return clean


@pytest.fixture(scope="module")
def prepared(tickets: TicketsServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding the tickets connection and create_ticket, made once; each test gets a copy."""
    folder, key = tmp_path_factory.mktemp("prepared"), Fernet.generate_key().decode()
    add_tickets(environment(folder, key), tickets)
    return folder / "toolwire.db", key


@pytest.fixture
def env(prepared: tuple[Path, str], tmp_path: Path) -> dict[str, str]:
    database, key = prepared
    shutil.copy(database, tmp_path / "toolwire.db")
    return environment(tmp_path, key)


def tw(env: dict[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolwire", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        input=input,
    )
    assert TOKEN not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done


def add_tickets(env: dict[str, str], server: TicketsServer) -> None:
    """The connection with its token read from standard input (the hidden prompt's fallback)."""
    done = tw(
        env, "connections", "add", "tickets", "--url", server.base_url, "--auth", "bearer", input=TOKEN + "\n"
    )
    assert done.returncode == 0, done.stderr
    added = tw(
        env, "functions", "add", "create_ticket", "--connection", "tickets", input=json.dumps(CREATE_TICKET)
    )
    assert added.returncode == 0, added.stderr


def test_listings_and_shows_name_the_credential_but_never_print_it(
    env: dict[str, str], tickets: TicketsServer, tmp_path: Path
) -> None:
    other = tw(
        env,
        *("connections", "add", "echo", "--url", f"{tickets.base_url}/echo", "--auth", "api_key_header"),
        *("--header-name", "X-API-Key", "--secret", f"api_key={TOKEN}"),
    )
    assert other.returncode == 0, other.stderr

    connections = tw(env, "connections", "list", "--json")
    shown = tw(env, "connections", "show", "tickets")
    functions = tw(env, "functions", "list", "--json")
    function = tw(env, "functions", "show", "create_ticket")

    echo, connection = json.loads(connections.stdout)
    assert connection["secrets_set"] == ["token"] and connection["functions"] == ["create_ticket"]
    assert echo["secrets_set"] == ["api_key"] and echo["auth"] == {
        "type": "api_key_header",
        "header_name": "X-API-Key",
    }
    assert "credentials: token (stored encrypted, never shown)" in shown.stdout
    assert [f["name"] for f in json.loads(functions.stdout)] == ["create_ticket"]
    assert json.loads(function.stdout)["request"] == {"method": "POST", "url": f"{tickets.base_url}/tickets"}
    assert TOKEN.encode() not in (tmp_path / "toolwire.db").read_bytes()


def test_test_prints_the_request_as_sent_with_auth_masked_and_the_answer(
    env: dict[str, str], tickets: TicketsServer
) -> None:
    done = tw(
        env, "functions", "test", "create_ticket", "--args", '{"title": "Cannot log in", "priority": "High"}'
    )
    refused = tw(env, "functions", "test", "create_ticket", "--args", '{"title": "x", "priority": "Urgent"}')

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"POST {tickets.base_url}/tickets"
    assert "Authorization: Bearer [redacted]" in lines
    assert '  "title": "Cannot log in",' in lines
    assert "HTTP 201" in lines and '"ticket_id": "SUP-' in done.stdout
    assert refused.returncode == 1 and refused.stdout.strip() == "Nothing was sent."
    assert "$.priority" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_a_broken_definition_prints_its_path_in_one_sentence(
    env: dict[str, str], tickets: TicketsServer
) -> None:
    broken: dict[str, Any] = json.loads(json.dumps(CREATE_TICKET))
    broken["http_request_body"] = {"fields": {"project": {"key": "$project_key"}}}

    done = tw(env, "functions", "add", "broken", "--connection", "tickets", input=json.dumps(broken))
    not_json = tw(env, "functions", "add", "x", "--connection", "tickets", input="{oops")

    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        "Error: Nothing was saved; fix this problem: http_request_body.fields.project.key: "
    )
    assert "$project_key" in line
    assert not_json.returncode == 1 and "is not valid JSON" in not_json.stderr


def test_edit_and_remove_keep_connections_and_functions_consistent(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Without options, the definition opens in $EDITOR: this editor rewrites the description.
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import json, sys\n"
        "path = sys.argv[1]\n"
        "doc = json.load(open(path))\n"
        "doc['description'] = 'Edited in an editor.'\n"
        "json.dump(doc, open(path, 'w'))\n"
    )
    env["EDITOR"] = f"{sys.executable} {editor}"
    edited = tw(env, "functions", "edit", "create_ticket")
    shown = tw(env, "functions", "show", "create_ticket")
    described = tw(
        env, "functions", "edit", "create_ticket", "--description", "Open a ticket.", "--rename", "open"
    )
    in_use = tw(env, "connections", "remove", "tickets")
    removed = tw(env, "functions", "remove", "open")
    gone = tw(env, "connections", "remove", "tickets")

    assert edited.returncode == 0, edited.stderr
    assert json.loads(shown.stdout)["description"] == "Edited in an editor."
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith("Updated function open (POST ")
    assert in_use.returncode == 1
    assert in_use.stderr.strip() == (
        "Error: Connection 'tickets' is used by open; remove those functions or bind them to another "
        "connection first."
    )
    assert removed.returncode == 0 and gone.returncode == 0
    assert gone.stdout == "Removed connection tickets and its stored credentials.\n"


def test_import_openapi_creates_one_function_per_operation(
    env: dict[str, str], tickets: TicketsServer, tmp_path: Path
) -> None:
    spec = tmp_path / "tickets-openapi.json"
    spec.write_text(httpx2.get(f"{tickets.base_url}/openapi.json").text)
    connection = tw(
        env,
        "connections",
        "add",
        "tickets",
        "--url",
        tickets.base_url,
        "--auth",
        "bearer",
        "--secret",
        f"token={TOKEN}",
        "--replace",
    )
    assert connection.returncode == 0, connection.stderr
    assert connection.stdout.endswith("credentials stored encrypted: token.\n")

    done = tw(env, "functions", "import-openapi", str(spec), "--connection", "tickets", "--json")
    again = tw(
        env, "functions", "import-openapi", f"{tickets.base_url}/openapi.json", "--connection", "tickets"
    )

    assert done.returncode == 0, done.stderr
    imported = {
        f["request"]["method"] + " " + f["request"]["url"]: f for f in json.loads(done.stdout)["functions"]
    }
    assert sorted(imported) == [
        f"GET {tickets.base_url}/tickets",
        f"GET {tickets.base_url}/tickets/{{ticket_id}}",
        f"POST {tickets.base_url}/tickets",
    ]
    create = imported[f"POST {tickets.base_url}/tickets"]
    assert create["definition"]["parameters"]["required"] == ["title", "priority"]
    assert again.returncode == 1 and "already exists" in again.stderr
    run = tw(
        env, "functions", "test", create["name"], "--args", '{"title": "From OpenAPI", "priority": "Low"}'
    )
    assert run.returncode == 0 and "HTTP 201" in run.stdout


def test_a_wrong_key_is_one_clear_sentence(env: dict[str, str], tickets: TicketsServer) -> None:
    env["TOOLWIRE_SECRET_KEY"] = Fernet.generate_key().decode()

    done = tw(env, "functions", "test", "create_ticket", "--args", '{"title": "x", "priority": "Low"}')

    assert done.returncode == 1
    assert done.stderr.startswith(
        "Error: The stored credentials cannot be decrypted with this TOOLWIRE_SECRET_KEY;"
    )
