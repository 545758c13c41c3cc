"""The tables toolwire keeps, as SQLAlchemy declarative dataclasses.

Every row belongs to a tenant, and user data also to a user: queries filter on both. The schema
itself is created by the Alembic migrations in `toolwire/store/migrations/versions`, never by
`metadata.create_all`, so a change here always comes with a new migration.
"""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Date,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Text,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ["CENT", "Base", "Item", "Money", "UtcDateTime", "utc_now"]

CENT = Decimal("0.01")
"""The precision of every amount."""

_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utc_now() -> dt.datetime:
    """The current time, timezone-aware, in UTC."""
    return dt.datetime.now(dt.UTC)


class Money(TypeDecorator[Decimal]):
    """An amount with two decimals: `NUMERIC(12, 2)`, always read back as a `Decimal` in cents.

    SQLite has no decimal type and stores the value as a float; reading it back rounds to the cent,
    which is exact for every amount NUMERIC(12, 2) can hold.
    """

    impl = Numeric(12, 2)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            # asdecimal=False: SQLAlchemy would otherwise warn that SQLite converts through floats;
            # `process_result_value` does the rounding explicitly instead.
            return dialect.type_descriptor(Numeric(12, 2, asdecimal=False))
        return dialect.type_descriptor(Numeric(12, 2))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        amount = Decimal(value).quantize(CENT, rounding=ROUND_HALF_EVEN)
        return float(amount) if dialect.name == "sqlite" else amount

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        # str() of a float is its shortest round-tripping form, so 0.1 + 0.2 reads as 0.30.
        return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_EVEN)


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware timestamp stored in UTC; SQLite's naive values are read back as UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("UtcDateTime needs a timezone-aware datetime.")
        moment = value.astimezone(dt.UTC)
        return moment.replace(tzinfo=None) if dialect.name == "sqlite" else moment

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class Base(MappedAsDataclass, DeclarativeBase, kw_only=True):
    """The declarative base: keyword-only dataclasses with named constraints."""

    metadata = MetaData(naming_convention=_NAMING)


class Item(Base):
    """One bookkeeping entry of one user: what was booked, when, and for how much."""

    __tablename__ = "items"
    __table_args__ = (Index("ix_items_tenant_user_date", "tenant_id", "user_id", "date"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, init=False
    )
    """Assigned by the database; SQLite needs INTEGER for its rowid alias."""
    tenant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(128))
    category: Mapped[str] = mapped_column(String(64))
    amount: Mapped[Decimal] = mapped_column(Money())
    """Positive, two decimals."""
    title: Mapped[str] = mapped_column(String(200))
    date: Mapped[dt.date] = mapped_column(Date)
    """The day the entry is booked on, in the user's time zone."""
    remark: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    """When the row was written, in UTC."""
