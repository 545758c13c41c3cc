"""Fan-out: one turn proposing 8 calls of a tool that sleeps 100 ms, through the real Runner and Gate.

The model is toolwire's in-process `FunctionModel` (no HTTP, no latency): its first turn proposes
the 8 calls, its second answers in text, so the time measured is the Runner's scheduling plus the
Gate's checks around the tool's sleeps. Per case: the whole run's wall time and the tool phase
(first `CallProposed` to last `CallFinished`), medians over repetitions, and the ratio to the
reference measured in the same run: `asyncio.gather` of 8 sleeps for reads (the floor for full
concurrency), 8 sleeps in a row for writes (writes run one at a time by design).

Targets: 8 reads with the default limit (8 at once) take at most 100 ms + 15 ms for the whole run;
8 writes take at least 8 x 100 ms (serial). A missed target is marked, not an error.
Run: `.venv/bin/python benchmarks/fanout.py [--repeat N]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolwire import Runner, tool
from toolwire.messages import AssistantMessage, ToolCall
from toolwire.runner import CallFinished, CallProposed, RunComplete
from toolwire.testing.fakes import FunctionModel, ModelRequest

CALLS = 8
SLEEP = 0.1
READ_TARGET_MS = SLEEP * 1000 + 15


@tool
async def lookup(n: int) -> str:
    """Look something up slowly.

    Args:
        n: Which thing.
    """
    await asyncio.sleep(SLEEP)
    return json.dumps({"n": n})


@tool(effect="write")
async def record(n: int) -> str:
    """Record something slowly.

    Args:
        n: Which thing.
    """
    await asyncio.sleep(SLEEP)
    return json.dumps({"n": n})


def fan_out_model(name: str) -> FunctionModel:
    """A model whose first turn proposes CALLS calls of `name` and whose second turn answers."""

    def turn(request: ModelRequest) -> AssistantMessage | str:
        if any(getattr(m, "call_id", None) for m in request.transcript):
            return "done"
        calls = tuple(ToolCall(id=f"c{i}", name=name, arguments=json.dumps({"n": i})) for i in range(CALLS))
        return AssistantMessage(tool_calls=calls)

    return FunctionModel(turn)


async def toolwire_case(name: str, limit: int) -> tuple[float, float]:
    """One run: (whole run, tool phase) in seconds."""
    runner = Runner(fan_out_model(name), [lookup, record], max_concurrency=limit)
    started = time.perf_counter()
    proposed = finished = 0.0
    results = 0
    async for event in runner.stream("go"):
        if isinstance(event, CallProposed) and not proposed:
            proposed = time.perf_counter()
        elif isinstance(event, CallFinished):
            finished = time.perf_counter()
            results += event.result.code is None
        elif isinstance(event, RunComplete) and event.result.answer != "done":
            raise RuntimeError(f"The run ended with {event.result.answer!r}.")
    ended = time.perf_counter()
    if results != CALLS:
        raise RuntimeError(f"{results} of {CALLS} calls succeeded.")
    return ended - started, finished - proposed


async def gathered() -> tuple[float, float]:
    started = time.perf_counter()
    await asyncio.gather(*(asyncio.sleep(SLEEP) for _ in range(CALLS)))
    wall = time.perf_counter() - started
    return wall, wall


async def in_a_row() -> tuple[float, float]:
    started = time.perf_counter()
    for _ in range(CALLS):
        await asyncio.sleep(SLEEP)
    wall = time.perf_counter() - started
    return wall, wall


async def median(case: Callable[[], Awaitable[tuple[float, float]]], repeat: int) -> tuple[float, float]:
    await case()  # warm-up
    samples = [await case() for _ in range(repeat)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


async def main(repeat: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    reference_reads = await median(gathered, repeat)
    reference_writes = await median(in_a_row, max(3, repeat // 3))
    cases: list[tuple[str, Callable[[], Awaitable[tuple[float, float]]], tuple[float, float], int]] = [
        ("8 reads, default limit (8)", lambda: toolwire_case("lookup", 8), reference_reads, repeat),
        ("8 reads, limit 4", lambda: toolwire_case("lookup", 4), reference_reads, repeat),
        ("8 writes (serial)", lambda: toolwire_case("record", 8), reference_writes, max(3, repeat // 3)),
    ]
    rows.append({"case": f"reference: gather of {CALLS} sleeps", "figures": reference_reads})
    rows.append({"case": f"reference: {CALLS} sleeps in a row", "figures": reference_writes})
    for label, case, reference, times in cases:
        run, phase = await median(case, times)
        if "default" in label:
            target = f"run <= {READ_TARGET_MS:g} ms: " + (
                "met" if run * 1000 <= READ_TARGET_MS else "**MISSED**"
            )
        elif "writes" in label:
            floor = CALLS * SLEEP
            target = f"tool phase >= {floor * 1000:g} ms (serial): " + (
                "met" if phase >= floor else "**MISSED**"
            )
        else:
            target = ""
        rows.append(
            {"case": f"toolwire: {label}", "figures": (run, phase), "reference": reference, "target": target}
        )
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | run ms | tool phase ms | run vs reference | phase vs reference | target |",
        "|---|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        run, phase = row["figures"]
        reference = row.get("reference")
        ratios = (
            f"{run / reference[0]:.3f}x | {phase / reference[0]:.3f}x" if reference else "1.000x | 1.000x"
        )
        lines.append(
            f"| {row['case']} | {run * 1000:.1f} | {phase * 1000:.1f} | {ratios} | {row.get('target', '')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="repetitions of each read case")
    args = parser.parse_args()
    print(
        f"{CALLS} calls of a tool sleeping {SLEEP * 1000:g} ms in one turn; in-process model; median of "
        f"{args.repeat} runs ({max(3, args.repeat // 3)} for writes). "
        "The limit 4 row shows the limit at work.\n"
    )
    print(report(asyncio.run(main(args.repeat))))
