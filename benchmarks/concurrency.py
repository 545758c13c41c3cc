"""Throughput under concurrency: 100 runs at once against a scripted server with 50 ms model latency.

Each contender of `_contenders.py` runs in a process of its own, so its import time and peak RSS
are its own: the process imports the contender's library (timed), starts one warm-up batch, then
runs batches of N concurrent runs (`asyncio.gather`), each run a user turn, one tool call and the
final text (two model requests). Figures: runs per second (median over batches and rounds), the
client's CPU time per run, peak RSS of the process, and the import time of the library; ratios
against the bare-`httpx2` loop.
The contenders' processes are started in rounds, the order rotating, so noise hits all alike.

Targets for toolwire: at least 0.8x the runs per second of the `httpx2` loop, and above both
frameworks. A missed target is marked, not an error.
Run: `.venv/bin/python benchmarks/concurrency.py [--runs 100] [--latency 0.05] [--rounds 3]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _contenders
from _contenders import ANSWER, FRAMEWORKS, NAMES, ROUTES
from _scripted import serve

HTTPX_TARGET = 0.8


async def child(
    name: str, base_url: str, route: str, stream: bool, runs: int, batches: int
) -> dict[str, Any]:
    """Measure one contender in this process; returns its figures."""
    started = time.perf_counter()
    contender = _contenders.make(name, base_url, route, stream)
    imported = time.perf_counter() - started

    async def batch() -> float:
        begun = time.perf_counter()
        answers = await asyncio.gather(*(contender.run() for _ in range(runs)))
        wall = time.perf_counter() - begun
        if not all(ANSWER in answer for answer in answers):
            raise RuntimeError(f"{name} ended a run without the scripted answer.")
        return runs / wall

    try:
        await batch()  # warm-up: connections, caches, lazy imports
        cpu = time.process_time()
        rates = [await batch() for _ in range(batches)]
        cpu = (time.process_time() - cpu) / (runs * batches)
    finally:
        await contender.close()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"import_s": imported, "rates": rates, "cpu_s": [cpu], "peak_mib": peak_kib / 1024}


def spawn(name: str, base_url: str, args: argparse.Namespace) -> dict[str, Any] | str:
    """Run one contender's process; its figures, or why it has none."""
    command = [sys.executable, str(Path(__file__)), "--child", name, "--base-url", base_url]
    command += ["--route", args.route, "--runs", str(args.runs), "--batches", str(args.batches)]
    if args.stream:
        command.append("--stream")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode == 3:
        return done.stdout.strip()
    if done.returncode != 0:
        raise RuntimeError(f"The {name} process failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def measure(args: argparse.Namespace) -> dict[str, dict[str, Any] | str]:
    """Every contender, in rounds; per contender its pooled figures or why it has none."""
    found: dict[str, dict[str, Any] | str] = {}
    with serve(args.latency) as server:
        for number in range(args.rounds):
            shift = number % len(NAMES)
            for name in NAMES[shift:] + NAMES[:shift]:
                if isinstance(found.get(name), str):
                    continue
                figures = spawn(name, server.base_url, args)
                if isinstance(figures, str):
                    found[name] = figures
                    continue
                pooled = found.setdefault(name, {"import_s": [], "rates": [], "cpu_s": [], "peak_mib": []})
                assert isinstance(pooled, dict)
                pooled["import_s"].append(figures["import_s"])
                pooled["rates"] += figures["rates"]
                pooled["cpu_s"] += figures["cpu_s"]
                pooled["peak_mib"].append(figures["peak_mib"])
    return {
        name: value
        if isinstance(value, str)
        else {key: statistics.median(values) for key, values in value.items()}
        for name, value in ((name, found[name]) for name in NAMES)
    }


def report(figures: dict[str, dict[str, Any] | str]) -> str:
    """A markdown table with ratios against the httpx2 loop and toolwire's verdict."""
    lines = [
        "| client | runs/s | vs httpx2 loop | client CPU ms/run | peak RSS MiB | vs httpx2 loop "
        "| import ms | vs httpx2 loop | toolwire targets |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    base = figures["httpx2 loop"]
    assert isinstance(base, dict)
    for name, row in figures.items():
        if isinstance(row, str):
            lines.append(f"| {name} | {row} ||||||||")
            continue
        verdict = ""
        if name == "toolwire":
            misses = []
            if row["rates"] < HTTPX_TARGET * base["rates"]:
                misses.append(f">= {HTTPX_TARGET:g}x httpx2 loop")
            for other in FRAMEWORKS:
                theirs = figures[other]
                if isinstance(theirs, dict) and row["rates"] <= theirs["rates"]:
                    misses.append(f"above {other}")
            verdict = "**MISSED**: " + ", ".join(misses) if misses else "met"
        lines.append(
            f"| {name} | {row['rates']:.0f} | {row['rates'] / base['rates']:.2f}x "
            f"| {row['cpu_s'] * 1000:.2f} | {row['peak_mib']:.0f} "
            f"| {row['peak_mib'] / base['peak_mib']:.2f}x "
            f"| {row['import_s'] * 1000:.0f} | {row['import_s'] / base['import_s']:.1f}x | {verdict} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs at once per batch")
    parser.add_argument("--latency", type=float, default=0.05, help="model latency in seconds")
    parser.add_argument("--batches", type=int, default=4, help="measured batches per process")
    parser.add_argument("--rounds", type=int, default=3, help="processes per contender")
    parser.add_argument("--route", choices=ROUTES, default="chat")
    parser.add_argument("--stream", action="store_true", help="stream the model's answers")
    parser.add_argument("--child", choices=NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        try:
            figures = asyncio.run(
                child(args.child, args.base_url, args.route, args.stream, args.runs, args.batches)
            )
        except ImportError as exc:
            print(f"n/a: {exc.name or 'a peer'} is not installed")
            sys.exit(3)
        print(json.dumps(figures))
        return
    figures = measure(args)
    mode = "streaming" if args.stream else "whole responses"
    print(
        f"{args.runs} runs at once, {args.latency * 1000:g} ms model latency, {args.route} route, {mode}; "
        f"median of {args.batches} batches x {args.rounds} processes per client; "
        "ratios against the bare-httpx2 loop.\n"
    )
    print(report(figures))


if __name__ == "__main__":
    main()
