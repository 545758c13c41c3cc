"""The audit log: one record per proposed call, executed or not, in the `audit_log` table.

A record says who (tenant, user), for which request, called what (tool, a digest of the arguments),
with which outcome (`ok` or the error code), how long it took, whether the result was replayed from
the ledger, and the write's idempotency key. It never holds a result, and holds the arguments only
when asked (`keep_arguments=True`); the Gate hands every value over already redacted, so secrets never
reach the table. The digest is over the redacted canonical arguments: equal calls share a digest.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select

from toolwire.context import Context
from toolwire.gate.keys import canonical_json
from toolwire.messages import ToolCall, ToolResult
from toolwire.store.db import Database
from toolwire.store.tables import utc_now
from toolwire.store.tables_ledger import AuditRecord

__all__ = ["MAX_KEPT_ARGUMENTS", "AuditLog", "AuditRecord", "arguments_digest"]

MAX_KEPT_ARGUMENTS = 10_000
"""Kept arguments longer than this many characters are cut."""


def arguments_digest(arguments: Mapping[str, Any] | str) -> str:
    """sha256 (hex) of parsed arguments in canonical JSON, or of a raw string that was not JSON."""
    text = arguments if isinstance(arguments, str) else canonical_json(arguments)
    return hashlib.sha256(text.encode()).hexdigest()


class AuditLog:
    """Writes and reads the audit records of tool calls.

    Args:
        db: The database holding the `audit_log` table (migrated).
        keep_arguments: Also store the (redacted) arguments, cut to `MAX_KEPT_ARGUMENTS`
            characters; by default only their digest is kept, as the arguments may hold personal
            data.
        clock: The current time (UTC, aware); replaceable in tests.
    """

    def __init__(
        self,
        db: Database,
        *,
        keep_arguments: bool = False,
        clock: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self.db = db
        self.keep_arguments = keep_arguments
        self.clock = clock

    async def record(
        self,
        *,
        call: ToolCall,
        context: Context,
        result: ToolResult,
        arguments: Mapping[str, Any] | str,
        duration_ms: float,
        key: str | None = None,
    ) -> None:
        """Add the record of one answered call.

        Args:
            call: The call as the model proposed it.
            context: Who asked, for which request.
            result: The answer the model got.
            arguments: The redacted arguments: parsed, or the raw string when they were no JSON.
            duration_ms: Time spent answering the call.
            key: The write's idempotency key, if the ledger was involved.

        Raises:
            StorageError: the record could not be written.
        """
        kept: str | None = None
        if self.keep_arguments:
            kept = arguments if isinstance(arguments, str) else canonical_json(arguments)
            kept = kept[:MAX_KEPT_ARGUMENTS]
        row = AuditRecord(
            at=self.clock(),
            tenant_id=context.tenant_id[:64],
            user_id=context.user_id[:128],
            request_id=context.request_id[:255],
            call_id=call.id[:255],
            tool=call.name[:255],
            arguments_digest=arguments_digest(arguments),
            outcome=result.code or "ok",
            duration_ms=round(duration_ms, 3),
            replayed=result.replayed,
            idempotency_key=key,
            arguments=kept,
        )
        async with self.db.transaction(write=True) as session:
            session.add(row)

    async def query(
        self,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        tool: str | None = None,
        outcome: str | None = None,
        request_id: str | None = None,
        since: dt.datetime | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Records matching every given filter, newest first.

        Args:
            tenant_id: Only this tenant's calls.
            user_id: Only this user's calls.
            tool: Only calls naming this tool.
            outcome: Only this outcome (`ok` or an error code such as `forbidden`).
            request_id: Only the calls of this application request.
            since: Only calls answered at or after this moment (aware).
            limit: At most this many records.

        Raises:
            StorageError: the records could not be read.
        """
        statement = select(AuditRecord).order_by(AuditRecord.at.desc(), AuditRecord.id.desc()).limit(limit)
        filters = (
            (AuditRecord.tenant_id, tenant_id),
            (AuditRecord.user_id, user_id),
            (AuditRecord.tool, tool),
            (AuditRecord.outcome, outcome),
            (AuditRecord.request_id, request_id),
        )
        for column, value in filters:
            if value is not None:
                statement = statement.where(column == value)
        if since is not None:
            statement = statement.where(AuditRecord.at >= since)
        async with self.db.transaction() as session:
            return list(await session.scalars(statement))
