"""The whole path of seed 001: a model proposes create_ticket, toolwire calls the real tickets API.

`toolwire demo` runs as a user runs it, in its own process, against a scripted OpenAI-compatible
endpoint on 127.0.0.1; the ticket must land in the tickets API's own SQLite database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from toolwire.assistant import function_registry, open_assistant
from toolwire.demo.tickets import TicketsServer, tickets_functions
from toolwire.settings import Settings
from toolwire.store import Database
from toolwire.store.secrets import SecretBox
from toolwire.testing import ScriptedModel, call, reply
from toolwire.testing.server import ScriptedServer, Step

TICKET = {"title": "User cannot log in", "priority": "High", "description": "The user cannot log in."}


def support_model(body: dict[str, Any], route: str) -> Step:
    """Books or opens a ticket as asked, then reports what the system answered."""
    messages = body["messages"]
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        answer = json.loads(results[-1]["content"])
        if "ticket_id" in answer:
            return Step.reply(f"Opened high-priority ticket {answer['ticket_id']}.")
        return Step.reply(f"Booked {answer['item']['title']} for {answer['item']['amount']}.")
    asked = [m["content"] for m in messages if m["role"] == "user"][-1]
    if "ticket" in asked:
        return Step.call("create_ticket", TICKET)
    return Step.call("create_item", {"category": "food", "amount": 12.5, "title": "lunch"})


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLWIRE_", "XDG_"))}
    clean["TOOLWIRE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'toolwire.db'}"
    clean["TOOLWIRE_MODEL"] = "scripted"
    clean["XDG_DATA_HOME"] = str(tmp_path / "data")
    clean["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return clean


def demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "toolwire", "demo", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)


def tickets(tmp_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "data" / "toolwire" / "tickets.db") as db:
        return db.execute("SELECT id, title, priority, description FROM tickets ORDER BY id").fetchall()


def test_demo_books_an_expense_and_opens_a_ticket_through_the_tickets_api(
    env: dict[str, str], tmp_path: Path
) -> None:
    with ScriptedServer(support_model) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        done = demo(env, "--json")
        offered = [[tool["function"]["name"] for tool in r.get("tools", [])] for r in server.requests]
        prompt = server.requests[-1]["messages"][0]["content"]
        sent_results = [m["content"] for r in server.requests for m in r["messages"] if m["role"] == "tool"]

    assert done.returncode == 0, done.stderr
    booked, opened = (json.loads(line) for line in done.stdout.splitlines())
    assert [c["name"] for c in booked["calls"]] == ["create_item"] and "lunch" in booked["answer"]
    [ticket_call] = opened["calls"]
    assert ticket_call["name"] == "create_ticket" and ticket_call["outcome"] == "ok"
    assert ticket_call["result"] == {
        "status": "success",
        "ticket_id": "SUP-1001",
        "message": "Ticket created successfully",
    }
    assert "SUP-1001" in opened["answer"]
    assert tickets(tmp_path) == [(1, TICKET["title"], "High", TICKET["description"])]
    assert {"create_item", "create_ticket", "list_tickets", "get_ticket"} <= set(offered[0])
    assert "create_ticket" in prompt
    # The model saw the API's answer and nothing of the connection's credential.
    assert not any("Bearer" in content or "Authorization" in content for content in sent_results)


def test_demo_registers_idempotently_and_shows_calls_and_answers(env: dict[str, str], tmp_path: Path) -> None:
    with ScriptedServer(support_model) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        first = demo(env, "Open a high-priority ticket: the user cannot log in")
        second = demo(env)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert "you> Open a high-priority ticket: the user cannot log in" in second.stdout
    assert "you> Book 12.50 for lunch in category food" in second.stdout
    assert "Opened high-priority ticket SUP-1002." in second.stdout
    assert "create_ticket" in second.stdout and "ok" in second.stdout
    assert [row[0] for row in tickets(tmp_path)] == [1, 2]
    listing = subprocess.run(
        [sys.executable, "-m", "toolwire", "functions", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sorted(f["name"] for f in json.loads(listing.stdout)) == [
        "create_ticket",
        "get_ticket",
        "list_tickets",
    ]


def test_without_a_model_the_demo_says_what_to_set(env: dict[str, str]) -> None:
    env["TOOLWIRE_LOCAL_MODEL"] = str(Path(env["XDG_DATA_HOME"]) / "missing.gguf")
    done = demo(env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "TOOLWIRE_BASE_URL" in done.stderr


async def test_stored_functions_are_tools_of_the_assistant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'toolwire.db'}"
    key = Fernet.generate_key().decode()
    monkeypatch.setenv("TOOLWIRE_SECRET_KEY", key)
    model = ScriptedModel([reply(None, call("create_ticket", TICKET)), "Opened ticket SUP-1001."])
    with TicketsServer(tmp_path / "tickets.db", token="t0ken") as server:
        db = await Database.open(url)
        try:
            registry = function_registry(db, SecretBox([key]))
            connection, functions = tickets_functions(server.base_url, "t0ken")
            await registry.add_connection("default", connection)
            await registry.add_functions("default", functions)
        finally:
            await db.aclose()

        async with open_assistant(Settings(database_url=url), model=model) as assistant:
            result = await assistant.runner.run(
                "Open a high-priority ticket: the user cannot log in", context=assistant.context()
            )
            other = await assistant.runner_for("zeta")
            again = await assistant.runner_for("default")

    assert [c.name for c in result.calls] == ["create_ticket"] and result.calls[0].outcome == "ok"
    assert result.answer == "Opened ticket SUP-1001."
    assert "create_ticket" in assistant.runner.toolbox and "create_item" in assistant.runner.toolbox
    assert "create_ticket" not in other.toolbox and "create_item" in other.toolbox
    assert again is assistant.runner  # unchanged functions: the same runner is reused
    assert assistant.http.is_closed
    with sqlite3.connect(tmp_path / "tickets.db") as tickets_db:
        assert tickets_db.execute("SELECT title, priority FROM tickets").fetchall() == [
            (TICKET["title"], "High")
        ]
