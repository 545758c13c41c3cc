"""Exactly-once writes, shown end to end: retried requests, concurrent processes, killed processes.

Every test runs the real Runner, Gate, Ledger and bookkeeping `create_item` on a real database (a
SQLite file, or a fresh schema on the PostgreSQL test server); the concurrent and crash tests run
the requests in separate OS processes (`ledger_worker.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ledger_worker import (
    book,
    outcome,
    send_note,
)
from pg import POSTGRES_URL, PostgresUnavailable, database, postgres_schema
from toolwire.context import Context
from toolwire.gate import Gate, Ledger
from toolwire.messages import ToolCall
from toolwire.results import result_json
from toolwire.store import Database, Item, migrate
from toolwire.store.tables_ledger import AuditRecord, LedgerEntry
from toolwire.tools import Toolbox

WORKER = Path(__file__).with_name("ledger_worker.py")


@dataclass(kw_only=True)
class Target:
    """A migrated database and how a separate process reaches it."""

    url: str
    schema: str | None
    db: Database

    def worker(self, role: str, request_id: str, marker: Path, *extra: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(WORKER), role, "--url", self.url, "--request-id", request_id]
        command += ["--marker", str(marker), *extra]
        if self.schema:
            command += ["--schema", self.schema]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'books.db'}"
        db = database(url)
        await migrate(db)
        yield Target(url=url, schema=None, db=db)
        await db.aclose()
        return
    try:
        async with postgres_schema() as schema:
            db = database(POSTGRES_URL, schema)
            await migrate(db)
            yield Target(url=POSTGRES_URL, schema=schema, db=db)
            await db.aclose()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))


async def items(db: Database) -> list[Item]:
    async with db.transaction() as session:
        return list(await session.scalars(select(Item).order_by(Item.id)))


async def ledger_rows(db: Database) -> list[LedgerEntry]:
    async with db.transaction() as session:
        return list(await session.scalars(select(LedgerEntry)))


async def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 30.0) -> None:
    await asyncio.to_thread(_wait_for, path, process, timeout)


def _wait_for(path: Path, process: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the worker ended early: {process.communicate()[1]}")
        assert time.monotonic() < deadline, f"the worker never reached {path.name}"
        time.sleep(0.01)


def go(markers: list[Path]) -> None:
    for marker in markers:
        Path(f"{marker}.go").write_text("go")


def kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL


# --- a retried request ----------------------------------------------------------------------------


async def test_a_retried_request_books_once_and_answers_from_the_stored_result(target: Target) -> None:
    first = await book(target.db, "req-retry")
    # The application retries the request: the model is asked again and proposes the same
    # booking under a new call id.
    second = await book(target.db, "req-retry")

    booked = await items(target.db)
    assert len(booked) == 1
    assert outcome(first) == {
        "outcome": "ok",
        "replayed": False,
        "item": booked[0].id,
        "answer": f"Booked entry #{booked[0].id}.",
    }
    assert outcome(second) == {**outcome(first), "replayed": True}
    assert first.calls[0].call_id != second.calls[0].call_id
    assert second.calls[0].result == first.calls[0].result
    assert result_json(second)["calls"][0]["replayed"] is True

    [entry] = await ledger_rows(target.db)
    assert (entry.state, entry.request_id, entry.tool, entry.occurrence) == (
        "done",
        "req-retry",
        "create_item",
        0,
    )
    assert entry.content == first.calls[0].result
    async with target.db.transaction() as session:
        audited = list(await session.scalars(select(AuditRecord).order_by(AuditRecord.id)))
    assert [(r.outcome, r.replayed, r.idempotency_key) for r in audited] == [
        ("ok", False, entry.key),
        ("ok", True, entry.key),
    ]


async def test_another_request_books_again(target: Target) -> None:
    await book(target.db, "req-1")
    await book(target.db, "req-2")
    assert len(await items(target.db)) == 2


# --- concurrent requests from two processes -------------------------------------------------------


async def test_twenty_concurrent_identical_requests_from_two_processes_book_once(
    target: Target, tmp_path: Path
) -> None:
    request_id = f"req-{uuid.uuid4().hex[:8]}"
    markers = [tmp_path / "one", tmp_path / "two"]
    workers = [target.worker("concurrent", request_id, marker, "--tasks", "10") for marker in markers]
    try:
        for marker, worker in zip(markers, workers, strict=True):
            await wait_for(Path(f"{marker}.ready"), worker)
        go(markers)
        outputs = [worker.communicate(timeout=90) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (_out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
    results: list[dict[str, Any]] = [json.loads(line) for out, _ in outputs for line in out.splitlines()]

    booked = await items(target.db)
    assert len(booked) == 1
    assert len(results) == 20
    assert all(r["outcome"] == "ok" and r["item"] == booked[0].id for r in results)
    assert sorted(r["replayed"] for r in results) == [False] + [True] * 19
    assert len(await ledger_rows(target.db)) == 1


# --- killed processes -----------------------------------------------------------------------------


async def test_a_process_killed_in_the_middle_of_a_write_leaves_neither_item_nor_record(
    target: Target, tmp_path: Path
) -> None:
    marker = tmp_path / "mid"
    worker = target.worker("crash-mid-write", "req-crash", marker)
    try:
        await wait_for(marker, worker)  # the item is inserted, its record about to be written
    finally:
        kill(worker)

    assert await items(target.db) == []
    assert await ledger_rows(target.db) == []

    retried = await book(target.db, "req-crash")
    again = await book(target.db, "req-crash")
    booked = await items(target.db)
    assert len(booked) == 1
    assert (outcome(retried)["replayed"], outcome(retried)["item"]) == (False, booked[0].id)
    assert (outcome(again)["replayed"], outcome(again)["item"]) == (True, booked[0].id)


async def test_a_process_killed_after_the_write_leaves_both_and_the_retry_replays(
    target: Target, tmp_path: Path
) -> None:
    marker = tmp_path / "after"
    worker = target.worker("crash-after-write", "req-late", marker)
    try:
        await wait_for(marker, worker)  # committed; the model never saw the result
    finally:
        kill(worker)

    [item] = await items(target.db)
    [entry] = await ledger_rows(target.db)
    assert entry.state == "done"
    assert json.loads(entry.content or "")["item"]["id"] == item.id

    retried = await book(target.db, "req-late")
    assert outcome(retried) == {
        "outcome": "ok",
        "replayed": True,
        "item": item.id,
        "answer": f"Booked entry #{item.id}.",
    }
    assert len(await items(target.db)) == 1


async def test_a_write_outside_the_database_killed_midway_is_never_run_again(
    target: Target, tmp_path: Path
) -> None:
    marker = tmp_path / "claimed"
    notes = Path(f"{marker}.notes")
    worker = target.worker("crash-mid-claimed", "req-note", marker)
    try:
        await wait_for(marker, worker)  # the note is sent; the claim is in flight
    finally:
        kill(worker)
    [entry] = await ledger_rows(target.db)
    assert entry.state == "in_flight"

    gate = Gate(Toolbox([send_note]), ledger=Ledger(target.db))
    context = Context(request_id="req-note", extra={"notes": str(notes)})
    call = ToolCall(id="call_second", name="send_note", arguments='{"text": "invoice sent"}')
    # The claim's lease (1.5 s, set by the dead worker) runs out while the retry waits.
    result = await gate.run(call, context)

    assert result.code == "outcome_unknown"
    assert "whether it took effect is unknown" in json.loads(result.content)["error"]["message"]
    assert await asyncio.to_thread(notes.read_text) == "invoice sent\n"
    async with target.db.transaction() as session:
        assert await session.scalar(select(func.count()).select_from(LedgerEntry)) == 1
