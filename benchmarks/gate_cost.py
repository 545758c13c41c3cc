"""Gate cost per call for a tool with a 5-property schema, measured with `timeit` repetitions.

What is timed, per call (arguments as the model sends them, a JSON string):
- `Gate.check`: allowlist, size, JSON parse, full schema validation (formats included);
- the policy (`ScopePolicy.authorize`, one required scope held by the context);
- both together: the cost the target is about;
- a call with two schema errors, refused with every error listed;
- `Gate.run` end to end: the above, plus executing a trivial async tool under its deadline and
  redacting the result (inside a running event loop).
References measured in the same run: `json.loads` alone; `json.loads` plus a precompiled
`jsonschema` validator with the same schema and format checks (the hand-written minimum for the
same checks); pydantic's `model_validate_json` on the tool's arguments model. Figures: microseconds
per call, the median and the best of the repetitions; ratios to the hand-written minimum.

Target: check plus policy under 50 us per call. A missed target is marked, not an error.
Run: `.venv/bin/python benchmarks/gate_cost.py [--repeat N]`
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import timeit
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from pydantic import Field

from toolwire.context import Context
from toolwire.gate import Gate, ScopePolicy
from toolwire.gate.validate import FORMAT_CHECKER
from toolwire.messages import ToolCall, ToolResult
from toolwire.tools import Toolbox, tool

TARGET_US = 50.0


@tool(requires=["bookkeeping:write"])
async def create_item(
    title: Annotated[str, Field(max_length=200)],
    amount: Annotated[float, Field(gt=0)],
    category: Literal["food", "transport", "housing", "income", "leisure", "other"],
    day: dt.date,
    remark: str | None = None,
) -> str:
    """Book an item.

    Args:
        title: What it was.
        amount: How much, in euros.
        category: Where it belongs.
        day: When it happened.
        remark: Anything else worth noting.
    """
    return '{"id": 1}'


ARGUMENTS = json.dumps(
    {"title": "Lunch with the team", "amount": 12.5, "category": "food", "day": "2026-11-03", "remark": "x"}
)
INVALID = json.dumps({"title": "Lunch", "amount": -3, "category": "snacks", "day": "2026-11-03"})


def drive(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends, without an event loop (as the policy's does here)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("The coroutine suspended; it needs an event loop.")


def per_call(function: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, best) microseconds per call over `repeat` timeit repetitions."""
    timer = timeit.Timer(function)
    number, _ = timer.autorange()
    number = max(number, 1000)
    samples = [t / number * 1e6 for t in timer.repeat(repeat, number)]
    return statistics.median(samples), min(samples)


def per_call_async(
    make: Callable[[], Coroutine[Any, Any, Any]], repeat: int, number: int
) -> tuple[float, float]:
    """(median, best) microseconds per awaited call, `number` calls per repetition in one loop."""

    async def many() -> float:
        started = timeit.default_timer()
        for _ in range(number):
            await make()
        return timeit.default_timer() - started

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(many())  # warm-up
        samples = [loop.run_until_complete(many()) / number * 1e6 for _ in range(repeat)]
    finally:
        loop.close()
    return statistics.median(samples), min(samples)


def measure(repeat: int) -> list[tuple[str, tuple[float, float]]]:
    gate = Gate(Toolbox([create_item]))
    policy = ScopePolicy()
    context = Context(user_id="u1", scopes=frozenset({"bookkeeping:write"}))
    call = ToolCall(id="c1", name="create_item", arguments=ARGUMENTS)
    invalid = ToolCall(id="c2", name="create_item", arguments=INVALID)
    checked = gate.check(call)
    if isinstance(checked, ToolResult) or drive(policy.authorize(create_item, checked.arguments, context)):
        raise RuntimeError("The benchmark call does not pass the Gate; fix its arguments.")
    refused = gate.check(invalid)
    if not isinstance(refused, ToolResult) or refused.code != "invalid_arguments":
        raise RuntimeError("The invalid benchmark call was not refused.")

    validator = Draft202012Validator(create_item.parameters, format_checker=FORMAT_CHECKER)
    model = create_item.metadata["arguments_model"]

    def check_and_policy() -> object:
        passed = gate.check(call)
        assert not isinstance(passed, ToolResult)
        return drive(policy.authorize(passed.tool, passed.arguments, context))

    def hand_written() -> bool:
        return bool(validator.is_valid(json.loads(ARGUMENTS)))

    return [
        ("reference: json.loads", per_call(lambda: json.loads(ARGUMENTS), repeat)),
        ("reference: json.loads + jsonschema (same schema and formats)", per_call(hand_written, repeat)),
        (
            "reference: pydantic model_validate_json",
            per_call(lambda: model.model_validate_json(ARGUMENTS), repeat),
        ),
        ("Gate.check (allowlist, size, parse, schema)", per_call(lambda: gate.check(call), repeat)),
        (
            "policy (ScopePolicy, one scope)",
            per_call(lambda: drive(policy.authorize(create_item, checked.arguments, context)), repeat),
        ),
        ("**check + policy**", per_call(check_and_policy, repeat)),
        ("Gate.check of a call with 2 schema errors", per_call(lambda: gate.check(invalid), repeat)),
        (
            "Gate.run end to end (check, policy, run, redact)",
            per_call_async(lambda: gate.run(call, context), repeat, 2000),
        ),
    ]


def report(rows: list[tuple[str, tuple[float, float]]]) -> str:
    base = dict(rows)["reference: json.loads + jsonschema (same schema and formats)"][0]
    lines = [
        "| what | us/call (median) | us/call (best) | vs json.loads + jsonschema | target |",
        "|---|--:|--:|--:|---|",
    ]
    for name, (median, best) in rows:
        target = ""
        if name == "**check + policy**":
            target = f"< {TARGET_US:g} us: " + ("met" if median < TARGET_US else "**MISSED**")
        lines.append(f"| {name} | {median:.1f} | {best:.1f} | {median / base:.2f}x | {target} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timeit repetitions")
    args = parser.parse_args()
    properties = ", ".join(create_item.parameters["properties"])
    print(f"Tool `create_item` ({properties}); {args.repeat} timeit repetitions per row.\n")
    print(report(measure(args.repeat)))
