"""`toolwire users`: add prints a working key once, list hides secrets, rotate-key and remove revoke."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service_support import bearer, chat_body, serving, sqlite_url
from toolwire.cli import app
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in ("TOOLWIRE_CONFIG", "TOOLWIRE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return {"TOOLWIRE_DATABASE_URL": sqlite_url(tmp_path)}


def run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["users", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def echo(request: ModelRequest) -> str:
    return "hello"


async def status_with(url: str, key: str) -> int:
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, client):
        return (await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))).status_code


async def test_add_prints_a_key_once_that_the_service_accepts(env: dict[str, str], tmp_path: Path) -> None:
    code, out, _ = await asyncio.to_thread(
        run, env, "add", "alice", "--tenant", "acme", "--scopes", "admin,items:write"
    )

    assert code == 0
    key = out.strip().splitlines()[-1]
    assert key.startswith("tw_")
    assert "tenant acme" in out and "admin, items:write" in out
    assert await status_with(env["TOOLWIRE_DATABASE_URL"], key) == 200
    dump = "\n".join(sqlite3.connect(tmp_path / "service.db").iterdump())
    assert key.split("_", 2)[2] not in dump


def test_add_as_json_and_list_without_secrets(env: dict[str, str]) -> None:
    code, out, _ = run(
        env, "add", "bob", "--tenant", "globex", "--scopes", "reports", "--scopes", "admin", "--json"
    )
    created = json.loads(out)
    _, listed_out, _ = run(env, "list", "--json")
    _, table, _ = run(env, "list")
    _, only_acme, _ = run(env, "list", "--tenant", "acme", "--json")

    assert code == 0
    assert (created["name"], created["tenant_id"], created["scopes"]) == (
        "bob",
        "globex",
        ["admin", "reports"],
    )
    [listed] = json.loads(listed_out)
    assert listed["id"] == created["id"]
    assert [k["id"] for k in listed["keys"]] == [created["key_id"]]
    assert created["api_key"] not in listed_out and created["api_key"] not in table
    assert "bob" in table and created["key_id"] in table
    assert json.loads(only_acme) == []


def test_a_duplicate_name_or_a_bad_scope_is_one_sentence(env: dict[str, str]) -> None:
    run(env, "add", "alice", "--tenant", "acme")
    duplicate = run(env, "add", "alice", "--tenant", "acme")
    elsewhere = run(env, "add", "alice", "--tenant", "globex")
    bad_scope = run(env, "add", "carol", "--scopes", "Not Valid!")

    assert duplicate[0] == 1
    assert "already has a user named 'alice'" in duplicate[2]
    assert elsewhere[0] == 0
    assert bad_scope[0] == 1
    assert "Scope" in bad_scope[2] and "Traceback" not in bad_scope[2]


async def test_rotate_key_replaces_every_key(env: dict[str, str]) -> None:
    _, out, _ = await asyncio.to_thread(run, env, "add", "alice", "--tenant", "acme")
    old = out.strip().splitlines()[-1]
    code, rotated_out, _ = await asyncio.to_thread(
        run, env, "rotate-key", "alice", "--tenant", "acme", "--json"
    )
    rotated = json.loads(rotated_out)

    assert code == 0
    assert rotated["revoked"] == 1
    url = env["TOOLWIRE_DATABASE_URL"]
    assert await status_with(url, old) == 401
    assert await status_with(url, rotated["api_key"]) == 200


async def test_remove_deletes_the_user_and_its_keys(env: dict[str, str]) -> None:
    _, out, _ = await asyncio.to_thread(run, env, "add", "alice", "--tenant", "acme")
    key = out.strip().splitlines()[-1]
    code, removed, _ = await asyncio.to_thread(run, env, "remove", "alice", "--tenant", "acme")
    again = await asyncio.to_thread(run, env, "remove", "alice", "--tenant", "acme")

    assert code == 0 and "Removed user alice" in removed
    assert await status_with(env["TOOLWIRE_DATABASE_URL"], key) == 401
    assert again[0] == 1
    assert "has no user named 'alice'" in again[2]
