"""The calendar the embedded model copies dates from: its days, its months, and when it is told."""

from __future__ import annotations

import datetime as dt
from importlib.util import find_spec
from typing import Any

import pytest

from toolwire.messages import Message, SystemMessage, ToolSpec, UserMessage
from toolwire.models.base import RequestOptions
from toolwire.models.local_calendar import calendar_note, takes_dates


def tool(**properties: Any) -> ToolSpec:
    return ToolSpec(name="t", description="A tool.", parameters={"type": "object", "properties": properties})


def lines(note: str) -> dict[str, str]:
    return dict(line[2:].split(": ", 1) for line in note.splitlines() if line.startswith("- "))


def test_the_days_back_are_named_as_users_say_them() -> None:
    days = lines(calendar_note(dt.date(2025, 3, 14)))  # a Friday

    assert days["today, Friday"] == "2025-03-14"
    assert days["yesterday, last Thursday"] == "2025-03-13"
    assert days["2 days ago, last Wednesday"] == "2025-03-12"
    assert days["4 days ago, last Monday"] == "2025-03-10"
    assert days["7 days ago, last Friday"] == "2025-03-07"
    assert "8 days ago" not in " ".join(days)


def test_this_years_months_carry_their_first_and_last_days() -> None:
    days = lines(calendar_note(dt.date(2025, 3, 14)))

    assert days["this month, March 2025"] == "2025-03-01 to 2025-03-31 (month 2025-03)"
    assert days["last month, February 2025"] == "2025-02-01 to 2025-02-28 (month 2025-02)"
    assert days["January 2025"] == "2025-01-01 to 2025-01-31 (month 2025-01)"
    assert days["this year so far"] == "2025-01-01 to 2025-03-14"
    assert len([key for key in days if "20" in key]) == 3, "no month of another year"


def test_a_leap_february_and_a_year_boundary() -> None:
    leap = lines(calendar_note(dt.date(2024, 3, 1)))
    assert leap["last month, February 2024"] == "2024-02-01 to 2024-02-29 (month 2024-02)"

    early = lines(calendar_note(dt.date(2025, 1, 2)))
    assert early["last month, December 2024"] == "2024-12-01 to 2024-12-31 (month 2024-12)"
    assert early["2 days ago, last Tuesday"] == "2024-12-31"
    assert [key for key in early if "20" in key] == ["this month, January 2025", "last month, December 2024"]


@pytest.mark.parametrize(
    "properties",
    [
        {"date": {"type": "string"}},
        {"startDate": {"type": "string", "description": "Start"}},
        {"when": {"type": "string", "description": "Day as YYYY-MM-DD"}},
        {"period": {"type": "string", "description": "Month YYYY-MM"}},
        {"due": {"type": "string", "format": "date"}},
        {"at": {"type": "string", "format": "date-time"}},
    ],
)
def test_a_tool_with_a_date_parameter_takes_dates(properties: dict[str, Any]) -> None:
    assert takes_dates([tool(title={"type": "string"}), tool(**properties)])


@pytest.mark.parametrize(
    "properties",
    [
        {},
        {"title": {"type": "string", "description": "Short title"}},
        {"updated": {"type": "integer", "description": "Unix date"}},  # a number: nothing to copy
        {"status": {"type": "string", "enum": ["open", "closed"]}},
    ],
)
def test_a_tool_without_one_does_not(properties: dict[str, Any]) -> None:
    assert not takes_dates([tool(**properties)])


class Rendering:
    """A loaded model that records the system prompt it is given and always answers in text."""

    n_ctx = 4096
    judge_n_ctx = 1024

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.systems: list[str] = []

    def render(self, messages: list[dict[str, Any]], tools: object) -> str:
        self.systems.append(messages[0]["content"] if messages[0]["role"] == "system" else "")
        return "prompt"

    def tokenize(self, text: str) -> list[int]:
        return [1, 2, 3]

    def call_probability(self, tokens: list[int]) -> float:
        return 0.0

    def stream_text(self, tokens: list[int], *, generated: list[int], **_: object) -> Any:
        generated.append(7)
        yield "Hello.", 1, "stop"


@pytest.mark.skipif(
    find_spec("llama_cpp") is None,
    reason="the embedded model needs the local extra: pip install -e '.[local]' (make test installs it)",
)
@pytest.mark.parametrize("calendar", [True, False])
async def test_the_model_is_told_the_calendar_of_the_requests_day_only_for_tools_that_take_dates(
    calendar: bool,
) -> None:
    from toolwire.models.local import LocalModel

    engine = Rendering()
    model = LocalModel("unused.gguf", calendar=calendar)
    model._engine = engine  # type: ignore[assignment]
    transcript: list[Message] = [SystemMessage(content="You keep the books."), UserMessage(content="Hi")]

    options = RequestOptions(now=dt.datetime(2025, 3, 14, 23, 30))
    await model.request(transcript, [tool(date={"type": "string"})], options)
    await model.request(transcript, [tool(title={"type": "string"})], options)

    dated, undated = engine.systems
    assert dated.startswith("You keep the books.")
    assert ("- 4 days ago, last Monday: 2025-03-10" in dated) is calendar
    assert "Calendar" not in undated
