"""Cost of one run (user turn -> one tool call -> final text) against a scripted server at zero latency.

Five contenders drive the same server (in its own process, so it does not share the client's GIL)
with the same async tool, on the Chat and the Responses route, streaming and not: toolwire's Runner,
a minimal hand-written loop on the official `openai` client, one on bare `httpx2`, the OpenAI Agents
SDK and Pydantic AI (see `_contenders.py`). Within each route and mode the contenders are interleaved
in rounds (the order rotating) so noise on the shared machine hits all of them alike; each figure is
the median over the rounds of the mean per run. Printed per row: wall time, client CPU time and the
scripted server's CPU time per run, and the ratios to the two hand-written loops of the same route
and mode.

Targets for toolwire (checked on client CPU and on wall time): at most 0.8x the `openai` loop, at
most 1.5x the `httpx2` loop, and below both frameworks. A missed target is marked, not an error.
Run: `.venv/bin/python benchmarks/runner_cost.py [--runs N] [--rounds N] [--route chat|responses]`
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

import _contenders
from _contenders import ANSWER, FRAMEWORKS, NAMES, ROUTES, Contender
from _scripted import Served, serve

OPENAI_TARGET = 0.8
HTTPX_TARGET = 1.5


@dataclass
class Row:
    """The figures of one contender in one route and mode, or why it has none."""

    route: str
    stream: bool
    name: str
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    server_ms: float = 0.0
    """The scripted server's CPU time per run: it explains wall time beyond the client's CPU."""
    missing: str | None = None


async def measure(contender: Contender, runs: int, server: Served) -> tuple[float, float, float]:
    """Mean wall, client CPU and server CPU seconds per run over `runs` sequential runs."""
    served = server.cpu_seconds()
    wall = time.perf_counter()
    cpu = time.process_time()
    for _ in range(runs):
        answer = await contender.run()
        if ANSWER not in answer:
            raise RuntimeError(f"{contender.name} ended with {answer!r}, not the scripted answer.")
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    return wall / runs, cpu / runs, (server.cpu_seconds() - served) / runs


async def measure_group(server: Served, route: str, stream: bool, runs: int, rounds: int) -> list[Row]:
    """Every contender of one route and mode, interleaved."""
    rows = {name: Row(route, stream, name) for name in NAMES}
    contenders: list[Contender] = []
    for name in NAMES:
        try:
            contenders.append(_contenders.make(name, server.base_url, route, stream))
        except ImportError as exc:
            rows[name].missing = f"n/a: {exc.name or 'a peer'} is not installed"
    try:
        for contender in contenders:  # warm up connections, caches and lazy imports
            await measure(contender, 10, server)
        samples: dict[str, list[tuple[float, float, float]]] = {c.name: [] for c in contenders}
        for number in range(rounds):
            shift = number % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                samples[contender.name].append(await measure(contender, runs, server))
    finally:
        for contender in contenders:
            await contender.close()
    for name, values in samples.items():
        rows[name].wall_ms = statistics.median(v[0] for v in values) * 1000
        rows[name].cpu_ms = statistics.median(v[1] for v in values) * 1000
        rows[name].server_ms = statistics.median(v[2] for v in values) * 1000
    return list(rows.values())


def misses(row: Row, group: dict[str, Row], metric: str) -> list[str]:
    """The toolwire targets `row` misses on `metric` (`cpu` or `wall`)."""
    limits = [("openai loop", OPENAI_TARGET), ("httpx2 loop", HTTPX_TARGET)]
    limits += [(name, 0.0) for name in FRAMEWORKS]  # 0: strictly below
    found = []
    mine = getattr(row, f"{metric}_ms")
    for name, factor in limits:
        if group[name].missing:
            continue
        theirs = getattr(group[name], f"{metric}_ms")
        if factor and mine > factor * theirs:
            found.append(f"<= {factor:g}x {name}")
        elif not factor and mine >= theirs:
            found.append(f"below {name}")
    return found


def report(rows: list[Row]) -> str:
    """One markdown table for every route and mode."""
    lines = [
        "| route | mode | client | wall ms/run | client CPU ms/run | server CPU ms/run "
        "| CPU vs openai | CPU vs httpx2 | wall vs openai | wall vs httpx2 "
        "| toolwire targets (client CPU) | same on wall |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|",
    ]
    for route in ROUTES:
        for stream in (False, True):
            group = {r.name: r for r in rows if r.route == route and r.stream == stream}
            if not group:
                continue
            oai, raw = group["openai loop"], group["httpx2 loop"]
            mode = "stream" if stream else "whole"
            for row in group.values():
                if row.missing:
                    lines.append(f"| {route} | {mode} | {row.name} | {row.missing} |||||||||")
                    continue
                verdicts = ["", ""]
                if row.name == "toolwire":
                    for i, metric in enumerate(("cpu", "wall")):
                        found = misses(row, group, metric)
                        verdicts[i] = "**MISSED**: " + ", ".join(found) if found else "met"
                lines.append(
                    f"| {route} | {mode} | {row.name} | {row.wall_ms:.2f} | {row.cpu_ms:.2f} "
                    f"| {row.server_ms:.2f} | {_ratio(row.cpu_ms, oai.cpu_ms)} "
                    f"| {_ratio(row.cpu_ms, raw.cpu_ms)} | {_ratio(row.wall_ms, oai.wall_ms)} "
                    f"| {_ratio(row.wall_ms, raw.wall_ms)} | {verdicts[0]} | {verdicts[1]} |"
                )
    return "\n".join(lines)


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"


async def main(runs: int, rounds: int, routes: list[str]) -> list[Row]:
    rows: list[Row] = []
    with serve() as server:
        for route in routes:
            for stream in (False, True):
                rows += await measure_group(server, route, stream, runs, rounds)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per sample")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved samples per contender")
    parser.add_argument("--route", choices=ROUTES, action="append", help="limit to a route (repeatable)")
    args = parser.parse_args()
    figures = asyncio.run(main(args.runs, args.rounds, args.route or list(ROUTES)))
    print(
        f"Median of {args.rounds} interleaved samples of {args.runs} sequential runs each; "
        "zero model latency; ratios against the hand-written loops of the same route and mode.\n"
    )
    print(report(figures))
