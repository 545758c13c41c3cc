"""The bookkeeping assistant of the specification: `create_item`, `list_items` and `get_summary`.

The tools find their `Database` in `Context.extra["db"]` and act only on the rows of the context's
tenant and user, which come from the application and never from the model's arguments. Relative
dates ("today", "last_month") are resolved against the context's clock in the user's time zone.
The queries are plain functions on an `AsyncSession`, so they can join a larger transaction.
Argument names (`startDate`, `pageNum`...) are the specification's, so they stay camelCase.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import Field
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from toolwire.context import Context
from toolwire.demo.dates import resolve_date, resolve_range
from toolwire.exceptions import ConfigError
from toolwire.gate.ledger import transactional
from toolwire.store.db import Database
from toolwire.store.tables import CENT, Item
from toolwire.tools import Toolbox, tool

__all__ = [
    "CategoryTotal",
    "Summary",
    "bookkeeping_toolbox",
    "create_item",
    "get_summary",
    "insert_item",
    "list_items",
    "parse_amount",
    "select_items",
    "summarize_items",
    "system_prompt",
]

_MAX_AMOUNT = Decimal("9999999999.99")  # what NUMERIC(12, 2) holds


@dataclass(kw_only=True, frozen=True)
class CategoryTotal:
    """The sum and number of one category's entries."""

    category: str
    total: Decimal
    count: int


@dataclass(kw_only=True, frozen=True)
class Summary:
    """Totals over a period, overall and per category (largest first)."""

    total: Decimal
    count: int
    categories: tuple[CategoryTotal, ...]


def parse_amount(value: float | int | str | Decimal) -> Decimal:
    """A positive amount with at most two decimals, as a `Decimal`.

    Raises:
        ValueError: the value is not a number, not positive, too large, or has more than two decimals.
    """
    try:
        # str() first: Decimal(0.1) would carry the float's binary error into the amount.
        amount = Decimal(str(value))
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite():
        raise ValueError(f"amount {value!r} is not a number: send it as a number such as 12.5.")
    if amount <= 0:
        raise ValueError(f"amount {value!r} must be greater than 0: book refunds in their own category.")
    if amount != amount.quantize(CENT):
        raise ValueError(f"amount {value!r} has more than two decimals: round it to the cent.")
    if amount > _MAX_AMOUNT:
        raise ValueError(f"amount {value!r} is too large: the most one entry can hold is {_MAX_AMOUNT}.")
    return amount.quantize(CENT)


async def insert_item(
    session: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    category: str,
    amount: Decimal,
    title: str,
    date: dt.date,
    remark: str | None = None,
) -> Item:
    """Add one entry in the session's transaction and return it with its id assigned."""
    item = Item(
        tenant_id=tenant_id,
        user_id=user_id,
        category=category,
        amount=amount,
        title=title,
        date=date,
        remark=remark,
    )
    session.add(item)
    await session.flush()
    return item


def _owned_by(
    tenant_id: str,
    user_id: str,
    *,
    category: str | None = None,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> list[ColumnElement[bool]]:
    conditions = [Item.tenant_id == tenant_id, Item.user_id == user_id]
    if category:
        # Users and models say "Food" and "food" for the same thing.
        conditions.append(func.lower(Item.category) == category.strip().lower())
    if start is not None:
        conditions.append(Item.date >= start)
    if end is not None:
        conditions.append(Item.date <= end)
    return conditions


async def select_items(
    session: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    category: str | None = None,
    start: dt.date | None = None,
    end: dt.date | None = None,
    offset: int = 0,
    limit: int = 15,
) -> tuple[list[Item], int]:
    """One page of a user's entries, newest first, and the number of all that match."""
    conditions = _owned_by(tenant_id, user_id, category=category, start=start, end=end)
    total = await session.scalar(select(func.count()).select_from(Item).where(*conditions))
    rows = await session.scalars(
        select(Item).where(*conditions).order_by(Item.date.desc(), Item.id.desc()).offset(offset).limit(limit)
    )
    return list(rows), int(total or 0)


async def summarize_items(
    session: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> Summary:
    """The sum and count of a user's entries in a period, overall and per category."""
    rows = await session.execute(
        select(Item.category, func.sum(Item.amount), func.count())
        .where(*_owned_by(tenant_id, user_id, start=start, end=end))
        .group_by(Item.category)
    )
    categories = sorted(
        (CategoryTotal(category=name, total=total, count=count) for name, total, count in rows),
        key=lambda entry: (-entry.total, entry.category),
    )
    return Summary(
        total=sum((entry.total for entry in categories), Decimal("0.00")),
        count=sum(entry.count for entry in categories),
        categories=tuple(categories),
    )


def _database(ctx: Context) -> Database:
    db = ctx.extra.get("db")
    if not isinstance(db, Database):
        raise ConfigError(
            "The bookkeeping tools need a Database in Context.extra['db']; "
            "add one when you build the Context."
        )
    return db


def _money(amount: Decimal) -> float:
    # JSON has no decimal type: a float rounded to the cent prints as at most two decimals.
    return float(amount.quantize(CENT))


def _item_json(item: Item) -> dict[str, Any]:
    return {
        "id": item.id,
        "title": item.title,
        "amount": _money(item.amount),
        "category": item.category,
        "date": item.date.isoformat(),
        "remark": item.remark,
    }


@transactional
@tool(effect="write", timeout=10.0)
async def create_item(
    ctx: Context,
    category: Annotated[str, Field(min_length=1, max_length=64)],
    amount: Annotated[float, Field(gt=0)],
    title: Annotated[str, Field(min_length=1, max_length=200)],
    date: str = "today",
    remark: Annotated[str, Field(max_length=1000)] | None = None,
) -> dict[str, Any]:
    """Book one new entry (an expense, an income or any amount) for the user.

    Use it when the user asks to book, add, record or register an amount, or says what they spent.
    Call it once per entry; do not use it to look entries up.

    Args:
        ctx: The run's context (tenant, user, clock, database).
        category: The kind of entry, one or two words, e.g. "food", "travel", "office", "salary".
        amount: The amount as a positive number with at most two decimals, e.g. 12.5.
        title: What it was, in the user's own words, e.g. "Taxi to the airport"; add no detail they
            did not give.
        date: The day it happened as YYYY-MM-DD, or "today" / "yesterday"; the application resolves
            relative dates. Default: today.
        remark: An optional note.
    """
    db = _database(ctx)
    day = resolve_date(date, ctx.current_time())
    value = parse_amount(amount)
    if not category.strip() or not title.strip():
        raise ValueError("category and title must not be blank: say what was booked and of which kind.")
    # Under the Gate's ledger this is the ledger's own transaction: the entry and the record of this
    # call commit together, so a retried request can never book it twice.
    async with ctx.transaction(db) as session:
        item = await insert_item(
            session,
            tenant_id=ctx.tenant_id,
            user_id=ctx.user_id,
            category=category.strip(),
            amount=value,
            title=title.strip(),
            date=day,
            remark=remark.strip() if remark and remark.strip() else None,
        )
    entry = _item_json(item)
    del entry["remark"]
    return {"success": True, "item": entry}


@tool(effect="read", timeout=10.0)
async def list_items(
    ctx: Context,
    category: str | None = None,
    startDate: str | None = None,
    endDate: str | None = None,
    pageNum: Annotated[int, Field(ge=1)] = 1,
    pageSize: Annotated[int, Field(ge=1, le=100)] = 15,
) -> dict[str, Any]:
    """List the user's booked entries, newest first, optionally filtered by category and dates.

    Use it when the user says "show", "list", "which entries", "what did I book" or "filter".
    For totals use get_summary instead.

    Args:
        ctx: The run's context (tenant, user, clock, database).
        category: Only entries of this category (letter case does not matter).
        startDate: The first day to include, YYYY-MM-DD or "today" / "yesterday".
        endDate: The last day to include, YYYY-MM-DD or "today" / "yesterday".
        pageNum: The page to show, starting at 1. Default: 1.
        pageSize: Entries per page, at most 100. Default: 15.
    """
    db = _database(ctx)
    start, end = resolve_range(startDate, endDate, None, ctx.current_time())
    async with db.transaction() as session:
        items, total = await select_items(
            session,
            tenant_id=ctx.tenant_id,
            user_id=ctx.user_id,
            category=category,
            start=start,
            end=end,
            offset=(pageNum - 1) * pageSize,
            limit=pageSize,
        )
    return {
        "items": [_item_json(item) for item in items],
        "total": total,
        "pageNum": pageNum,
        "pageSize": pageSize,
    }


@tool(effect="read", timeout=10.0)
async def get_summary(
    ctx: Context,
    startDate: str | None = None,
    endDate: str | None = None,
    month: str | None = None,
) -> dict[str, Any]:
    """Sum up the user's entries: the total, the number of entries and the total per category.

    Use it when the user asks "how much in total", "how much did I spend", for statistics or for a
    summary. Give either month or startDate/endDate; with neither, every entry counts.

    Args:
        ctx: The run's context (tenant, user, clock, database).
        startDate: The first day to include, YYYY-MM-DD or "today" / "yesterday".
        endDate: The last day to include, YYYY-MM-DD or "today" / "yesterday".
        month: A whole month instead of a date range: YYYY-MM, "this_month" or "last_month".
    """
    db = _database(ctx)
    start, end = resolve_range(startDate, endDate, month, ctx.current_time())
    async with db.transaction() as session:
        summary = await summarize_items(
            session, tenant_id=ctx.tenant_id, user_id=ctx.user_id, start=start, end=end
        )
    return {
        "range": {
            "start": start.isoformat() if start else None,
            "end": end.isoformat() if end else None,
        },
        "total": _money(summary.total),
        "count": summary.count,
        "byCategory": [
            {"category": entry.category, "total": _money(entry.total), "count": entry.count}
            for entry in summary.categories
        ],
    }


def bookkeeping_toolbox() -> Toolbox:
    """The three bookkeeping tools, ready to offer to a model."""
    return Toolbox([create_item, list_items, get_summary])


def system_prompt(now: dt.datetime) -> str:
    """The bookkeeping assistant's instructions, with today's date as the application knows it.

    Args:
        now: The current moment in the user's time zone (`Context.current_time()`).
    """
    zone = getattr(now.tzinfo, "key", None) or now.tzname() or "UTC"
    return (
        "You are a bookkeeping assistant. You book entries and answer questions about them with the "
        "tools create_item, list_items and get_summary.\n"
        f"Today is {now:%A}, {now:%Y-%m-%d} (time zone {zone}). This date comes from the application: "
        "use it, never your own idea of today.\n"
        "- Pass dates as YYYY-MM-DD, or as 'today' or 'yesterday'; the application resolves them.\n"
        "- For a whole month pass month as YYYY-MM, 'this_month' or 'last_month'.\n"
        "- Amounts are positive numbers with at most two decimals.\n"
        "- Report only what the tools return; never invent entries, ids or totals.\n"
        "- If a tool answers with an error, correct the arguments and call it again, or ask the user.\n"
        "- Answer briefly, in the language the user writes in."
    )
