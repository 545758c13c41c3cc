"""The idempotency ledger: a write runs once per key, and a repeated key gets the stored result.

A write's key comes from the application's request id and the call's identity (tool name, canonical
arguments, occurrence among identical calls of the request), never from the model's call id, which
changes when the model is asked again. `Ledger.execute` claims the key, runs the tool and stores the
result before anyone sees it; the key again replays the stored result, marked `replayed`. A claim is
one `INSERT ... ON CONFLICT DO NOTHING` on the unique `ledger.key` (atomic like catching the
integrity error, without the aborted transaction PostgreSQL leaves after one), so concurrent claims
of one key execute once, across tasks, processes and hosts, on SQLite and on PostgreSQL.

- **Transactional** writes (marked with `transactional`; every effect goes through
  `Context.transaction(db)` to the ledger's database): the claim, the tool's writes and the stored
  result are ONE transaction. A crash rolls all of it back, so the retried request runs the write
  once instead of finding it half done. A concurrent claimer waits on the unique index (PostgreSQL)
  or the write lock (SQLite) until the first commits, then replays.
- **Claimed** writes (all others: HTTP functions, tools writing elsewhere): the claim commits as
  `in_flight` with a lease (the tool's timeout plus a margin), the tool runs, the result is stored as
  `done`. A concurrent claimer polls with backoff until `done` and replays. A claim still in flight
  after its lease was left by an attempt that died, its outcome unknown: the call is answered
  `outcome_unknown` rather than run again, unless the tool is `retry_safe` (it deduplicates
  downstream, as an HTTP function sending the key as `Idempotency-Key` does); then one atomic UPDATE
  naming the dead owner takes the claim over and the tool runs again.

Failures, a deliberate choice: a failed write that may have taken effect (`tool_error`, `timeout`,
`upstream_error` of a claimed write) is stored like a success, so a retry returns the same failure
instead of risking a second effect. A failure that provably left nothing behind is not stored, as a
retried request usually means "try again": a failed transactional write rolls back with its claim,
and a failed retry-safe write releases its claim. Leases compare wall clocks: hosts sharing a
database need synchronized clocks, within the margin (30 s by default).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from toolwire.context import Context, StoreTransaction
from toolwire.exceptions import ConfigError, StorageError
from toolwire.gate.keys import (
    DONE,
    IDEMPOTENCY_KEY,
    IN_FLIGHT,
    TRANSACTIONAL,
    OutcomeUnknown,
    canonical_json,
    idempotency_key,
    is_transactional,
    transactional,
)
from toolwire.messages import ToolCall, ToolResult
from toolwire.store.db import Database
from toolwire.store.tables import utc_now
from toolwire.store.tables_ledger import LedgerEntry
from toolwire.tools.base import Tool

__all__ = [
    "DONE",
    "IDEMPOTENCY_KEY",
    "IN_FLIGHT",
    "TRANSACTIONAL",
    "Ledger",
    "OutcomeUnknown",
    "canonical_json",
    "idempotency_key",
    "is_transactional",
    "transactional",
]

logger = logging.getLogger(__name__)

Run = Callable[[Context], Awaitable[ToolResult]]
"""Executes the call (under its deadline, redacted) with the context it is given."""


@dataclass(frozen=True, kw_only=True)
class _Row:
    state: str
    owner: str
    lease_expires_at: dt.datetime
    created_at: dt.datetime
    content: str | None
    code: str | None


class _Abandon(Exception):
    """Rolls back a transactional write whose tool failed (its claim with it)."""


class Ledger:
    """Exactly-once execution of writes, on the `ledger` table of a database.

    Args:
        db: The database holding the `ledger` table (migrated); transactional tools must write to
            this same `Database` object for their writes to share the ledger's transaction.
        lease_margin: Seconds added to a tool's timeout before its claim counts as abandoned.
        default_lease: The lease of a tool without a timeout, before the margin.
        poll_interval: The first wait, in seconds, before looking again at a claim in flight;
            it doubles up to `max_poll_interval`.
        max_poll_interval: The longest wait between two looks.
        clock: The current time (UTC, aware); replaceable in tests.
    """

    def __init__(
        self,
        db: Database,
        *,
        lease_margin: float = 30.0,
        default_lease: float = 600.0,
        poll_interval: float = 0.02,
        max_poll_interval: float = 0.5,
        clock: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        if lease_margin < 0 or default_lease <= 0 or poll_interval <= 0 or max_poll_interval < poll_interval:
            raise ConfigError(
                "Ledger timings must be positive (lease_margin may be 0) and max_poll_interval at least "
                "poll_interval."
            )
        self.db = db
        self.lease_margin = lease_margin
        self.default_lease = default_lease
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.clock = clock

    def lease(self, tool: Tool) -> float:
        """Seconds a claim of `tool` stays presumed alive: its timeout plus the margin."""
        base = tool.timeout if tool.timeout is not None else self.default_lease
        return base + self.lease_margin

    async def execute(
        self, *, key: str, tool: Tool, call: ToolCall, context: Context, occurrence: int, run: Run
    ) -> ToolResult | OutcomeUnknown:
        """Run the write at most once for `key`, or replay its stored result.

        Args:
            key: From `idempotency_key`.
            tool: The write tool.
            call: The call being answered; a replay carries its id.
            context: The run's context.
            occurrence: Stored with the claim, for inspection.
            run: Executes the call; its result is stored before it is returned.

        Returns:
            The result (fresh, or stored with `replayed=True`), or `OutcomeUnknown` when an earlier
            attempt died mid-way and the tool is not retry-safe.

        Raises:
            StorageError: the database failed, or stayed locked past the tool's lease.
        """
        owner = uuid.uuid4().hex
        lease = self.lease(tool)
        give_up = time.monotonic() + 2 * lease
        delay = self.poll_interval
        entry = {
            "key": key,
            "tenant_id": context.tenant_id,
            "request_id": context.request_id[:255],
            "tool": tool.name,
            "occurrence": occurrence,
            "state": IN_FLIGHT,
            "owner": owner,
            "attempts": 1,
        }
        while True:
            outcome: ToolResult | bool | _Row | None
            try:
                if is_transactional(tool):
                    outcome = await self._in_transaction(entry, lease, context, run)
                else:
                    outcome = await self._claim(entry, lease)
            except StorageError as exc:
                if not self._busy(exc) or time.monotonic() > give_up:
                    raise
                outcome = None  # SQLite's write lock is held longer than its busy timeout: wait on
            if isinstance(outcome, ToolResult):
                return outcome
            if outcome is True:
                return await self._run_claimed(key, owner, tool, context, run)
            if isinstance(outcome, _Row):
                if outcome.state == DONE:
                    return _replay(call, outcome)
                now = self.clock()
                if now >= outcome.lease_expires_at:
                    if not tool.retry_safe:
                        return OutcomeUnknown(key=key, claimed_at=outcome.created_at)
                    if await self._retrying(self._take_over, key, outcome.owner, owner, lease):
                        return await self._run_claimed(key, owner, tool, context, run)
                    continue  # another attempt took it over first: look again
            if time.monotonic() > give_up:
                claimed = outcome.created_at if isinstance(outcome, _Row) else self.clock()
                return OutcomeUnknown(key=key, claimed_at=claimed)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_poll_interval)

    # --- the steps -----------------------------------------------------------------------------

    async def _in_transaction(
        self, entry: dict[str, Any], lease: float, context: Context, run: Run
    ) -> ToolResult | _Row | None:
        failed: ToolResult | None = None
        try:
            async with self.db.transaction(write=True) as session:
                if not await self._insert(session, entry, lease):
                    return await _read(session, entry["key"])
                shared = StoreTransaction(database=self.db, session=session)
                result = await run(replace(context, store_transaction=shared))
                if result.code is not None:
                    failed = result
                    raise _Abandon
                await _finish(session, entry["key"], entry["owner"], result, self.clock())
                return result
        except _Abandon:
            return failed
        except StorageError:
            if failed is None:
                raise
            # The rollback itself failed (a deadline cancelled the tool mid-query): the server
            # discards the transaction with the broken connection, so nothing was written.
            logger.warning("Rolling back the failed write %s failed; the server discards it", entry["key"])
            return failed

    async def _claim(self, entry: dict[str, Any], lease: float) -> bool | _Row | None:
        async with self.db.transaction(write=True) as session:
            if await self._insert(session, entry, lease):
                return True
            return await _read(session, entry["key"])

    async def _run_claimed(self, key: str, owner: str, tool: Tool, context: Context, run: Run) -> ToolResult:
        result = await run(context)
        if result.code is not None and tool.retry_safe:
            # Running it again is harmless (it deduplicates downstream): let a retry do that.
            await self._retrying(self._release, key, owner)
            return result
        if not await self._retrying(self._finish_claimed, key, owner, result):
            logger.warning("The claim %s of %r was taken over before its result was stored", key, tool.name)
        return result

    async def _insert(self, session: AsyncSession, entry: dict[str, Any], lease: float) -> bool:
        now = self.clock()
        values = {**entry, "created_at": now, "lease_expires_at": now + dt.timedelta(seconds=lease)}
        dialect = postgresql if self.db.backend == "postgresql" else sqlite
        statement = (
            dialect.insert(LedgerEntry)
            .values(values)
            .on_conflict_do_nothing(index_elements=[LedgerEntry.key])
            .returning(LedgerEntry.key)
        )
        return (await session.execute(statement)).scalar_one_or_none() is not None

    async def _take_over(self, key: str, old_owner: str, owner: str, lease: float) -> bool:
        now = self.clock()
        async with self.db.transaction(write=True) as session:
            # Only the dead owner's claim, only after its lease: two takers cannot both succeed.
            held = (LedgerEntry.key == key, LedgerEntry.state == IN_FLIGHT, LedgerEntry.owner == old_owner)
            expiry = now + dt.timedelta(seconds=lease)
            taken = await session.execute(
                update(LedgerEntry)
                .where(*held, LedgerEntry.lease_expires_at < now)
                .values(owner=owner, lease_expires_at=expiry, attempts=LedgerEntry.attempts + 1)
                .returning(LedgerEntry.key)
            )
            return taken.scalar_one_or_none() is not None

    async def _finish_claimed(self, key: str, owner: str, result: ToolResult) -> bool:
        async with self.db.transaction(write=True) as session:
            return await _finish(session, key, owner, result, self.clock())

    async def _release(self, key: str, owner: str) -> bool:
        async with self.db.transaction(write=True) as session:
            gone = await session.execute(
                delete(LedgerEntry)
                .where(LedgerEntry.key == key, LedgerEntry.owner == owner, LedgerEntry.state == IN_FLIGHT)
                .returning(LedgerEntry.key)
            )
            return gone.scalar_one_or_none() is not None

    async def _retrying(self, step: Callable[..., Awaitable[bool]], *args: Any) -> bool:
        # Short write steps wait out SQLite lock contention for up to a minute: after the tool ran,
        # giving up early would lose its result and leave the claim to expire as outcome_unknown.
        give_up = time.monotonic() + 60.0
        delay = self.poll_interval
        while True:
            try:
                return await step(*args)
            except StorageError as exc:
                if not self._busy(exc) or time.monotonic() > give_up:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_poll_interval)

    def _busy(self, exc: StorageError) -> bool:
        cause = str(exc.__cause__ or "").lower()
        return self.db.backend == "sqlite" and ("locked" in cause or "busy" in cause)


async def _read(session: AsyncSession, key: str) -> _Row | None:
    columns = [getattr(LedgerEntry, name) for name in _Row.__dataclass_fields__]
    row = (await session.execute(select(*columns).where(LedgerEntry.key == key))).one_or_none()
    return None if row is None else _Row(**row._asdict())


async def _finish(session: AsyncSession, key: str, owner: str, result: ToolResult, now: dt.datetime) -> bool:
    """Store the result on the claim `owner` still holds; False when it no longer holds it."""
    stored = await session.execute(
        update(LedgerEntry)
        .where(LedgerEntry.key == key, LedgerEntry.owner == owner, LedgerEntry.state == IN_FLIGHT)
        .values(state=DONE, content=result.content, code=result.code, finished_at=now)
        .returning(LedgerEntry.key)
    )
    return stored.scalar_one_or_none() is not None


def _replay(call: ToolCall, row: _Row) -> ToolResult:
    return ToolResult(
        call_id=call.id, name=call.name, content=row.content or "", code=row.code, replayed=True
    )
