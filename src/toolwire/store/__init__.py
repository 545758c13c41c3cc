"""Storage: SQLAlchemy 2 (async) on SQLite by default or PostgreSQL by URL, with Alembic migrations."""

from __future__ import annotations

# Each feature's tables live in their own module; importing them here puts every table on
# Base.metadata before migrations or their drift check look at it.
from toolwire.store import tables_functions, tables_ledger, tables_principals  # noqa: F401
from toolwire.store.db import DATABASE_URL_ENV, Database, default_database_url, normalize_url
from toolwire.store.migrate import current_revisions, migrate
from toolwire.store.tables import Base, Item

__all__ = [
    "DATABASE_URL_ENV",
    "Base",
    "Database",
    "Item",
    "current_revisions",
    "default_database_url",
    "migrate",
    "normalize_url",
]
