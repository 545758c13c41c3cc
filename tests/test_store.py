from __future__ import annotations

import asyncio
import datetime as dt
import io
import socket
import sqlite3
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event, func, inspect, select, text
from sqlalchemy.engine import Connection

from pg import POSTGRES_URL, admin_connection, postgres_schema, schema_args
from toolwire.exceptions import ConfigError, StorageError
from toolwire.store import Database, Item, current_revisions, default_database_url, migrate, normalize_url
from toolwire.store.migrate import VERSION_TABLE, alembic_config, head_revisions
from toolwire.store.tables import Base


async def _postgres_schema() -> AsyncGenerator[tuple[str, dict[str, Any]]]:
    """A fresh schema on the test server, dropped afterwards; skips when the server is away."""
    async with postgres_schema() as schema:
        yield POSTGRES_URL, schema_args(schema)


@dataclass(kw_only=True)
class Backend:
    """One empty database (a SQLite file, or a fresh PostgreSQL schema) and the `Database`s built on it."""

    url: str
    connect_args: dict[str, Any]
    created: list[Database] = field(default_factory=list)

    def make(self, **options: Any) -> Database:
        db = Database(self.url, connect_args=self.connect_args, **options)
        self.created.append(db)
        return db

    async def open(self) -> Database:
        db = await Database.open(self.url, connect_args=self.connect_args)
        self.created.append(db)
        return db

    async def aclose(self) -> None:
        for db in self.created:
            await db.aclose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        target = Backend(url=f"sqlite:///{tmp_path / 'store.db'}", connect_args={})
        yield target
        await target.aclose()
        return
    async for url, connect_args in _postgres_schema():
        target = Backend(url=url, connect_args=connect_args)
        yield target
        await target.aclose()  # before the schema is dropped


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///data/x.db", "sqlite+aiosqlite:///data/x.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://u:p@db.example:5433/app", "postgresql+asyncpg://u:p@db.example:5433/app"),
        ("postgres://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("postgresql://u@db/app?sslmode=require", "postgresql+asyncpg://u@db/app?ssl=require"),
    ],
)
def test_urls_get_the_async_driver(given: str, expected: str) -> None:
    assert normalize_url(given).render_as_string(hide_password=False) == expected


@pytest.mark.parametrize("url", ["mysql://u@db/app", "not a url"])
def test_unsupported_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match="TOOLWIRE_DATABASE_URL"):
        normalize_url(url)


def test_default_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLWIRE_DATABASE_URL", "postgresql://u@db/app")
    assert default_database_url() == "postgresql://u@db/app"


def test_default_url_is_a_sqlite_file_in_the_user_data_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TOOLWIRE_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = default_database_url()
    assert url == f"sqlite+aiosqlite:///{tmp_path / 'data' / 'toolwire' / 'toolwire.db'}"
    assert (tmp_path / "data" / "toolwire").is_dir()


# --- migrations -----------------------------------------------------------------------------------


def _table_names(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def _items_indexes(connection: Connection) -> dict[str, list[str | None]]:
    return {ix["name"] or "": ix["column_names"] for ix in inspect(connection).get_indexes("items")}


async def test_migrate_from_empty_creates_the_schema(backend: Backend) -> None:
    db = backend.make()
    assert await current_revisions(db) == frozenset()

    await migrate(db)

    assert await current_revisions(db) == head_revisions()
    assert len(head_revisions()) == 1
    async with db.connect() as conn:
        assert {"items", VERSION_TABLE} <= await conn.run_sync(_table_names)
        indexes = await conn.run_sync(_items_indexes)
    assert indexes["ix_items_tenant_user_date"] == ["tenant_id", "user_id", "date"]


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "version_table": VERSION_TABLE}
    )
    return list(compare_metadata(context, Base.metadata))


async def test_migrations_match_the_declared_tables(backend: Backend) -> None:
    db = backend.make()
    await migrate(db)
    async with db.connect() as conn:
        assert await conn.run_sync(_differences) == []


async def test_migrating_twice_changes_nothing(backend: Backend) -> None:
    db = backend.make()
    await migrate(db)
    async with db.transaction() as session:
        session.add(_item(title="kept"))

    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement.strip().split()[0].upper())

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    await migrate(db)
    event.remove(db.engine.sync_engine, "before_cursor_execute", record)

    assert statements, "the second migrate still reads the current revision"
    assert set(statements) <= {"SELECT", "PRAGMA", "BEGIN"}, statements
    async with db.transaction() as session:
        assert [item.title for item in await session.scalars(select(Item))] == ["kept"]


async def test_concurrent_migrations_apply_once(backend: Backend) -> None:
    first, second = backend.make(), backend.make()
    await asyncio.gather(migrate(first), migrate(second))
    async with first.connect() as conn:
        versions = (await conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))).scalars().all()
    assert versions == sorted(head_revisions())


async def test_a_revision_from_a_newer_toolwire_is_refused(backend: Backend) -> None:
    db = backend.make()
    await migrate(db)
    async with db.connect() as conn:
        await conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    with pytest.raises(StorageError, match=r"revision 9999, which this toolwire does not know"):
        await migrate(db)


async def test_open_migrates_and_plain_construction_does_not(backend: Backend) -> None:
    plain = backend.make()
    with pytest.raises(StorageError, match="has no toolwire tables yet"):
        async with plain.transaction() as session:
            await session.scalars(select(Item))

    opened = await backend.open()
    async with opened.transaction() as session:
        assert list(await session.scalars(select(Item))) == []
    assert await current_revisions(opened) == head_revisions()


async def test_open_uses_the_configured_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOOLWIRE_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    async with await Database.open() as db, db.transaction() as session:
        session.add(_item())
    assert (tmp_path / "env.db").exists()


# --- types ----------------------------------------------------------------------------------------


def _item(**overrides: Any) -> Item:
    values: dict[str, Any] = {
        "tenant_id": "acme",
        "user_id": "alice",
        "category": "food",
        "amount": Decimal("19.99"),
        "title": "Lunch",
        "date": dt.date(2024, 5, 15),
    }
    values.update(overrides)
    return Item(**values)


async def test_amounts_and_timestamps_read_back_exactly(backend: Backend) -> None:
    db = backend.make()
    await migrate(db)
    async with db.transaction() as session:
        session.add_all([_item(amount=Decimal("0.10")), _item(amount=Decimal("0.20"))])
    async with db.transaction() as session:
        items = list(await session.scalars(select(Item).order_by(Item.id)))
        total = await session.scalar(select(func.sum(Item.amount)))
    assert [item.amount for item in items] == [Decimal("0.10"), Decimal("0.20")]
    assert total == Decimal("0.30")
    created = items[0].created_at
    assert created.tzinfo is not None
    assert created.utcoffset() == dt.timedelta(0)
    assert abs(dt.datetime.now(dt.UTC) - created) < dt.timedelta(minutes=5)


# --- SQLite settings and failures -----------------------------------------------------------------


async def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    async with Database(f"sqlite:///{tmp_path / 'p.db'}", busy_timeout=1.5) as db, db.connect() as conn:
        mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
        timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        foreign_keys = (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar()
    assert (mode, timeout, foreign_keys) == ("wal", 1500, 1)


async def test_a_locked_sqlite_database_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with Database(f"sqlite:///{path}") as setup:
        await migrate(setup)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        async with Database(f"sqlite:///{path}", busy_timeout=0.1) as db:
            with pytest.raises(StorageError) as caught:
                async with db.transaction(write=True) as session:
                    session.add(_item())
            message = str(caught.value)
            assert message == (
                f"The database at {path} is locked by another process; try again, or stop the other "
                "process that is writing to it."
            )
            other.execute("ROLLBACK")
            async with db.transaction(write=True) as session:
                session.add(_item())
    finally:
        other.close()


async def test_a_missing_sqlite_folder_is_a_storage_error(tmp_path: Path) -> None:
    async with Database(f"sqlite:///{tmp_path / 'missing' / 'x.db'}") as db:
        with pytest.raises(StorageError, match="check that its folder exists and is writable"):
            await migrate(db)


async def test_an_unreachable_postgres_names_the_host_and_the_setting() -> None:
    port = _closed_port()
    async with Database(f"postgresql://postgres@127.0.0.1:{port}/test") as db:
        with pytest.raises(StorageError) as caught:
            await migrate(db)
    message = str(caught.value)
    assert message.startswith(f"Cannot reach the PostgreSQL server at 127.0.0.1:{port} ")
    assert "TOOLWIRE_DATABASE_URL" in message
    assert "\n" not in message


@pytest.mark.postgres
async def test_a_missing_postgres_database_says_so() -> None:
    await (await admin_connection()).close()
    url = normalize_url(POSTGRES_URL).set(database=f"tw_missing_{uuid.uuid4().hex[:8]}")
    async with Database(url.render_as_string(hide_password=False)) as db:
        with pytest.raises(StorageError) as caught:
            await migrate(db)
    assert str(caught.value) == (
        f"The database {url.database!r} does not exist on the PostgreSQL server at "
        f"{url.host}:{url.port or 5432}; create it or fix TOOLWIRE_DATABASE_URL."
    )


# --- Alembic's own command line -------------------------------------------------------------------


def test_alembic_commands_work_without_an_ini_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    command.upgrade(alembic_config(url), "head")
    command.check(alembic_config(url))  # raises when the tables and the migrations disagree

    offline = alembic_config(url)
    offline.output_buffer = io.StringIO()
    command.upgrade(offline, "head", sql=True)
    script = offline.output_buffer.getvalue()
    assert "CREATE TABLE items" in script
    assert "CREATE INDEX ix_items_tenant_user_date ON items (tenant_id, user_id, date)" in script

    with sqlite3.connect(tmp_path / "cli.db") as plain:
        assert plain.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [
            (h,) for h in head_revisions()
        ]


async def test_an_in_memory_database_keeps_its_data_between_transactions() -> None:
    async with await Database.open("sqlite://") as db:
        async with db.transaction(write=True) as session:
            session.add(_item(title="remembered"))
        async with db.transaction() as session:
            assert [item.title for item in await session.scalars(select(Item))] == ["remembered"]


async def test_a_migration_waits_for_another_process_migrating_the_same_sqlite_file(tmp_path: Path) -> None:
    # A busy timeout far shorter than one upgrade: the second migration must wait, not fail.
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with Database(url, busy_timeout=0.01) as first, Database(url, busy_timeout=0.01) as second:
        await asyncio.gather(migrate(first), migrate(second))
        assert await current_revisions(first) == head_revisions()
