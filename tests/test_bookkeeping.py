from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema  # type: ignore[import-untyped]
import pytest

from pg import POSTGRES_URL, postgres_schema, schema_args
from toolwire.context import Context
from toolwire.demo.bookkeeping import (
    bookkeeping_toolbox,
    create_item,
    get_summary,
    insert_item,
    list_items,
    parse_amount,
    system_prompt,
)
from toolwire.demo.dates import resolve_date, resolve_range
from toolwire.exceptions import ConfigError, StorageError
from toolwire.gate.gate import Gate
from toolwire.messages import ToolCall
from toolwire.store import Database
from toolwire.tools import Tool

BERLIN = ZoneInfo("Europe/Berlin")
# 00:30 in Berlin on 15 May is still 14 May in UTC: relative dates must follow the user's zone.
NOW = dt.datetime(2024, 5, 14, 22, 30, tzinfo=dt.UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated, empty database: a SQLite file, or a fresh schema on the PostgreSQL server."""
    if request.param == "sqlite":
        async with await Database.open(f"sqlite:///{tmp_path / 'books.db'}") as database:
            yield database
        return
    async with (
        postgres_schema() as schema,
        await Database.open(POSTGRES_URL, connect_args=schema_args(schema)) as database,
    ):
        yield database


def context(db: Database, user: str = "alice", tenant: str = "acme", now: dt.datetime = NOW) -> Context:
    return Context(user_id=user, tenant_id=tenant, timezone=BERLIN, now=now, extra={"db": db})


async def call(tool: Tool, ctx: Context, **arguments: Any) -> dict[str, Any]:
    """Run a tool as the Gate does: arguments checked against the schema, then the handler."""
    jsonschema.validate(arguments, tool.parameters)
    result: dict[str, Any] = await tool.handler(arguments, ctx)
    # What the model reads is JSON: the result must survive the round trip unchanged.
    assert json.loads(json.dumps(result)) == result
    return result


async def book(ctx: Context, *entries: tuple[str, float, str, str]) -> list[int]:
    ids = []
    for category, amount, title, date in entries:
        result = await call(create_item, ctx, category=category, amount=amount, title=title, date=date)
        ids.append(result["item"]["id"])
    return ids


# --- the tools as a model sees them ---------------------------------------------------------------


def test_the_tools_follow_the_specification() -> None:
    toolbox = bookkeeping_toolbox()
    assert toolbox.names == ("create_item", "list_items", "get_summary")
    assert (create_item.effect, list_items.effect, get_summary.effect) == ("write", "read", "read")
    assert list(create_item.parameters["properties"]) == ["category", "amount", "title", "date", "remark"]
    assert create_item.parameters["required"] == ["category", "amount", "title"]
    assert create_item.parameters["properties"]["amount"]["type"] == "number"
    assert list(list_items.parameters["properties"]) == [
        "category",
        "startDate",
        "endDate",
        "pageNum",
        "pageSize",
    ]
    assert list_items.parameters["properties"]["pageSize"]["maximum"] == 100
    assert list(get_summary.parameters["properties"]) == ["startDate", "endDate", "month"]
    for tool in toolbox:
        assert "ctx" not in tool.parameters["properties"]
        assert "required" not in tool.parameters or tool is create_item
        assert all(prop.get("description") for prop in tool.parameters["properties"].values())


def test_the_system_prompt_carries_the_applications_date() -> None:
    prompt = system_prompt(NOW.astimezone(BERLIN))
    assert "Today is Wednesday, 2024-05-15 (time zone Europe/Berlin)" in prompt
    assert all(name in prompt for name in ("create_item", "list_items", "get_summary"))


# --- create_item ----------------------------------------------------------------------------------


async def test_create_item_books_on_the_users_today(db: Database) -> None:
    result = await call(create_item, context(db), category="food", amount=12.5, title=" Lunch ")
    assert result == {
        "success": True,
        "item": {
            "id": result["item"]["id"],
            "title": "Lunch",
            "amount": 12.5,
            "category": "food",
            "date": "2024-05-15",
        },
    }
    assert isinstance(result["item"]["id"], int)


@pytest.mark.parametrize(
    ("said", "booked"),
    [
        ("yesterday", "2024-05-14"),
        ("GESTERN", "2024-05-14"),
        ("heute", "2024-05-15"),
        ("2024-02-29", "2024-02-29"),
    ],
)
async def test_create_item_resolves_the_date_the_user_said(db: Database, said: str, booked: str) -> None:
    result = await call(create_item, context(db), category="food", amount=3, title="Coffee", date=said)
    assert result["item"]["date"] == booked


async def test_create_item_keeps_the_remark_and_cents(db: Database) -> None:
    ctx = context(db)
    await call(create_item, ctx, category="office", amount=1999.99, title="Laptop", remark="for Bob")
    listed = await call(list_items, ctx)
    assert listed["items"][0]["amount"] == 1999.99
    assert listed["items"][0]["remark"] == "for Bob"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"date": "15.05.2024"},
            r"date '15\.05\.2024' is not a date: use YYYY-MM-DD \(for example 2024-05-15\)",
        ),
        ({"date": "2024-02-30"}, r"date '2024-02-30' is not a day of the calendar"),
        ({"amount": 12.345}, r"amount 12\.345 has more than two decimals: round it to the cent\."),
        ({"amount": 1e12}, r"amount 1000000000000\.0 is too large"),
        ({"title": "  "}, r"category and title must not be blank"),
    ],
)
async def test_create_item_refuses_what_it_cannot_book(
    db: Database, arguments: dict[str, Any], message: str
) -> None:
    ctx = context(db)
    with pytest.raises(ValueError, match=message):
        await call(create_item, ctx, **{"category": "food", "amount": 10, "title": "x", **arguments})
    assert (await call(list_items, ctx))["total"] == 0


def test_the_schema_refuses_non_positive_amounts() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"category": "a", "amount": 0, "title": "x"}, create_item.parameters)


async def test_a_model_reads_a_bad_date_as_a_tool_error_it_can_correct(db: Database) -> None:
    gate = Gate(bookkeeping_toolbox())
    arguments = json.dumps({"category": "food", "amount": 5, "title": "Tea", "date": "next friday"})
    result = await gate.run(ToolCall(id="call_1", name="create_item", arguments=arguments), context(db))
    assert result.code == "tool_error"
    assert "date 'next friday' is not a date: use YYYY-MM-DD" in result.content


async def test_tools_without_a_database_say_how_to_configure_one() -> None:
    with pytest.raises(ConfigError, match=r"Context.extra\['db'\]"):
        await call(list_items, Context(now=NOW))


async def test_a_locked_database_fails_the_write_with_a_readable_sentence(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    await (await Database.open(f"sqlite:///{path}")).aclose()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        async with Database(f"sqlite:///{path}", busy_timeout=0.1) as db:
            with pytest.raises(
                StorageError, match=r"^The database at .*locked\.db is locked by another process"
            ):
                await call(create_item, context(db), category="food", amount=1, title="x")
    finally:
        other.close()


# --- who sees what --------------------------------------------------------------------------------


async def test_users_see_only_their_own_items(db: Database) -> None:
    alice, bob = context(db, "alice"), context(db, "bob")
    alice_elsewhere = context(db, "alice", tenant="globex")
    await book(alice, ("food", 10, "Alice lunch", "today"))
    await book(bob, ("food", 20, "Bob lunch", "today"), ("travel", 5, "Bob bus", "today"))
    await book(alice_elsewhere, ("food", 40, "Other tenant", "today"))

    assert [i["title"] for i in (await call(list_items, alice))["items"]] == ["Alice lunch"]
    assert (await call(list_items, bob))["total"] == 2
    assert [i["title"] for i in (await call(list_items, alice_elsewhere))["items"]] == ["Other tenant"]
    assert (await call(get_summary, alice))["total"] == 10.0
    assert (await call(get_summary, bob))["total"] == 25.0


# --- list_items -----------------------------------------------------------------------------------


async def test_list_items_pages_newest_first(db: Database) -> None:
    ctx = context(db)
    ids = await book(ctx, *[("food", i + 1, f"day {i + 1}", f"2024-05-{i + 1:02d}") for i in range(7)])

    first = await call(list_items, ctx, pageSize=3)
    last = await call(list_items, ctx, pageNum=3, pageSize=3)
    beyond = await call(list_items, ctx, pageNum=4, pageSize=3)

    assert [i["id"] for i in first["items"]] == ids[::-1][:3]
    assert (first["total"], first["pageNum"], first["pageSize"]) == (7, 1, 3)
    assert [i["title"] for i in last["items"]] == ["day 1"]
    assert beyond["items"] == []
    assert beyond["total"] == 7
    with pytest.raises(jsonschema.ValidationError):
        await call(list_items, ctx, pageSize=101)


async def test_list_items_filters_by_category_and_days(db: Database) -> None:
    ctx = context(db)
    await book(
        ctx,
        ("Food", 1, "before", "2024-05-12"),
        ("food", 2, "yesterday", "yesterday"),
        ("travel", 3, "train", "yesterday"),
        ("food", 4, "today", "today"),
    )
    food = await call(list_items, ctx, category="FOOD")
    window = await call(list_items, ctx, startDate="2024-05-13", endDate="yesterday")
    open_end = await call(list_items, ctx, startDate="today")

    assert [i["title"] for i in food["items"]] == ["today", "yesterday", "before"]
    assert sorted(i["title"] for i in window["items"]) == ["train", "yesterday"]
    assert [i["title"] for i in open_end["items"]] == ["today"]


async def test_list_items_refuses_a_reversed_range(db: Database) -> None:
    with pytest.raises(ValueError, match="startDate 2024-05-15 is after endDate 2024-05-01: swap them"):
        await call(list_items, context(db), startDate="today", endDate="2024-05-01")


# --- get_summary ----------------------------------------------------------------------------------


async def test_get_summary_of_a_month(db: Database) -> None:
    ctx = context(db)
    await book(
        ctx,
        ("food", 0.1, "April A", "2024-04-01"),
        ("food", 0.2, "April B", "2024-04-30"),
        ("travel", 50, "April train", "2024-04-15"),
        ("food", 99, "May", "2024-05-01"),
        ("food", 7, "March", "2024-03-31"),
    )
    april = await call(get_summary, ctx, month="2024-04")
    assert april == {
        "range": {"start": "2024-04-01", "end": "2024-04-30"},
        "total": 50.3,
        "count": 3,
        "byCategory": [
            {"category": "travel", "total": 50.0, "count": 1},
            {"category": "food", "total": 0.3, "count": 2},
        ],
    }
    assert await call(get_summary, ctx, month="last_month") == april
    assert (await call(get_summary, ctx, month="this month"))["total"] == 99.0


async def test_get_summary_of_a_range_and_of_everything(db: Database) -> None:
    ctx = context(db)
    await book(ctx, ("food", 5, "a", "2024-05-10"), ("food", 6, "b", "2024-05-12"), ("food", 7, "c", "today"))

    ranged = await call(get_summary, ctx, startDate="2024-05-10", endDate="2024-05-12")
    everything = await call(get_summary, ctx)
    nothing = await call(get_summary, ctx, month="2023-01")

    assert (ranged["total"], ranged["count"]) == (11.0, 2)
    assert everything["range"] == {"start": None, "end": None}
    assert (everything["total"], everything["count"]) == (18.0, 3)
    assert nothing == {
        "range": {"start": "2023-01-01", "end": "2023-01-31"},
        "total": 0.0,
        "count": 0,
        "byCategory": [],
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"month": "2024-13"}, r"month '2024-13' is not a month: use YYYY-MM \(for example 2024-05\)"),
        ({"month": "May"}, r"month 'May' is not a month"),
        ({"month": "2024-04", "startDate": "2024-04-02"}, "Give either month or startDate/endDate, not both"),
        ({"endDate": "soon"}, r"endDate 'soon' is not a date"),
    ],
)
async def test_get_summary_explains_periods_it_cannot_read(
    db: Database, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await call(get_summary, context(db), **arguments)


# --- the transaction seam -------------------------------------------------------------------------


async def test_insert_item_joins_the_callers_transaction(db: Database) -> None:
    ctx = context(db)
    with pytest.raises(RuntimeError):
        async with db.transaction(write=True) as session:
            item = await insert_item(
                session,
                tenant_id="acme",
                user_id="alice",
                category="food",
                amount=Decimal("1.00"),
                title="rolled back",
                date=dt.date(2024, 5, 1),
            )
            assert item.id is not None
            raise RuntimeError("a later step of the same transaction failed")
    assert (await call(list_items, ctx))["total"] == 0


# --- dates and amounts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, dt.date(2024, 5, 15)),
        ("", dt.date(2024, 5, 15)),
        (" Today ", dt.date(2024, 5, 15)),
        ("tomorrow", dt.date(2024, 5, 16)),
        ("morgen", dt.date(2024, 5, 16)),
        ("2023-12-31", dt.date(2023, 12, 31)),
    ],
)
def test_resolve_date(value: str | None, expected: dt.date) -> None:
    assert resolve_date(value, NOW.astimezone(BERLIN)) == expected


@pytest.mark.parametrize(
    ("month", "today", "expected"),
    [
        ("last_month", dt.date(2024, 1, 10), (dt.date(2023, 12, 1), dt.date(2023, 12, 31))),
        ("this_month", dt.date(2024, 2, 10), (dt.date(2024, 2, 1), dt.date(2024, 2, 29))),
        ("letzten Monat", dt.date(2024, 3, 31), (dt.date(2024, 2, 1), dt.date(2024, 2, 29))),
        ("2023-02", dt.date(2024, 5, 1), (dt.date(2023, 2, 1), dt.date(2023, 2, 28))),
    ],
)
def test_resolve_range_of_a_month(month: str, today: dt.date, expected: tuple[dt.date, dt.date]) -> None:
    assert resolve_range(None, None, month, today) == expected


def test_resolve_range_treats_empty_strings_as_missing() -> None:
    today = dt.date(2024, 5, 15)
    assert resolve_range("", " ", "", today) == (None, None)
    assert resolve_range(None, "today", "", today) == (None, today)


@pytest.mark.parametrize(
    ("value", "expected"), [(12.5, "12.50"), (3, "3.00"), ("0.01", "0.01"), (0.1, "0.10")]
)
def test_parse_amount(value: float | str, expected: str) -> None:
    assert parse_amount(value) == Decimal(expected)


@pytest.mark.parametrize("value", [0, -5, "abc", float("nan"), float("inf")])
def test_parse_amount_refuses(value: float | str) -> None:
    with pytest.raises(ValueError, match="amount"):
        parse_amount(value)
