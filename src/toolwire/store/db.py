"""Database: one async engine and its sessions, SQLite by default, PostgreSQL by URL.

Every error the database or its driver raises leaves this module as a `StorageError` whose message is
one sentence saying what to do; a user never sees a driver traceback.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import platformdirs
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import StaticPool

from toolwire.exceptions import ConfigError, StorageError

__all__ = [
    "DATABASE_URL_ENV",
    "Database",
    "DatabaseLockedError",
    "default_database_url",
    "normalize_url",
    "storage_error",
]

DATABASE_URL_ENV = "TOOLWIRE_DATABASE_URL"
"""The environment variable that chooses the database."""

_BEGIN_OPTION = "toolwire_begin"
_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}
_SUPPORTED = ("sqlite+aiosqlite", "postgresql+asyncpg")
_CONNECT_TIMEOUT = 10.0
# OSError and TimeoutError are what asyncpg raises, unwrapped, when it cannot connect (refused,
# unknown host, no answer); the others are the drivers' and SQLAlchemy's own.
_DATABASE_ERRORS = (SQLAlchemyError, sqlite3.Error, asyncpg.PostgresError, OSError, TimeoutError)


def default_database_url() -> str:
    """The URL of the database to use when none is given.

    `TOOLWIRE_DATABASE_URL` when set, else a SQLite file `toolwire.db` in the user's data folder
    (created if missing).
    """
    configured = os.environ.get(DATABASE_URL_ENV, "").strip()
    if configured:
        return configured
    folder = Path(platformdirs.user_data_dir("toolwire"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{folder / 'toolwire.db'}"


def normalize_url(url: str) -> URL:
    """Parse a database URL and pick the async driver toolwire uses for it.

    `sqlite:///x` becomes `sqlite+aiosqlite:///x` and `postgresql://...` becomes
    `postgresql+asyncpg://...`; a libpq-style `sslmode` becomes asyncpg's `ssl`.

    Raises:
        ConfigError: the URL cannot be parsed or names a database other than SQLite or PostgreSQL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"The database URL {url!r} cannot be read; use sqlite:///path/to/file.db or "
            f"postgresql://user@host/dbname in {DATABASE_URL_ENV}."
        ) from None
    parsed = parsed.set(drivername=_DRIVERS.get(parsed.drivername, parsed.drivername))
    if parsed.drivername not in _SUPPORTED:
        raise ConfigError(
            f"The database URL uses {parsed.drivername!r}, which toolwire does not support; "
            f"use sqlite:///path/to/file.db or postgresql://user@host/dbname in {DATABASE_URL_ENV}."
        )
    if parsed.get_backend_name() == "postgresql" and "sslmode" in parsed.query:
        ssl = parsed.query["sslmode"]
        parsed = parsed.difference_update_query(["sslmode"]).update_query_dict({"ssl": ssl})
    return parsed


class Database:
    """An async engine with a session factory, for SQLite or PostgreSQL.

    `Database(url)` connects lazily and does not migrate; `await Database.open(url)` also brings the
    schema to the newest migration. Use `transaction()` for units of work.
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout: float = 5.0,
        connect_args: Mapping[str, Any] | None = None,
        echo: bool = False,
    ) -> None:
        """Create the engine; nothing connects until the first transaction.

        Args:
            url: A SQLite or PostgreSQL URL; the async driver is chosen for it.
            busy_timeout: Seconds a SQLite connection waits for a lock held by another process
                before failing.
            connect_args: Extra keyword arguments for the driver's connect call (for example
                asyncpg's `server_settings`).
            echo: Log every SQL statement.
        """
        self.url = normalize_url(url)
        """The parsed URL with the async driver."""
        self.busy_timeout = busy_timeout
        self.engine = self._create_engine(dict(connect_args or {}), echo)
        """The SQLAlchemy async engine."""
        # A second view of the same pool whose transactions take SQLite's write lock up front: a
        # deferred transaction that reads and then writes can fail at once when another process
        # wrote in between, instead of waiting its busy timeout.
        self._write_engine = self.engine.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        """The session factory; prefer `transaction()`, which also translates errors."""

    @classmethod
    async def open(cls, url: str | None = None, **options: Any) -> Database:
        """Connect and bring the schema to the newest migration, so a bad URL fails here, at once.

        Migrating is idempotent and costs one query when the schema is already current.

        Args:
            url: The database URL; `default_database_url()` when `None`.
            **options: Passed on to `Database(...)`.

        Raises:
            StorageError: the database cannot be reached or migrated; the message says what to do.
        """
        from toolwire.store.migrate import migrate  # migrate imports this module

        db = cls(url if url is not None else default_database_url(), **options)
        try:
            await migrate(db)
        except BaseException:
            await db.aclose()
            raise
        return db

    @property
    def backend(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.url.get_backend_name()

    @property
    def location(self) -> str:
        """Where the data lives, for messages: a file path, or host:port/database."""
        if self.backend == "sqlite":
            return self.url.database or ":memory:"
        return f"{self.url.host or 'localhost'}:{self.url.port or 5432}/{self.url.database or ''}"

    @asynccontextmanager
    async def transaction(self, *, write: bool = False) -> AsyncIterator[AsyncSession]:
        """A session inside one transaction: committed on success, rolled back on an exception.

        Args:
            write: The transaction will write; on SQLite it takes the write lock when it begins,
                so it waits for other writers (up to `busy_timeout`) instead of failing midway.

        Raises:
            StorageError: the database failed; the message says what to do.
        """
        bind = self._write_engine if write else self.engine
        try:
            async with self.sessions(bind=bind) as session, session.begin():
                yield session
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc, self) from exc

    @asynccontextmanager
    async def connect(self, *, write: bool = False) -> AsyncIterator[AsyncConnection]:
        """A Core connection inside one transaction, with the same error translation.

        Args:
            write: Take SQLite's write lock when the transaction begins (see `transaction`).

        Raises:
            StorageError: the database failed; the message says what to do.
        """
        engine = self._write_engine if write else self.engine
        try:
            async with engine.begin() as conn:
                yield conn
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc, self) from exc

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Database({self.url.render_as_string(hide_password=True)!r})"

    def _create_engine(self, connect_args: dict[str, Any], echo: bool) -> AsyncEngine:
        if self.backend == "postgresql":
            connect_args.setdefault("timeout", _CONNECT_TIMEOUT)
            return create_async_engine(self.url, connect_args=connect_args, pool_pre_ping=True, echo=echo)
        options: dict[str, Any] = {}
        if self.url.database in (None, "", ":memory:"):
            # Each new connection to :memory: would be a new, empty database: share one.
            options["poolclass"] = StaticPool
        engine = create_async_engine(self.url, connect_args=connect_args, echo=echo, **options)
        _configure_sqlite(engine, round(self.busy_timeout * 1000))
        return engine


def _configure_sqlite(engine: AsyncEngine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (see `_on_begin`): the driver's own implicit transactions
        # start late and leave SELECTs outside the transaction.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first, so the other pragmas already wait for a lock instead of failing.
            cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN"))


class DatabaseLockedError(StorageError):
    """SQLite stayed locked by another connection for longer than the busy timeout."""


def storage_error(exc: BaseException, db: Database) -> StorageError:
    """Turn a database or driver error into a `StorageError` with one sentence saying what to do.

    Args:
        exc: The error SQLAlchemy, aiosqlite, asyncpg or the network raised.
        db: The database it came from, named in the message.
    """
    if isinstance(exc, StorageError):
        return exc
    cause: BaseException = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    # SQLAlchemy's asyncpg adapter wraps the driver's exception; the original says what happened.
    if cause.__cause__ is not None and isinstance(cause.__cause__, asyncpg.PostgresError | OSError):
        cause = cause.__cause__
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if db.backend == "sqlite":
        message = _sqlite_message(text.lower(), text, db.location)
        locked = "locked" in text.lower() or "busy" in text.lower()
        return DatabaseLockedError(message) if locked else StorageError(message)
    return StorageError(_postgres_message(cause, text, db))


def _sqlite_message(lowered: str, text: str, where: str) -> str:
    if "locked" in lowered or "busy" in lowered:
        return (
            f"The database at {where} is locked by another process; try again, or stop the other "
            "process that is writing to it."
        )
    if "unable to open" in lowered:
        return f"Cannot open the SQLite database at {where}; check that its folder exists and is writable."
    if "readonly" in lowered or "read-only" in lowered:
        return f"The SQLite database at {where} is read-only; give this process write access to the file."
    if "no such table" in lowered:
        return (
            f"The database at {where} has no toolwire tables yet ({text}); open it with "
            "Database.open(...) or run the migrations first."
        )
    if "not a database" in lowered or "malformed" in lowered:
        return (
            f"The file {where} is not a usable SQLite database ({text}); point {DATABASE_URL_ENV} elsewhere."
        )
    return f"The SQLite database at {where} failed ({text}); check {DATABASE_URL_ENV} and try again."


def _postgres_message(cause: BaseException, text: str, db: Database) -> str:
    host = f"{db.url.host or 'localhost'}:{db.url.port or 5432}"
    if isinstance(cause, OSError | TimeoutError) and not isinstance(cause, asyncpg.PostgresError):
        return (
            f"Cannot reach the PostgreSQL server at {host} ({text}); check that it is running and "
            f"that {DATABASE_URL_ENV} names the right host and port."
        )
    if isinstance(cause, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError):
        return (
            f"The PostgreSQL server at {host} refused the login of user {db.url.username!r}; "
            f"check the user and password in {DATABASE_URL_ENV}."
        )
    if isinstance(cause, asyncpg.InvalidCatalogNameError):
        return (
            f"The database {db.url.database!r} does not exist on the PostgreSQL server at {host}; "
            f"create it or fix {DATABASE_URL_ENV}."
        )
    if isinstance(cause, asyncpg.UndefinedTableError):
        return (
            f"The database at {db.location} has no toolwire tables yet ({text}); open it with "
            "Database.open(...) or run the migrations first."
        )
    if isinstance(cause, asyncpg.exceptions.ConnectionDoesNotExistError | asyncpg.InterfaceError):
        return f"The connection to the PostgreSQL server at {host} broke ({text}); try again."
    return (
        f"The PostgreSQL database at {db.location} failed ({text}); check {DATABASE_URL_ENV} and try again."
    )
