"""`toolwire chat` as a user runs it: a real process against a scripted endpoint on 127.0.0.1."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolwire.testing.server import ScriptedServer, Step

BOOK = "Book 12.50 for lunch in category food"


def bookkeeper(body: dict[str, Any], route: str) -> Step:
    """Answers like a model that books when asked and then reports the stored result."""
    messages = body.get("messages", [])
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        item = json.loads(results[-1]["content"])["item"]
        return Step.reply(f"Booked {item['title']} for {item['amount']:.2f} (item {item['id']}).")
    if "tools" not in body:  # the JSON-plan route: the plan prompt is in the system message
        last = messages[-1]["content"]
        if last.startswith("Result of"):
            return Step.reply("Booked lunch for 12.50.")
        return Step.plan("create_item", {"category": "food", "amount": 12.5, "title": "lunch"})
    return Step.call("create_item", {"category": "food", "amount": 12.5, "title": "lunch"})


def run_cli(*args: str, env: dict[str, str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolwire", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        input=input,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
    clean["TOOLWIRE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'books.db'}"
    clean["TOOLWIRE_MODEL"] = "scripted"
    return clean


def items(tmp_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "books.db") as db:
        return db.execute("SELECT title, amount, category, user_id FROM items").fetchall()


@pytest.mark.parametrize("route", ["chat", "jsonplan"])
def test_chat_json_books_an_item_and_reports_the_call(
    env: dict[str, str], tmp_path: Path, route: str
) -> None:
    with ScriptedServer(bookkeeper) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        done = run_cli("chat", BOOK, "--json", "--route", route, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["route"] == route
    assert out["rounds"] == 2
    [call] = out["calls"]
    assert call["name"] == "create_item" and call["outcome"] == "ok" and call["replayed"] is False
    assert call["arguments"] == {"category": "food", "amount": 12.5, "title": "lunch"}
    assert call["result"]["success"] is True
    assert "Booked" in out["answer"] and "12.5" in out["answer"]
    assert [(t, float(a), c) for t, a, c, _ in items(tmp_path)] == [("lunch", 12.5, "food")]


def test_chat_streams_text_and_lists_calls_under_the_answer(env: dict[str, str]) -> None:
    with ScriptedServer(bookkeeper) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        done = run_cli("chat", BOOK, env=env)
        assert all(request.get("stream") is True for request in server.requests)
    assert done.returncode == 0, done.stderr
    answer_at = done.stdout.index("Booked lunch for 12.50")
    assert done.stdout.index("create_item", answer_at) > answer_at
    assert "ok" in done.stdout and "route chat" in done.stdout


def test_no_stream_asks_for_whole_responses(env: dict[str, str]) -> None:
    with ScriptedServer(bookkeeper) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        done = run_cli("chat", BOOK, "--no-stream", env=env)
        assert [request.get("stream", False) for request in server.requests] == [False, False]
    assert done.returncode == 0, done.stderr
    assert "Booked lunch for 12.50" in done.stdout


def test_repl_keeps_the_conversation(env: dict[str, str]) -> None:
    def script(body: dict[str, Any], route: str) -> Step:
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return Step.reply(f"You said {len(users)} thing(s); first: {users[0]}")

    with ScriptedServer(script) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        done = run_cli("chat", "--no-stream", env=env, input="hello\nagain\nexit\n")
    assert done.returncode == 0, done.stderr
    assert "You said 1 thing(s); first: hello" in done.stdout
    assert "You said 2 thing(s); first: hello" in done.stdout


def test_unreachable_endpoint_is_one_sentence_not_a_traceback(env: dict[str, str]) -> None:
    env["TOOLWIRE_BASE_URL"] = "http://127.0.0.1:9/v1"
    done = run_cli("chat", BOOK, env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "127.0.0.1:9" in done.stderr and "TOOLWIRE_BASE_URL" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_unknown_route_is_refused_clearly(env: dict[str, str]) -> None:
    env["TOOLWIRE_BASE_URL"] = "http://127.0.0.1:9/v1"
    done = run_cli("chat", BOOK, "--route", "carrier-pigeon", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "carrier-pigeon" in done.stderr and "chat" in done.stderr


def test_repeating_a_request_id_books_once_and_replays_the_stored_result(
    env: dict[str, str], tmp_path: Path
) -> None:
    with ScriptedServer(bookkeeper) as server:
        env["TOOLWIRE_BASE_URL"] = server.base_url
        first = run_cli("chat", BOOK, "--json", "--request-id", "req-fixed-1", env=env)
        again = run_cli("chat", BOOK, "--json", "--request-id", "req-fixed-1", env=env)
        other = run_cli("chat", BOOK, "--json", "--request-id", "req-fixed-2", env=env)
        audit = run_cli("audit", "--json", env=env)
    assert first.returncode == again.returncode == other.returncode == audit.returncode == 0, audit.stderr
    calls = [json.loads(done.stdout)["calls"][0] for done in (first, again, other)]
    assert [c["replayed"] for c in calls] == [False, True, False]
    assert calls[1]["result"] == calls[0]["result"]  # the stored result, not a second booking
    assert len(items(tmp_path)) == 2
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert sorted((r["request_id"], r["replayed"]) for r in records) == [
        ("req-fixed-1", False),
        ("req-fixed-1", True),
        ("req-fixed-2", False),
    ]
