"""The Alembic environment of toolwire's store.

`toolwire.store.migrate.migrate()` hands in a connection (Alembic's async recipe); Alembic's own
command line, pointed at `alembic_config(url)`, connects through `Database` instead.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from toolwire.store.db import Database, default_database_url
from toolwire.store.migrate import VERSION_TABLE
from toolwire.store.tables import Base

__all__: list[str] = []


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things: later migrations use batch operations to copy the table.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_standalone(url: str) -> None:
    db = Database(url)
    try:
        async with db.connect(write=True) as conn:
            await conn.run_sync(_run)
    finally:
        await db.aclose()


def _main() -> None:
    url = context.config.get_main_option("sqlalchemy.url") or default_database_url()
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    elif context.is_offline_mode():
        context.configure(
            url=url,
            target_metadata=Base.metadata,
            version_table=VERSION_TABLE,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    else:
        asyncio.run(_run_standalone(url))


_main()
