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
same checks); pydantic's `model_validate_json` on the tool's arguments model; and, when the
`jsonschema-rs` peer is installed, its compiled validator with the same schema and formats (what a
compiled validator would cost). Figures: microseconds per call, the best and the median of the
repetitions (the best is the figure least disturbed by other processes, as `timeit` advises);
ratios of the best to the hand-written minimum.

Target: check plus policy under 50 us per call (best of the repetitions). A missed target is
marked, not an error.
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
CHECK_AND_POLICY = "**check + policy**"


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


Batch = Callable[[int], float]
"""Runs a measured call `number` times; returns the seconds taken."""


def sync_batch(function: Callable[[], object]) -> Batch:
    timer = timeit.Timer(function)
    return timer.timeit


def async_batch(make: Callable[[], Coroutine[Any, Any, Any]], loop: asyncio.AbstractEventLoop) -> Batch:
    """Awaits `make()` `number` times in a row inside one run of `loop`."""

    async def many(number: int) -> float:
        started = timeit.default_timer()
        for _ in range(number):
            await make()
        return timeit.default_timer() - started

    return lambda number: loop.run_until_complete(many(number))


def per_call(batches: dict[str, Batch], repeat: int) -> dict[str, tuple[float, float]]:
    """(median, best) microseconds per call of each batch, repetitions interleaved across batches.

    Each batch gets the number of calls that takes about 0.1 s (found the way `timeit` finds it),
    then every repetition runs every batch once, so a disturbance hits all rows alike.
    """
    numbers = {}
    for name, batch in batches.items():
        number = 1
        while batch(number) < 0.1:
            number *= 2
        numbers[name] = number
    samples: dict[str, list[float]] = {name: [] for name in batches}
    for _ in range(repeat):
        for name, batch in batches.items():
            samples[name].append(batch(numbers[name]) / numbers[name] * 1e6)
    return {name: (statistics.median(values), min(values)) for name, values in samples.items()}


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

    loop = asyncio.new_event_loop()
    batches = {
        "reference: json.loads": sync_batch(lambda: json.loads(ARGUMENTS)),
        "reference: json.loads + jsonschema (same schema and formats)": sync_batch(hand_written),
        "reference: pydantic model_validate_json": sync_batch(lambda: model.model_validate_json(ARGUMENTS)),
    }
    compiled = compiled_reference(create_item.parameters)
    if compiled is not None:
        batches["reference: json.loads + jsonschema-rs (same schema and formats)"] = sync_batch(compiled)
    batches |= {
        "Gate.check (allowlist, size, parse, schema)": sync_batch(lambda: gate.check(call)),
        "ScopePolicy.authorize (one scope)": sync_batch(
            lambda: drive(policy.authorize(create_item, checked.arguments, context))
        ),
        CHECK_AND_POLICY: sync_batch(check_and_policy),
        "Gate.check of a call with 2 schema errors": sync_batch(lambda: gate.check(invalid)),
        "Gate.run end to end (check, policy, run, redact)": async_batch(
            lambda: gate.run(call, context), loop
        ),
    }
    try:
        figures = per_call(batches, repeat)
    finally:
        loop.close()
    rows = list(figures.items())
    if compiled is None:
        rows.insert(3, ("reference: json.loads + jsonschema-rs", (0.0, 0.0)))
    return rows


def compiled_reference(schema: dict[str, Any]) -> Callable[[], bool] | None:
    """The same check with jsonschema-rs's compiled validator, when that peer is installed."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    validator = jsonschema_rs.validator_for(schema, validate_formats=True)
    if validator.is_valid(json.loads(INVALID)) or not validator.is_valid(json.loads(ARGUMENTS)):
        raise RuntimeError("jsonschema-rs disagrees with the Gate about the benchmark calls.")
    return lambda: bool(validator.is_valid(json.loads(ARGUMENTS)))


def report(rows: list[tuple[str, tuple[float, float]]]) -> str:
    base = dict(rows)["reference: json.loads + jsonschema (same schema and formats)"][1]
    lines = [
        "| what | us/call (best) | us/call (median) | best vs json.loads + jsonschema | target |",
        "|---|--:|--:|--:|---|",
    ]
    for name, (median, best) in rows:
        if not best:
            lines.append(f"| {name} | n/a: not installed ||||")
            continue
        target = ""
        if name == CHECK_AND_POLICY:
            target = f"< {TARGET_US:g} us: " + ("met" if best < TARGET_US else "**MISSED**")
        lines.append(f"| {name} | {best:.1f} | {median:.1f} | {best / base:.2f}x | {target} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timeit repetitions")
    args = parser.parse_args()
    properties = ", ".join(create_item.parameters["properties"])
    print(f"Tool `create_item` ({properties}); {args.repeat} interleaved timeit repetitions per row.\n")
    print(report(measure(args.repeat)))
