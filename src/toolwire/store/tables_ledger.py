"""Tables: the idempotency ledger and the audit log.

`ledger` holds one row per idempotency key of a write: the unique primary key is what makes a claim
atomic across tasks, processes and hosts, and `state` says whether the write is still running
(`in_flight`, owned by `owner` until `lease_expires_at`) or finished (`done`, with the result the
model saw). `audit_log` holds one row per proposed call, executed or not; it keeps a digest of the
arguments (and the arguments themselves only when asked, after redaction), never the result.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from toolwire.store.tables import Base, UtcDateTime, utc_now

__all__ = ["AuditRecord", "LedgerEntry"]


class LedgerEntry(Base):
    """The claim and, once finished, the stored result of one idempotent write."""

    __tablename__ = "ledger"
    __table_args__ = (
        CheckConstraint("state IN ('in_flight', 'done')", name="state"),
        Index("ix_ledger_tenant_request", "tenant_id", "request_id"),
    )

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    """sha256 (hex) of tenant, request id, tool, canonical arguments and occurrence."""
    tenant_id: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str] = mapped_column(String(255))
    """The application's request id (cut to 255 characters; the key holds all of it)."""
    tool: Mapped[str] = mapped_column(String(64))
    occurrence: Mapped[int] = mapped_column(Integer)
    """0 for the first identical call in the request, 1 for the second..."""
    state: Mapped[str] = mapped_column(String(16))
    """`in_flight` while the write runs, `done` once its result is stored."""
    owner: Mapped[str] = mapped_column(String(32))
    """A random token of the attempt holding the claim; a takeover must name the old one."""
    lease_expires_at: Mapped[dt.datetime] = mapped_column(UtcDateTime())
    """Until then an `in_flight` claim is presumed alive; after it, its owner is presumed dead."""
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    """1, plus one per takeover of an expired claim (retry-safe tools only)."""
    content: Mapped[str | None] = mapped_column(Text, default=None)
    """The redacted result content the model saw; replayed verbatim."""
    code: Mapped[str | None] = mapped_column(String(32), default=None)
    """The result's error code; `None` for success."""
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default_factory=utc_now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), default=None)


class AuditRecord(Base):
    """One proposed call and what became of it: who, what, when, the outcome, how long."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_tenant_at", "tenant_id", "at"),
        Index("ix_audit_log_request_id", "request_id"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, init=False
    )
    """Assigned by the database; SQLite needs INTEGER for its rowid alias."""
    at: Mapped[dt.datetime] = mapped_column(UtcDateTime())
    """When the call was answered, in UTC."""
    tenant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(128))
    request_id: Mapped[str] = mapped_column(String(255))
    call_id: Mapped[str] = mapped_column(String(255))
    """The model's call id (informational: it changes when the model is asked again)."""
    tool: Mapped[str] = mapped_column(String(255))
    """The tool name as the model wrote it (cut to 255 characters), known or not."""
    arguments_digest: Mapped[str] = mapped_column(String(64))
    """sha256 (hex) of the redacted canonical arguments, or of the raw string when it was no JSON."""
    outcome: Mapped[str] = mapped_column(String(32))
    """`ok` or the result's error code."""
    duration_ms: Mapped[float] = mapped_column(Float)
    replayed: Mapped[bool] = mapped_column(Boolean)
    """The result was a stored one, replayed instead of executing again."""
    idempotency_key: Mapped[str | None] = mapped_column(String(64), default=None)
    """The ledger key of a write, linking the record to its ledger entry."""
    arguments: Mapped[str | None] = mapped_column(Text, default=None)
    """The redacted arguments, only when the audit log is configured to keep them."""
