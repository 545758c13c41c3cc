"""Dates as users say them, resolved by the application in the user's time zone.

A model has no reliable idea of today's date, so tools accept "today", "yesterday", "this month"
and the like and resolve them here against the run's clock (`Context.current_time()`). Every
`ValueError` message names the argument and the accepted forms, so a model can correct its call.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re

__all__ = ["resolve_date", "resolve_range"]

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_DAY_OFFSETS = {
    "today": 0,
    "heute": 0,
    "yesterday": -1,
    "gestern": -1,
    "tomorrow": 1,
    "morgen": 1,
}
_THIS_MONTH = frozenset({"this_month", "this month", "current month", "dieser monat", "diesen monat"})
_LAST_MONTH = frozenset(
    {"last_month", "last month", "previous month", "letzter monat", "letzten monat", "vormonat"}
)


def _today(now: dt.datetime | dt.date) -> dt.date:
    return now.date() if isinstance(now, dt.datetime) else now


def resolve_date(value: str | None, now: dt.datetime | dt.date, *, name: str = "date") -> dt.date:
    """The calendar day `value` means, relative to `now`.

    Args:
        value: `YYYY-MM-DD`, `today`, `yesterday` or `tomorrow` (also `heute`, `gestern`, `morgen`),
            in any letter case; `None` or an empty string means today.
        now: The current moment in the user's time zone (`Context.current_time()`), or today's date.
        name: The argument's name, used in the error message.

    Raises:
        ValueError: `value` is none of the accepted forms, or not a real calendar day.
    """
    today = _today(now)
    text = (value or "").strip().lower()
    if not text:
        return today
    if text in _DAY_OFFSETS:
        return today + dt.timedelta(days=_DAY_OFFSETS[text])
    if not _ISO_DATE.match(text):
        raise ValueError(
            f"{name} {value!r} is not a date: use YYYY-MM-DD (for example {today.isoformat()}), "
            "'today', 'yesterday' or 'tomorrow'."
        )
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{name} {value!r} is not a day of the calendar: check the month (01-12) and the day "
            "of the month."
        ) from None


def _blank_to_none(value: str | None) -> str | None:
    # Models often send "" for an argument they mean to leave out.
    return value.strip() or None if value is not None else None


def _month_bounds(year: int, month: int) -> tuple[dt.date, dt.date]:
    last_day = calendar.monthrange(year, month)[1]
    return dt.date(year, month, 1), dt.date(year, month, last_day)


def _resolve_month(value: str, today: dt.date) -> tuple[dt.date, dt.date]:
    text = value.strip().lower()
    if text in _THIS_MONTH:
        return _month_bounds(today.year, today.month)
    if text in _LAST_MONTH:
        previous = today.replace(day=1) - dt.timedelta(days=1)
        return _month_bounds(previous.year, previous.month)
    match = _ISO_MONTH.match(text)
    if match is None or not 1 <= int(match.group(2)) <= 12:
        raise ValueError(
            f"month {value!r} is not a month: use YYYY-MM (for example {today:%Y-%m}), "
            "'this_month' or 'last_month'."
        )
    return _month_bounds(int(match.group(1)), int(match.group(2)))


def resolve_range(
    start: str | None,
    end: str | None,
    month: str | None,
    now: dt.datetime | dt.date,
) -> tuple[dt.date | None, dt.date | None]:
    """The first and last day (both included) of a period, relative to `now`.

    Give either `month` or `start`/`end`. A missing bound leaves that side open (`None`): no
    arguments at all means every date.

    Args:
        start: The first day, in any form `resolve_date` accepts.
        end: The last day, in any form `resolve_date` accepts.
        month: `YYYY-MM`, `this_month` or `last_month` (spaces instead of `_` work too).
        now: The current moment in the user's time zone, or today's date.

    Raises:
        ValueError: a value cannot be read, `month` comes with `start` or `end`, or `start` is
            after `end`.
    """
    start, end, month = _blank_to_none(start), _blank_to_none(end), _blank_to_none(month)
    if month is not None:
        if start is not None or end is not None:
            raise ValueError(
                "Give either month or startDate/endDate, not both: drop month to use the date range."
            )
        return _resolve_month(month, _today(now))
    first = resolve_date(start, now, name="startDate") if start is not None else None
    last = resolve_date(end, now, name="endDate") if end is not None else None
    if first is not None and last is not None and first > last:
        raise ValueError(
            f"startDate {first.isoformat()} is after endDate {last.isoformat()}: swap them or correct one."
        )
    return first, last
