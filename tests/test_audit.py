"""The audit log: one record per call whatever became of it, filters, the CLI, and no secrets."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pg import database, migrated_database
from toolwire.cli import app
from toolwire.cli.audit import parse_since
from toolwire.context import Context
from toolwire.gate import AuditLog, Gate, Ledger
from toolwire.gate.audit import arguments_digest
from toolwire.gate.redact import Redactor
from toolwire.messages import ToolCall, ToolResult
from toolwire.runner import Runner
from toolwire.store import Database, migrate
from toolwire.testing import ScriptedModel, call, reply
from toolwire.tools import Toolbox, tool

SECRET = "sk-live-9f8e7d6c5b4a"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async with migrated_database(request.param, tmp_path) as database_:
        yield database_


def tools(ran: list[str]) -> Toolbox:
    @tool
    def weather(city: str) -> str:
        """The weather.

        Args:
            city: Where.
        """
        ran.append("weather")
        return "sunny"

    @tool(effect="write")
    def pay(to: str, amount: int) -> dict[str, Any]:
        """Pay someone.

        Args:
            to: Who.
            amount: How much.
        """
        ran.append("pay")
        return {"paid": amount, "to": to}

    @tool(effect="write", requires=["admin"])
    def reset(everything: bool) -> str:
        """Reset the books.

        Args:
            everything: All of it.
        """
        ran.append("reset")
        return "reset"

    return Toolbox([weather, pay, reset])


async def test_every_call_gets_one_record_whatever_became_of_it(db: Database) -> None:
    ran: list[str] = []
    toolbox = tools(ran)
    gate = Gate(toolbox, ledger=Ledger(db), audit=AuditLog(db))
    proposed = [
        call("weather", {"city": "Bern"}, id="c1"),
        call("pay", {"to": "bob", "amount": 5}, id="c2"),
        call("reset", {"everything": True}, id="c3"),
        call("wether", {"city": "Bern"}, id="c4"),
        call("pay", '{"to": "bob",', id="c5"),
        call("pay", {"to": "bob", "amount": "five"}, id="c6"),
        call("weather", {"city": "Rome"}, id="c7"),
    ]
    model = ScriptedModel([reply(None, *proposed), "Done."])
    runner = Runner(model, toolbox, gate=gate, max_calls_per_turn=6)
    context = Context(user_id="ann", tenant_id="acme", request_id="req-7")
    result = await runner.run("Pay Bob and more", context=context)
    # The request is retried: the payment is proposed again under a new call id.
    retry = Runner(
        ScriptedModel([reply(None, call("pay", {"to": "bob", "amount": 5}, id="c8")), "Done."]),
        toolbox,
        gate=gate,
    )
    retried = await retry.run("Pay Bob and more", context=context)

    records = sorted(await AuditLog(db).query(), key=lambda r: r.call_id)
    assert [(r.call_id, r.tool, r.outcome, r.replayed) for r in records] == [
        ("c1", "weather", "ok", False),
        ("c2", "pay", "ok", False),
        ("c3", "reset", "forbidden", False),
        ("c4", "wether", "unknown_tool", False),
        ("c5", "pay", "invalid_json", False),
        ("c6", "pay", "invalid_arguments", False),
        ("c7", "weather", "too_many_calls", False),
        ("c8", "pay", "ok", True),
    ]
    assert [t.outcome for t in result.calls + retried.calls] == [r.outcome for r in records]
    assert ran == ["weather", "pay"]
    assert {(r.tenant_id, r.user_id, r.request_id) for r in records} == {("acme", "ann", "req-7")}
    assert all(r.duration_ms >= 0 and r.at.tzinfo is not None and r.arguments is None for r in records)
    pays = [r for r in records if r.call_id in ("c2", "c8")]
    assert pays[0].idempotency_key is not None and pays[0].idempotency_key == pays[1].idempotency_key
    assert (
        pays[0].arguments_digest == pays[1].arguments_digest == arguments_digest({"amount": 5, "to": "bob"})
    )
    assert records[4].arguments_digest == arguments_digest('{"to": "bob",')
    assert all(r.idempotency_key is None for r in records if r.call_id not in ("c2", "c8"))


async def test_the_gate_audits_refused_calls_on_its_own(db: Database) -> None:
    gate = Gate(tools([]), audit=AuditLog(db))
    result = await gate.run(ToolCall(id="c1", name="nope", arguments="{}"), Context(request_id="r"))
    assert result.code == "unknown_tool"
    [record] = await AuditLog(db).query()
    assert (record.call_id, record.outcome, record.request_id) == ("c1", "unknown_tool", "r")


async def test_queries_filter_and_return_the_newest_first(db: Database) -> None:
    start = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    times = iter(start + dt.timedelta(minutes=i) for i in range(10))
    log = AuditLog(db, clock=lambda: next(times))
    rows = [
        ("ann", "acme", "r1", "pay", None),
        ("ann", "acme", "r1", "weather", None),
        ("bob", "acme", "r2", "pay", "forbidden"),
        ("bob", "other", "r3", "pay", None),
    ]
    for i, (user, tenant, request, name, code) in enumerate(rows):
        await log.record(
            call=ToolCall(id=f"c{i}", name=name, arguments="{}"),
            context=Context(user_id=user, tenant_id=tenant, request_id=request),
            result=ToolResult(call_id=f"c{i}", name=name, content="{}", code=code),
            arguments={},
            duration_ms=1.5,
        )

    async def ids(**filters: Any) -> list[str]:
        return [r.call_id for r in await log.query(**filters)]

    assert await ids() == ["c3", "c2", "c1", "c0"]
    assert await ids(user_id="ann") == ["c1", "c0"]
    assert await ids(tool="pay", tenant_id="acme") == ["c2", "c0"]
    assert await ids(outcome="forbidden") == ["c2"]
    assert await ids(outcome="ok", tool="pay") == ["c3", "c0"]
    assert await ids(request_id="r1") == ["c1", "c0"]
    assert await ids(since=start + dt.timedelta(minutes=2)) == ["c3", "c2"]
    assert await ids(limit=1) == ["c3"]


async def test_secrets_never_reach_the_database(tmp_path: Path) -> None:
    path = tmp_path / "secret.db"
    db = database(f"sqlite:///{path}")
    await migrate(db)

    @tool(effect="write")
    def store_key(name: str, key: str) -> dict[str, str]:
        """Store an API key.

        Args:
            name: What it is for.
            key: The key.
        """
        return {"stored": name, "echo": key}

    gate = Gate(
        Toolbox([store_key]),
        ledger=Ledger(db),
        audit=AuditLog(db, keep_arguments=True),
        redactor=Redactor([SECRET]),
    )
    context = Context(request_id="r")
    result = await gate.run(call("store_key", {"name": "shop", "key": SECRET}), context)
    await gate.run(ToolCall(id="bad", name="store_key", arguments=f'{{"key": "{SECRET}"'), context)
    [refused, record] = await AuditLog(db).query()
    await db.aclose()

    assert json.loads(result.content) == {"stored": "shop", "echo": "[redacted]"}
    assert json.loads(record.arguments or "") == {"key": "[redacted]", "name": "shop"}
    assert refused.arguments == '{"key": "[redacted]"'
    on_disk = read_database_files(tmp_path)
    assert b"[redacted]" in on_disk
    assert SECRET.encode() not in on_disk


def read_database_files(folder: Path) -> bytes:
    """The database file with its WAL and journal, as written."""
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("secret.db"))


# --- the command line -----------------------------------------------------------------------------


def test_since_takes_durations_and_dates() -> None:
    now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    assert parse_since("30m", now=now) == dt.datetime(2026, 3, 1, 11, 30, tzinfo=dt.UTC)
    assert parse_since("2d", now=now) == dt.datetime(2026, 2, 27, 12, 0, tzinfo=dt.UTC)
    assert parse_since("2026-02-01") == dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    assert parse_since("2026-02-01T08:00+01:00") == dt.datetime(2026, 2, 1, 7, 0, tzinfo=dt.UTC)


async def two_calls(url: str) -> None:
    db = database(url)
    await migrate(db)
    gate = Gate(tools([]), ledger=Ledger(db), audit=AuditLog(db))
    await gate.run(call("pay", {"to": "bob", "amount": 5}, id="c1"), Context(user_id="ann", request_id="r1"))
    await gate.run(call("reset", {"everything": True}, id="c2"), Context(user_id="bob", request_id="r2"))
    await db.aclose()


def test_the_audit_command_lists_and_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    asyncio.run(two_calls(url))
    monkeypatch.setenv("TOOLWIRE_DATABASE_URL", url)
    runner = CliRunner()

    listed = runner.invoke(app, ["audit", "--json"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    lines = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["call_id"], r["user_id"], r["tool"], r["outcome"]) for r in lines] == [
        ("c2", "bob", "reset", "forbidden"),
        ("c1", "ann", "pay", "ok"),
    ]
    assert lines[1]["replayed"] is False and len(lines[1]["idempotency_key"]) == 64

    denied = runner.invoke(app, ["audit", "--json", "--outcome", "forbidden", "--since", "1h"])
    assert [json.loads(line)["call_id"] for line in denied.stdout.splitlines()] == ["c2"]
    by_user = runner.invoke(app, ["audit", "--json", "--user", "ann", "--tool", "pay", "--request-id", "r1"])
    assert [json.loads(line)["call_id"] for line in by_user.stdout.splitlines()] == ["c1"]

    table = runner.invoke(app, ["audit", "--limit", "1"], catch_exceptions=False)
    assert table.exit_code == 0
    assert "reset" in table.stdout and "forbidden" in table.stdout and "pay" not in table.stdout
    nothing = runner.invoke(app, ["audit", "--user", "nobody"])
    assert "No audit records match." in nothing.stdout

    bad = runner.invoke(app, ["audit", "--since", "yesterday-ish"])
    assert bad.exit_code == 2
    assert "is not a time" in bad.output
