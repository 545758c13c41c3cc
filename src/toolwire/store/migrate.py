"""Schema migrations: Alembic `upgrade` run from code, with the migrations shipped in the package.

No `alembic.ini` is needed: the configuration is built here. `migrate(db)` is idempotent, safe to
run from several processes at once (SQLite's write lock or a PostgreSQL advisory lock serializes
them), and returns after one cheap query when the schema is already at the newest revision.
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from toolwire.exceptions import StorageError
from toolwire.store.db import Database, DatabaseLockedError

__all__ = [
    "MIGRATIONS_DIR",
    "VERSION_TABLE",
    "alembic_config",
    "current_revisions",
    "head_revisions",
    "migrate",
]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
"""The Alembic environment: `env.py` and `versions/0001_...`, applied in order."""

VERSION_TABLE = "toolwire_version"
"""Where Alembic records the applied revision; named so it cannot clash with an application's own."""

# Any fixed 64-bit number: processes migrating the same PostgreSQL database queue on it.
_PG_LOCK_KEY = 0x746F6F6C77697265


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration for toolwire's migrations, built without an ini file.

    Args:
        url: The database URL for Alembic's own command line; `migrate()` passes a connection
            instead.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@functools.cache
def head_revisions() -> frozenset[str]:
    """The newest revision(s) this version of toolwire knows."""
    return frozenset(ScriptDirectory.from_config(alembic_config()).get_heads())


@functools.cache
def _known_revisions() -> frozenset[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return frozenset(rev.revision for rev in script.walk_revisions())


def _read_current(connection: Connection) -> frozenset[str]:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return frozenset(context.get_current_heads())


async def current_revisions(db: Database) -> frozenset[str]:
    """The revision(s) the database is at; empty when it was never migrated.

    Raises:
        StorageError: the database cannot be read.
    """
    async with db.connect() as conn:
        return await conn.run_sync(_read_current)


def _upgrade(connection: Connection, revision: str) -> None:
    if connection.dialect.name == "postgresql":
        # Held until the transaction ends, so a second process waits and then finds the work done.
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})")
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


_LOCK_WAIT = 120.0
"""How long a migration waits for another process migrating the same SQLite file, in seconds."""


async def migrate(db: Database, revision: str = "head") -> None:
    """Bring the database's schema up to `revision` (the newest by default), in one transaction.

    Args:
        db: The database to migrate.
        revision: The target revision; `head` is the newest.

    Raises:
        StorageError: the database failed, or it was migrated by a newer toolwire.
    """
    deadline = time.monotonic() + _LOCK_WAIT
    while True:
        try:
            await _migrate_once(db, revision)
            return
        except DatabaseLockedError:
            # Another process is migrating the same SQLite file. It holds the write lock for the
            # whole upgrade, which can outlast the busy timeout on a loaded machine, and even
            # opening a connection (which sets WAL mode) waits for it: wait, then read the revision
            # again and find the work done, rather than fail a start-up over it.
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.25)


async def _migrate_once(db: Database, revision: str) -> None:
    current = await current_revisions(db)
    unknown = current - _known_revisions()
    if unknown:
        raise StorageError(
            f"The database at {db.location} is at revision {', '.join(sorted(unknown))}, which this "
            "toolwire does not know; upgrade toolwire to the version that migrated it."
        )
    if revision == "head" and current == head_revisions():
        return
    try:
        async with db.connect(write=True) as conn:
            await conn.run_sync(_upgrade, revision)
    except CommandError as exc:
        raise StorageError(
            f"Migrating the database at {db.location} to {revision!r} failed ({exc}); "
            "use 'head' or a revision listed in toolwire/store/migrations/versions."
        ) from exc
