"""The PostgreSQL test server: fresh schemas and databases that are dropped afterwards.

`PostgresUnavailable` is a pytest skip, so a test or fixture that meets an absent server is skipped
with the reason (and fails in CI, where `conftest.py` requires PostgreSQL); worker scripts that
run outside pytest see it as an exception.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from toolwire.store import Database, normalize_url

POSTGRES_URL = os.environ.get("TOOLWIRE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


class PostgresUnavailable(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """The test server cannot be reached."""


async def admin_connection() -> asyncpg.Connection:
    """A plain connection to the test server."""
    url = normalize_url(POSTGRES_URL)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        return await asyncpg.connect(dsn, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        raise PostgresUnavailable(
            f"PostgreSQL at {url.host}:{url.port or 5432} is not reachable ({exc})"
        ) from exc


@asynccontextmanager
async def postgres_schema() -> AsyncIterator[str]:
    """A fresh schema on the test server (its name), dropped afterwards."""
    admin = await admin_connection()
    schema = f"tw_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


@asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """A new, empty database on the test server (its URL), dropped afterwards."""
    admin = await admin_connection()
    name = f"tw_db_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield normalize_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


def schema_args(schema: str | None) -> dict[str, object]:
    """Connection arguments that put a `Database` inside `schema`."""
    return {"server_settings": {"search_path": schema}} if schema else {}


def database(url: str, schema: str | None = None) -> Database:
    """A `Database` on `url`; on PostgreSQL inside `schema`."""
    return Database(url, connect_args=schema_args(schema))


@asynccontextmanager
async def migrated_database(backend: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated, empty database: a SQLite file under `tmp_path`, or a fresh PostgreSQL schema."""
    from toolwire.store import migrate

    async with AsyncExitStack() as stack:
        if backend == "sqlite":
            db = database(f"sqlite:///{tmp_path / 'test.db'}")
        else:
            schema = await stack.enter_async_context(postgres_schema())
            db = database(POSTGRES_URL, schema)
        stack.push_async_callback(db.aclose)  # closed before the schema is dropped
        await migrate(db)
        yield db
