"""Idempotency-ledger throughput: claims per second on SQLite and PostgreSQL, 1 and 16 writers.

Each claim is a whole `Ledger.execute` of a write with a no-op tool and a fresh key:
- `claimed`: the claim commits as in_flight, then the result is stored (two transactions);
- `transactional`: claim and result in one transaction (what `create_item` uses).
The reference is a plain loop of one-row INSERT transactions into the same table, measured in the
same run with the same number of concurrent writers. Printed: operations per second and the ratio
of each ledger mode to the plain INSERT loop. Not a test: nothing is asserted.

Run: `.venv/bin/python benchmarks/ledger_claims.py [--ops N] [--postgres URL]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from toolwire.context import Context
from toolwire.gate import Ledger, transactional
from toolwire.messages import ToolCall, ToolResult
from toolwire.store import Database, migrate, normalize_url
from toolwire.store.tables import utc_now
from toolwire.store.tables_ledger import LedgerEntry
from toolwire.tools import Tool, tool

POSTGRES_URL = os.environ.get("TOOLWIRE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
WRITERS = (1, 16)


@tool(effect="write", timeout=10.0)
async def noop() -> str:
    """Do nothing."""
    return "ok"


@transactional
@tool(effect="write", name="noop_tx", timeout=10.0)
async def noop_tx() -> str:
    """Do nothing, in the ledger's transaction."""
    return "ok"


async def _result(context: Context) -> ToolResult:
    return ToolResult(call_id="c", name="noop", content="ok")


def ledger_op(ledger: Ledger, write: Tool) -> Callable[[], Awaitable[None]]:
    call = ToolCall(id="c", name=write.name, arguments="{}")
    context = Context(request_id="bench")

    async def op() -> None:
        outcome = await ledger.execute(
            key=uuid.uuid4().hex, tool=write, call=call, context=context, occurrence=0, run=_result
        )
        assert isinstance(outcome, ToolResult) and not outcome.replayed

    return op


def insert_op(db: Database) -> Callable[[], Awaitable[None]]:
    async def op() -> None:
        now = utc_now()
        async with db.transaction(write=True) as session:
            session.add(
                LedgerEntry(
                    key=uuid.uuid4().hex,
                    tenant_id="default",
                    request_id="bench",
                    tool="plain",
                    occurrence=0,
                    state="done",
                    owner="0" * 32,
                    lease_expires_at=now,
                    created_at=now,
                )
            )

    return op


async def per_second(op: Callable[[], Awaitable[None]], ops: int, writers: int) -> float:
    share = [ops // writers + (1 if i < ops % writers else 0) for i in range(writers)]

    async def writer(count: int) -> None:
        for _ in range(count):
            await op()

    started = time.perf_counter()
    await asyncio.gather(*(writer(count) for count in share))
    return ops / (time.perf_counter() - started)


async def measure(name: str, db: Database, ops: int) -> list[dict[str, Any]]:
    await migrate(db)
    ledger = Ledger(db)
    modes = {
        "plain INSERT": insert_op(db),
        "claimed": ledger_op(ledger, noop),
        "transactional": ledger_op(ledger, noop_tx),
    }
    await per_second(modes["claimed"], 20, 1)  # warm the pool and the statement caches
    rows = []
    for writers in WRITERS:
        rates = {mode: await per_second(op, ops, writers) for mode, op in modes.items()}
        rows.append({"backend": name, "writers": writers, **rates})
    return rows


async def postgres_schema(url: str) -> tuple[asyncpg.Connection, str] | None:
    parsed = normalize_url(url)
    try:
        admin = await asyncpg.connect(
            parsed.set(drivername="postgresql").render_as_string(hide_password=False), timeout=3
        )
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        print(f"PostgreSQL at {parsed.host}:{parsed.port or 5432} is not reachable ({exc}): skipped.")
        return None
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    return admin, schema


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=400, help="operations per measurement")
    parser.add_argument("--postgres", default=POSTGRES_URL)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        async with Database(f"sqlite:///{Path(folder) / 'bench.db'}") as db:
            rows += await measure("SQLite (file, WAL)", db, args.ops)
    found = await postgres_schema(args.postgres)
    if found is not None:
        admin, schema = found
        try:
            connect_args = {"server_settings": {"search_path": schema}}
            async with Database(args.postgres, connect_args=connect_args) as db:
                rows += await measure("PostgreSQL", db, args.ops)
        finally:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await admin.close()

    print(f"\n{args.ops} operations per measurement; ratio = ledger mode / plain INSERT transactions\n")
    header = ("backend", "writers", "INSERT/s", "claimed/s", "ratio", "tx/s", "ratio")
    print("{:<20} {:>7} {:>10} {:>10} {:>6} {:>10} {:>6}".format(*header))
    for row in rows:
        plain = row["plain INSERT"]
        print(
            f"{row['backend']:<20} {row['writers']:>7} {plain:>10.0f} "
            f"{row['claimed']:>10.0f} {row['claimed'] / plain:>6.2f} "
            f"{row['transactional']:>10.0f} {row['transactional'] / plain:>6.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
