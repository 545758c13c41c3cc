"""The per-run context the application hands to tools; the model never sees it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from toolwire.store.db import Database

__all__ = ["Context", "StoreTransaction"]


def _new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


@dataclass(kw_only=True, frozen=True)
class StoreTransaction:
    """An open transaction of a database that a write shares with its ledger record."""

    database: Database
    """The database the transaction belongs to."""
    session: AsyncSession
    """The session inside the transaction; whoever opened it commits or rolls it back."""


@dataclass(kw_only=True, frozen=True)
class Context:
    """Who is asking, and for which application request.

    The runtime injects it into every tool that declares a `Context` parameter; it is never part of
    a tool's JSON Schema, so a model cannot forge it.
    """

    user_id: str = "local"
    """The end user on whose behalf tools run."""
    tenant_id: str = "default"
    """The tenant the user belongs to; data never crosses tenants."""
    request_id: str = field(default_factory=_new_request_id)
    """The application's request id: retries of one request share it (it keys idempotency)."""
    scopes: frozenset[str] = frozenset()
    """What the principal may do, checked by the policy before execution."""
    locale: str = "en"
    """The user's language, for tools that format text."""
    timezone: tzinfo = UTC
    """The user's time zone; relative dates ("today") are resolved in it."""
    now: datetime | None = None
    """A fixed clock for tests and replays; `None` means the real time."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the application adds (a database session, a tenant config...)."""
    store_transaction: StoreTransaction | None = None
    """Set by the Gate while it runs a transactional write exactly once: the ledger's transaction,
    which the tool's own writes join through `transaction()`. `None` otherwise."""

    def current_time(self) -> datetime:
        """The time to resolve relative dates against, in the user's time zone."""
        moment = self.now if self.now is not None else datetime.now(UTC)
        return moment.astimezone(self.timezone)

    def transaction(self, db: Database) -> AbstractAsyncContextManager[AsyncSession]:
        """The transaction a tool's writes to `db` belong in.

        While the Gate runs a transactional write (see `toolwire.gate.ledger`) and `db` is the
        ledger's database, this joins the ledger's transaction, inside a savepoint: the tool's
        writes and the record of its result then commit or roll back together, so a crash can never
        leave one without the other. Otherwise it is `db.transaction(write=True)`.

        Example:
            ```python
            async with ctx.transaction(db) as session:
                session.add(row)
            ```
        """
        shared = self.store_transaction
        if shared is not None and shared.database is db:
            return _savepoint(shared.session)
        return db.transaction(write=True)


@asynccontextmanager
async def _savepoint(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    # A savepoint, so an exception inside the block undoes the block's writes as a transaction of
    # its own would, even when the tool catches the exception and goes on.
    async with session.begin_nested():
        yield session
