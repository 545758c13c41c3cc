"""A calendar of the days around today, told to the embedded model when its tools take dates.

A 1.5B model reads "Today is 2025-03-14" and still books "last Monday" on 2025-03-11 or sums "last
month" as December: it cannot count back through a calendar. It can copy. So when an offered tool
has a date parameter, the system prompt gets the last week's days, this month, last month and this
year's other months, written out from the application's clock, and the model copies the day the
user means instead of computing it. The note changes once a day, so the prompt's cached prefix
survives between requests.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from toolwire.messages import ToolSpec

__all__ = ["calendar_note", "optional_dates", "takes_dates"]

_DATE_WORDS = re.compile(r"YYYY-MM|\bdate\b|\bday\b|\bmonth\b", re.IGNORECASE)
_DAYS_BACK = 7
# In English whatever the process's locale (strftime's %A and %B follow LC_TIME): the model reads
# the user's "last Monday" against these.
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _is_date(name: str, schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") not in ("string", None):
        return False
    if schema.get("format") in ("date", "date-time"):
        return True
    text = f"{name} {schema.get('description', '')}"
    return bool(_DATE_WORDS.search(re.sub(r"([a-z])([A-Z])", r"\1 \2", text)))


def takes_dates(tools: Sequence[ToolSpec]) -> bool:
    """Whether any of `tools` has a top-level string parameter for a date or a month."""
    return any(
        _is_date(name, schema)
        for tool in tools
        for name, schema in (tool.parameters.get("properties") or {}).items()
    )


def optional_dates(tool: ToolSpec) -> list[str]:
    """The names of `tool`'s optional top-level parameters for a date or a month."""
    required = set(tool.parameters.get("required") or ())
    return [
        name
        for name, schema in (tool.parameters.get("properties") or {}).items()
        if name not in required and _is_date(name, schema)
    ]


def _month(first: dt.date) -> str:
    last = first.replace(day=calendar.monthrange(first.year, first.month)[1])
    return f"{_MONTHS[first.month - 1]} {first.year}: {first} to {last} (month {first:%Y-%m})"


def calendar_note(today: dt.date) -> str:
    """The calendar lines for `today`, to append to the system prompt.

    Each line names a day the way users say it, right before its date, so that "last Monday"
    finds "last Monday:" and is copied, not counted.

    Args:
        today: The current day in the user's time zone, from the application's clock.
    """
    lines = [f"- today, {_WEEKDAYS[today.weekday()]}: {today.isoformat()}"]
    for back in range(1, _DAYS_BACK + 1):
        day = today - dt.timedelta(days=back)
        name = "yesterday" if back == 1 else f"{back} days ago"
        lines.append(f"- {name}, last {_WEEKDAYS[day.weekday()]}: {day.isoformat()}")
    this_month = today.replace(day=1)
    last_month = (this_month - dt.timedelta(days=1)).replace(day=1)
    lines += [f"- this month, {_month(this_month)}", f"- last month, {_month(last_month)}"]
    # This year's months before last month (none in January and February).
    lines += [f"- {_month(dt.date(today.year, m, 1))}" for m in range(today.month - 2, 0, -1)]
    lines.append(f"- this year so far: {today.year}-01-01 to {today.isoformat()}")
    return (
        "Calendar, from the application's clock (copy dates from here, do not compute them):\n"
        + "\n".join(lines)
    )
