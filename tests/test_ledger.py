"""The ledger's contract, on SQLite and on PostgreSQL: keys, claims, replays, failures, dead owners."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import select

from pg import database, migrated_database
from toolwire.context import Context
from toolwire.demo.bookkeeping import insert_item
from toolwire.exceptions import ConfigError, ToolDefinitionError
from toolwire.gate import Gate, Ledger, idempotency_key, transactional
from toolwire.gate.ledger import canonical_json, is_transactional
from toolwire.gate.redact import Redactor
from toolwire.messages import ToolCall, ToolResult
from toolwire.store import Database, Item, migrate
from toolwire.store.migrate import alembic_config
from toolwire.store.tables import utc_now
from toolwire.store.tables_ledger import LedgerEntry
from toolwire.tools import Tool, Toolbox, tool


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated, empty database: a SQLite file, or a fresh schema on the PostgreSQL server."""
    async with migrated_database(request.param, tmp_path) as database_:
        yield database_


class Recorder:
    """Write tools that count their executions (outside the database) and can be told to fail."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.failures = 0
        self.delay = 0.0

    def tool(self, *, retry_safe: bool = False) -> Tool:
        @tool(effect="write", retry_safe=retry_safe, timeout=5.0)
        async def send(to: str, amount: float = 1.0) -> dict[str, Any]:
            """Send money.

            Args:
                to: Who gets it.
                amount: How much.
            """
            self.runs.append({"to": to, "amount": amount})
            await asyncio.sleep(self.delay)
            if self.failures:
                self.failures -= 1
                raise RuntimeError("the bank is down")
            return {"sent": amount, "to": to, "n": len(self.runs)}

        return send

    def booking(self, db: Database) -> Tool:
        @transactional
        @tool(effect="write", timeout=5.0)
        async def book(ctx: Context, title: str) -> dict[str, Any]:
            """Book an entry.

            Args:
                ctx: The run's context.
                title: What to book.
            """
            self.runs.append({"title": title})
            async with ctx.transaction(db) as session:
                item = await insert_item(
                    session,
                    tenant_id=ctx.tenant_id,
                    user_id=ctx.user_id,
                    category="food",
                    amount=Decimal("1.00"),
                    title=title,
                    date=dt.date(2024, 5, 15),
                )
                await asyncio.sleep(self.delay)
                if self.failures:
                    self.failures -= 1
                    raise RuntimeError("the entry is invalid")
            return {"id": item.id}

        return book


def make_call(name: str, arguments: dict[str, Any], id: str = "call_1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments))


async def entries(db: Database) -> list[LedgerEntry]:
    async with db.transaction() as session:
        return list(await session.scalars(select(LedgerEntry)))


async def items(db: Database) -> list[Item]:
    async with db.transaction() as session:
        return list(await session.scalars(select(Item)))


async def leave_dead_claim(db: Database, key: str, *, expires_in: float = -1.0) -> None:
    """What a process that died mid-write leaves behind: an `in_flight` claim."""
    now = utc_now()
    async with db.transaction(write=True) as session:
        session.add(
            LedgerEntry(
                key=key,
                tenant_id="default",
                request_id="req-dead",
                tool="send",
                occurrence=0,
                state="in_flight",
                owner="f" * 32,
                lease_expires_at=now + dt.timedelta(seconds=expires_in),
                created_at=now - dt.timedelta(seconds=60),
            )
        )


def key_of(arguments: dict[str, Any], request_id: str = "req-dead", occurrence: int = 0) -> str:
    return idempotency_key(
        tenant_id="default", request_id=request_id, tool="send", arguments=arguments, occurrence=occurrence
    )


# --- keys -----------------------------------------------------------------------------------------


def test_the_key_is_the_request_and_the_call_identity_never_the_call_id() -> None:
    base = {"tenant_id": "acme", "request_id": "r1", "tool": "send", "occurrence": 0}
    key = idempotency_key(arguments={"to": "bob", "amount": 12.0, "memo": {"b": 1, "a": [1.0]}}, **base)

    # Key order, spacing and 12 vs 12.0 do not change the call: the same key.
    assert key == idempotency_key(arguments={"memo": {"a": [1], "b": 1}, "amount": 12, "to": "bob"}, **base)
    assert len(key) == 64 and int(key, 16) >= 0
    changed = [
        {**base, "tenant_id": "other"},
        {**base, "request_id": "r2"},
        {**base, "tool": "pay"},
        {**base, "occurrence": 1},
    ]
    arguments = {"to": "bob", "amount": 12.0, "memo": {"b": 1, "a": [1.0]}}
    assert all(idempotency_key(arguments=arguments, **other) != key for other in changed)
    assert idempotency_key(arguments={**arguments, "amount": 12.5}, **base) != key
    assert canonical_json({"b": [1.0, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'


def test_only_writes_can_be_transactional() -> None:
    @tool
    def look(q: str) -> str:
        """Look something up.

        Args:
            q: What.
        """
        return q

    with pytest.raises(ToolDefinitionError, match="only write tools can be transactional"):
        transactional(look)
    assert not is_transactional(look)


@pytest.mark.parametrize(
    "options",
    [{"lease_margin": -1.0}, {"poll_interval": 0.0}, {"poll_interval": 1.0, "max_poll_interval": 0.5}],
)
async def test_nonsense_timings_are_config_errors(tmp_path: Path, options: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="Ledger timings"):
        Ledger(database(f"sqlite:///{tmp_path / 'x.db'}"), **options)


# --- claim, store, replay -------------------------------------------------------------------------


async def test_a_write_runs_once_and_the_same_key_replays_the_stored_result(db: Database) -> None:
    recorder = Recorder()
    gate = Gate(Toolbox([recorder.tool()]), ledger=Ledger(db))
    context = Context(request_id="req-1")

    first = await gate.run(make_call("send", {"to": "bob", "amount": 1.0}, id="call_a"), context)
    again = await gate.run(make_call("send", {"amount": 1, "to": "bob"}, id="call_b"), context)

    assert recorder.runs == [{"to": "bob", "amount": 1.0}]
    assert (first.call_id, first.replayed, first.code) == ("call_a", False, None)
    assert json.loads(first.content) == {"sent": 1.0, "to": "bob", "n": 1}
    assert again == ToolResult(call_id="call_b", name="send", content=first.content, replayed=True)
    [entry] = await entries(db)
    assert (entry.state, entry.content, entry.code, entry.attempts) == ("done", first.content, None, 1)
    assert entry.key == idempotency_key(
        tenant_id="default",
        request_id="req-1",
        tool="send",
        arguments={"to": "bob", "amount": 1},
        occurrence=0,
    )
    assert entry.finished_at is not None and entry.finished_at >= entry.created_at


async def test_other_occurrences_requests_and_tenants_are_other_writes(db: Database) -> None:
    recorder = Recorder()
    gate = Gate(Toolbox([recorder.tool()]), ledger=Ledger(db))
    call = make_call("send", {"to": "bob"})

    await gate.run(call, Context(request_id="req-1"))
    await gate.run(call, Context(request_id="req-1"), occurrence=1)  # a second, equal payment
    await gate.run(call, Context(request_id="req-2"))
    await gate.run(call, Context(request_id="req-1", tenant_id="other"))
    replayed = await gate.run(call, Context(request_id="req-1"), occurrence=1)

    assert len(recorder.runs) == 4
    assert replayed.replayed
    assert len(await entries(db)) == 4


async def test_reads_never_touch_the_ledger(db: Database) -> None:
    runs: list[str] = []

    @tool
    def balance(account: str) -> int:
        """The balance.

        Args:
            account: Which account.
        """
        runs.append(account)
        return 7

    gate = Gate(Toolbox([balance]), ledger=Ledger(db))
    for _ in range(2):
        assert (
            await gate.run(make_call("balance", {"account": "a"}), Context(request_id="r"))
        ).content == "7"
    assert runs == ["a", "a"]
    assert await entries(db) == []


async def test_without_a_ledger_a_write_runs_every_time(db: Database) -> None:
    recorder = Recorder()
    gate = Gate(Toolbox([recorder.tool()]))
    for _ in range(2):
        assert not (await gate.run(make_call("send", {"to": "bob"}), Context(request_id="r"))).replayed
    assert len(recorder.runs) == 2


async def test_stored_and_replayed_results_are_redacted(db: Database) -> None:
    @tool(effect="write")
    def issue_token(user: str) -> dict[str, str]:
        """Issue a token.

        Args:
            user: For whom.
        """
        return {"user": user, "token": "tok-s3cret-value"}

    gate = Gate(Toolbox([issue_token]), ledger=Ledger(db), redactor=Redactor(["tok-s3cret-value"]))
    context = Context(request_id="r")
    first = await gate.run(make_call("issue_token", {"user": "ann"}), context)
    again = await gate.run(make_call("issue_token", {"user": "ann"}, id="call_2"), context)

    assert json.loads(first.content) == {"user": "ann", "token": "[redacted]"}
    assert again.content == first.content and again.replayed
    [entry] = await entries(db)
    assert "s3cret" not in (entry.content or "")


# --- concurrency ----------------------------------------------------------------------------------


async def test_concurrent_claims_of_one_key_execute_once(db: Database) -> None:
    recorder = Recorder()
    recorder.delay = 0.2  # the others arrive while the first is still running
    gate = Gate(Toolbox([recorder.tool()]), ledger=Ledger(db))
    context = Context(request_id="req-race")

    results = await asyncio.gather(
        *(gate.run(make_call("send", {"to": "bob"}, id=f"call_{i}"), context) for i in range(10))
    )

    assert len(recorder.runs) == 1
    assert sorted(r.replayed for r in results) == [False] + [True] * 9
    assert {r.content for r in results} == {results[0].content}
    assert [r.call_id for r in results] == [f"call_{i}" for i in range(10)]


async def test_concurrent_transactional_writes_execute_once(db: Database) -> None:
    recorder = Recorder()
    recorder.delay = 0.1
    gate = Gate(Toolbox([recorder.booking(db)]), ledger=Ledger(db))
    context = Context(request_id="req-race")

    results = await asyncio.gather(
        *(gate.run(make_call("book", {"title": "Lunch"}, id=f"call_{i}"), context) for i in range(8))
    )

    [item] = await items(db)
    assert len(recorder.runs) == 1
    assert sorted(r.replayed for r in results) == [False] + [True] * 7
    assert {json.loads(r.content)["id"] for r in results} == {item.id}


# --- transactional writes -------------------------------------------------------------------------


async def test_a_transactional_write_and_its_record_commit_together(db: Database) -> None:
    recorder = Recorder()
    booking = recorder.booking(db)
    seen: list[Any] = []

    @transactional
    @tool(effect="write")
    async def inspect_transaction(ctx: Context) -> str:
        """Look at the transaction the tool gets."""
        async with ctx.transaction(db) as session:
            assert ctx.store_transaction is not None
            seen.append(session is ctx.store_transaction.session)
            seen.append(await session.scalar(select(LedgerEntry.state)))  # its own claim, uncommitted
        return "ok"

    gate = Gate(Toolbox([booking, inspect_transaction]), ledger=Ledger(db))
    await gate.run(make_call("inspect_transaction", {}), Context(request_id="r0"))
    assert seen == [True, "in_flight"]

    result = await gate.run(make_call("book", {"title": "Lunch"}), Context(request_id="r1"))
    [item] = await items(db)
    entry = next(e for e in await entries(db) if e.request_id == "r1")
    assert json.loads(result.content) == {"id": item.id}
    assert (entry.state, entry.content) == ("done", result.content)


async def test_a_failed_transactional_write_rolls_back_with_its_claim_and_a_retry_runs_again(
    db: Database,
) -> None:
    recorder = Recorder()
    recorder.failures = 1
    gate = Gate(Toolbox([recorder.booking(db)]), ledger=Ledger(db))
    context = Context(request_id="req-1")

    failed = await gate.run(make_call("book", {"title": "Lunch"}), context)
    assert failed.code == "tool_error"
    assert await items(db) == []  # the insert before the failure is gone
    assert await entries(db) == []  # and so is the claim: nothing happened

    retried = await gate.run(make_call("book", {"title": "Lunch"}, id="call_2"), context)
    assert (retried.code, retried.replayed) == (None, False)
    assert len(await items(db)) == 1
    assert len(recorder.runs) == 2


async def test_a_transactional_tool_elsewhere_gets_its_own_transaction(db: Database, tmp_path: Path) -> None:
    other = database(f"sqlite:///{tmp_path / 'other.db'}")
    await migrate(other)
    recorder = Recorder()
    gate = Gate(Toolbox([recorder.booking(other)]), ledger=Ledger(db))
    try:
        result = await gate.run(make_call("book", {"title": "Lunch"}), Context(request_id="r"))
        assert result.code is None
        assert len(await items(other)) == 1
        assert await items(db) == []
    finally:
        await other.aclose()


# --- failures of claimed writes -------------------------------------------------------------------


async def test_a_failed_write_is_stored_and_a_retry_returns_the_same_failure(db: Database) -> None:
    recorder = Recorder()
    recorder.failures = 1
    gate = Gate(Toolbox([recorder.tool()]), ledger=Ledger(db))
    context = Context(request_id="req-1")

    failed = await gate.run(make_call("send", {"to": "bob"}), context)
    again = await gate.run(make_call("send", {"to": "bob"}, id="call_2"), context)

    assert failed.code == "tool_error" and "the bank is down" in failed.content
    assert (again.code, again.content, again.replayed) == ("tool_error", failed.content, True)
    assert len(recorder.runs) == 1  # it may have sent the money before failing: never twice


async def test_a_failed_retry_safe_write_releases_its_claim(db: Database) -> None:
    recorder = Recorder()
    recorder.failures = 1
    gate = Gate(Toolbox([recorder.tool(retry_safe=True)]), ledger=Ledger(db))
    context = Context(request_id="req-1")

    failed = await gate.run(make_call("send", {"to": "bob"}), context)
    assert failed.code == "tool_error"
    assert await entries(db) == []

    retried = await gate.run(make_call("send", {"to": "bob"}, id="call_2"), context)
    assert (retried.code, retried.replayed, len(recorder.runs)) == (None, False, 2)


class ApiDown(Exception):
    """What an HTTP function raises for an error status: the Gate's code and the details."""

    code = "upstream_error"
    details = ({"status": 503, "body": "try later"},)


@pytest.mark.parametrize("retry_safe", [False, True])
async def test_an_upstream_error_is_stored_unless_the_write_is_retry_safe(
    db: Database, retry_safe: bool
) -> None:
    keys: list[str] = []

    @tool(effect="write", retry_safe=retry_safe)
    async def create_ticket(ctx: Context, title: str) -> str:
        """Open a ticket.

        Args:
            ctx: The run's context.
            title: What about.
        """
        keys.append(ctx.extra["idempotency_key"])
        raise ApiDown("the API answered 503")

    gate = Gate(Toolbox([create_ticket]), ledger=Ledger(db))
    context = Context(request_id="req-1")
    failed = await gate.run(make_call("create_ticket", {"title": "x"}), context)
    again = await gate.run(make_call("create_ticket", {"title": "x"}, id="call_2"), context)

    assert failed.code == "upstream_error"
    assert json.loads(failed.content)["error"]["details"] == [{"status": 503, "body": "try later"}]
    if retry_safe:  # sent again, with the same key, for the API to deduplicate
        assert (again.replayed, len(keys), keys[0] == keys[1]) == (False, 2, True)
    else:
        assert (again.replayed, again.content, len(keys)) == (True, failed.content, 1)


async def test_a_write_finds_its_key_in_the_context_with_or_without_a_ledger(db: Database) -> None:
    keys: list[str | None] = []

    @tool(effect="write")
    async def create_ticket(ctx: Context, title: str) -> str:
        """Open a ticket.

        Args:
            ctx: The run's context.
            title: What about.
        """
        keys.append(ctx.extra.get("idempotency_key"))
        return "opened"

    @tool
    async def find_ticket(ctx: Context, title: str) -> str:
        """Find a ticket.

        Args:
            ctx: The run's context.
            title: What about.
        """
        keys.append(ctx.extra.get("idempotency_key"))
        return "found"

    context = Context(request_id="req-1", tenant_id="acme", extra={"db": db})
    expected = idempotency_key(
        tenant_id="acme", request_id="req-1", tool="create_ticket", arguments={"title": "x"}, occurrence=0
    )
    for gate in (
        Gate(Toolbox([create_ticket, find_ticket]), ledger=Ledger(db)),
        Gate(Toolbox([create_ticket, find_ticket])),
    ):
        await gate.run(make_call("create_ticket", {"title": "x"}, id="c1"), context)
        await gate.run(make_call("find_ticket", {"title": "x"}, id="c2"), context)
    assert keys == [expected, None, expected, None]
    assert context.extra == {"db": db}  # the caller's context is left as it was


# --- claims left by dead attempts -----------------------------------------------------------------


async def test_an_expired_claim_is_outcome_unknown_and_never_runs_again(db: Database) -> None:
    recorder = Recorder()
    gate = Gate(Toolbox([recorder.tool()]), ledger=Ledger(db))
    await leave_dead_claim(db, key_of({"to": "bob"}))

    result = await gate.run(make_call("send", {"to": "bob"}), Context(request_id="req-dead"))

    assert result.code == "outcome_unknown"
    message = json.loads(result.content)["error"]["message"]
    assert "whether it took effect is unknown" in message and "Check the current state" in message
    assert recorder.runs == []
    [entry] = await entries(db)
    assert (entry.state, entry.owner) == ("in_flight", "f" * 32)


async def test_a_claim_in_flight_is_waited_for_until_its_lease_runs_out(db: Database) -> None:
    recorder = Recorder()
    gate = Gate(Toolbox([recorder.tool()]), ledger=Ledger(db, poll_interval=0.01, max_poll_interval=0.05))
    await leave_dead_claim(db, key_of({"to": "bob"}), expires_in=0.3)

    result = await gate.run(make_call("send", {"to": "bob"}), Context(request_id="req-dead"))

    assert result.code == "outcome_unknown"
    assert recorder.runs == []


async def test_a_waiter_replays_what_the_live_owner_stores(db: Database) -> None:
    recorder = Recorder()
    ledger = Ledger(db, poll_interval=0.01, max_poll_interval=0.05)
    gate = Gate(Toolbox([recorder.tool()]), ledger=ledger)
    key = key_of({"to": "bob"})
    await leave_dead_claim(db, key, expires_in=30.0)

    async def owner_finishes() -> None:
        await asyncio.sleep(0.2)
        async with db.transaction(write=True) as session:
            entry = await session.get(LedgerEntry, key)
            assert entry is not None
            entry.state, entry.content = "done", '{"sent": "earlier"}'

    waiter = asyncio.create_task(gate.run(make_call("send", {"to": "bob"}), Context(request_id="req-dead")))
    await owner_finishes()
    result = await waiter

    assert (result.content, result.replayed) == ('{"sent": "earlier"}', True)
    assert recorder.runs == []


async def test_a_retry_safe_tool_takes_an_expired_claim_over_once(db: Database) -> None:
    recorder = Recorder()
    recorder.delay = 0.1
    gate = Gate(Toolbox([recorder.tool(retry_safe=True)]), ledger=Ledger(db))
    await leave_dead_claim(db, key_of({"to": "bob"}))
    context = Context(request_id="req-dead")

    results = await asyncio.gather(
        *(gate.run(make_call("send", {"to": "bob"}, id=f"call_{i}"), context) for i in range(5))
    )

    assert len(recorder.runs) == 1
    assert sorted(r.replayed for r in results) == [False] + [True] * 4
    [entry] = await entries(db)
    assert (entry.state, entry.attempts) == ("done", 2)
    assert entry.owner != "f" * 32


# --- the migration --------------------------------------------------------------------------------


def test_the_migration_goes_down_and_up_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"

    def tables() -> set[str]:
        with closing(sqlite3.connect(tmp_path / "m.db")) as plain:
            return {name for (name,) in plain.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    command.upgrade(alembic_config(url), "head")
    assert {"ledger", "audit_log"} <= tables()
    command.downgrade(alembic_config(url), "0002")
    assert not {"ledger", "audit_log"} & tables()
    command.upgrade(alembic_config(url), "head")
    assert {"ledger", "audit_log"} <= tables()
