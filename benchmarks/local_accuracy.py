"""Tool-calling accuracy of the embedded model, with and without constrained decoding.

Each case in cases/tool_calls.jsonl is one user message and the calls it should produce (an empty
list: no call). The model sees the bookkeeping tools of seed 000 and a tickets API (cases/tools.json),
with a system prompt that fixes today's date. A case is right when the calls match as a multiset: same tool,
every expected argument equal (strings case-insensitively; `{"contains": s}` for free text;
`args_any` lists acceptable alternatives), and no extra argument except a tool's documented default
or a free-text field. Any call to an unknown tool or with arguments that fail the schema is counted
as schema-invalid. An answer in text that writes out the template's tool markup (`<tools>`,
`<function>`...) is counted apart as a markup answer: no call, but no answer either. So is an
answer that names one of the tools without calling it ("you can call the `create_item`
function"), which is advice a user cannot follow.

With -v each case also shows the model's decisions from its debug log (the probability of a call,
each second look's share of yes, whether the message names a time); --json keeps them per case.

Run: .venv/bin/python benchmarks/local_accuracy.py [--mode constrained|free|both] [--model X.gguf]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema

from toolwire.messages import SystemMessage, ToolCall, ToolSpec, UserMessage
from toolwire.models.base import RequestOptions
from toolwire.models.local import LocalModel
from toolwire.models.local_prompt import named_tools

TODAY = "2025-03-14"
OPTIONS = RequestOptions(now=dt.datetime.fromisoformat(TODAY))
"""The application's clock, as the Runner would set it: the day the system prompt states."""
SYSTEM = f"You are the assistant of a small company's bookkeeping and support desk. Today is {TODAY}."
CASES = Path(__file__).parent / "cases" / "tool_calls.jsonl"
TOOLS_FILE = Path(__file__).parent / "cases" / "tools.json"

TOOLS = [ToolSpec(**t) for t in json.loads(TOOLS_FILE.read_text())]
MARKUP = re.compile(r"</?(tools?|tool_call|tool_response|function|name|arguments)>")
"""An answer in text that writes out the chat template's tool markup instead of answering."""
SCHEMAS = {t.name: t.parameters for t in TOOLS}
HARMLESS_EXTRA = {"date": TODAY, "pageNum": 1, "pageSize": 15, "remark": None, "description": None}
"""Arguments a call may add unasked: a documented default (that value only) or free text (any)."""


def value_matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict) and "contains" in expected:
        return isinstance(actual, str) and expected["contains"].casefold() in actual.casefold()
    if isinstance(expected, bool) or not isinstance(expected, int | float):
        return isinstance(actual, str) and actual.strip().casefold() == str(expected).strip().casefold()
    return isinstance(actual, int | float) and not isinstance(actual, bool) and abs(actual - expected) < 1e-6


def args_match(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    for key, value in expected.items():
        if key not in actual or not value_matches(value, actual[key]):
            return False
    for key, value in actual.items():
        if key in expected:
            continue
        if key not in HARMLESS_EXTRA:
            return False
        default = HARMLESS_EXTRA[key]
        if default is not None and not value_matches(default, value):
            return False
    return True


def call_matches(expected: dict[str, Any], name: str, args: dict[str, Any]) -> bool:
    if expected["name"] != name:
        return False
    options = expected.get("args_any") or [expected.get("args", {})]
    return any(args_match(option, args) for option in options)


def schema_valid(call: ToolCall) -> tuple[bool, dict[str, Any] | None]:
    if call.name not in SCHEMAS:
        return False, None
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return False, None
    if not isinstance(args, dict):
        return False, None
    errors = list(jsonschema.Draft202012Validator(SCHEMAS[call.name]).iter_errors(args))
    return not errors, args


def score(case: dict[str, Any], calls: tuple[ToolCall, ...]) -> tuple[bool, int]:
    """Whether the calls are right, and how many were schema-invalid."""
    parsed = [schema_valid(c) for c in calls]
    invalid = sum(not ok for ok, _ in parsed)
    expected = list(case["expect"])
    if len(expected) != len(calls) or invalid:
        return False, invalid
    remaining = list(range(len(expected)))
    for call, (_, args) in zip(calls, parsed, strict=True):
        assert args is not None
        hit = next((i for i in remaining if call_matches(expected[i], call.name, args)), None)
        if hit is None:
            return False, invalid
        remaining.remove(hit)
    return True, invalid


def kind(case: dict[str, Any]) -> str:
    return {0: "none", 1: "single"}.get(len(case["expect"]), "parallel")


async def run_mode(model: LocalModel, cases: list[dict[str, Any]], verbose: bool) -> dict[str, Any]:
    totals: Counter[str] = Counter()
    right: Counter[str] = Counter()
    invalid_calls = 0
    markup = 0
    tool_talk = 0
    seconds: list[float] = []
    failures = []
    per_case = []
    for case in cases:
        transcript = [SystemMessage(content=SYSTEM), UserMessage(content=case["prompt"])]
        started = time.perf_counter()
        try:
            turn = await model.request(transcript, TOOLS, OPTIONS)
            calls = turn.message.tool_calls
        except Exception as exc:  # a failed turn is a wrong answer, reported
            calls, turn = (), None
            print(f"  {case['id']}: {type(exc).__name__}: {exc}", file=sys.stderr)
        seconds.append(time.perf_counter() - started)
        decisions, DECISIONS.lines = DECISIONS.lines, []
        ok, invalid = score(case, calls)
        invalid_calls += invalid
        totals[kind(case)] += 1
        right[kind(case)] += ok
        answer = (turn.message.text or "") if turn else ""
        if not calls and MARKUP.search(answer):
            markup += 1
        elif not calls and named_tools(answer, TOOLS):
            tool_talk += 1
        text = repr(answer[:60]) if turn else "-"
        shown = [f"{c.name}({c.arguments})" for c in calls] or [text]
        record = {"id": case["id"], "kind": kind(case), "ok": ok, "got": shown, "decisions": decisions}
        per_case.append(record)
        if not ok:
            failures.append({"id": case["id"], "got": shown, "decisions": decisions})
        if verbose:
            print(
                f"  {'ok ' if ok else 'BAD'} {case['id']:28s} {seconds[-1]:5.1f}s {'; '.join(shown)[:150]}",
                flush=True,
            )
            print(f"      {'; '.join(decisions)}", flush=True)
    return {
        "single_right": f"{right['single']}/{totals['single']}",
        "single_pct": round(100 * right["single"] / max(totals["single"], 1), 1),
        "abstain_right": f"{right['none']}/{totals['none']}",
        "abstain_pct": round(100 * right["none"] / max(totals["none"], 1), 1),
        "parallel_right": f"{right['parallel']}/{totals['parallel']}",
        "schema_invalid_calls": invalid_calls,
        "markup_answers": markup,
        "function_talk_answers": tool_talk,
        "mean_seconds": round(sum(seconds) / len(seconds), 2),
        "failures": failures,
        "per_case": per_case,
    }


class _Decisions(logging.Handler):
    """Collects the embedded model's decision log (call probability, second looks) per case."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


DECISIONS = _Decisions()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF file (default: TOOLWIRE_LOCAL_MODEL or the packaged model)")
    parser.add_argument("--mode", choices=["constrained", "free", "both"], default="both")
    parser.add_argument("--threshold", type=float, default=None, help="call_threshold of LocalModel")
    parser.add_argument("--only", default="", help="comma-separated case ids")
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-calendar", action="store_true", help="no calendar in the system prompt")
    parser.add_argument("--no-date-check", action="store_true", help="no check of date arguments")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("-v", "--verbose", action="store_true")
    ns = parser.parse_args()
    local_log = logging.getLogger("toolwire.models.local")
    local_log.setLevel(logging.DEBUG)
    local_log.addHandler(DECISIONS)
    cases = [json.loads(line) for line in ns.cases.read_text().splitlines() if line.strip()]
    if ns.only:
        wanted = set(ns.only.split(","))
        cases = [c for c in cases if c["id"] in wanted]
    results: dict[str, Any] = {"cases": len(cases)}
    for mode in ["constrained", "free"] if ns.mode == "both" else [ns.mode]:
        model = LocalModel(
            ns.model,
            n_threads=ns.threads,
            constrained=mode == "constrained",
            calendar=not ns.no_calendar,
        )
        if ns.no_date_check:
            model.date_threshold = None
        if ns.threshold is not None:
            model.call_threshold = ns.threshold
        await asyncio.to_thread(model.engine)
        print(f"{mode}: {model.name}, {len(cases)} cases")
        results[mode] = await run_mode(model, cases, ns.verbose)
        results["model"] = model.name
        summary = {k: v for k, v in results[mode].items() if k not in ("failures", "per_case")}
        print(f"{mode}: {json.dumps(summary)}")
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
