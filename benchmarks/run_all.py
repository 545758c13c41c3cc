"""Run every benchmark with sizes that fit the whole suite in under 15 minutes; write RESULTS.md.

Each benchmark runs as its own process (`.venv/bin/python benchmarks/X.py ...`), one after the
other so they do not compete for the two cores; its printed tables go into `benchmarks/RESULTS.md`
under a heading, with the date, the machine, the Python and package versions, how long each took,
and a summary of the targets each marked as met or missed. A benchmark script in this folder that
is not listed below (a new one) is run too, with its own default sizes. A benchmark that fails or
runs past its time limit is recorded as failed; the others still run, and the exit status is 1.

Run: `.venv/bin/python benchmarks/run_all.py [--only NAME ...] [--output PATH]` (or `make bench`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGES = (
    "toolwire",
    "httpx2",
    "openai",
    "openai-agents",
    "pydantic-ai-slim",
    "pydantic",
    "jsonschema",
    "jsonschema-rs",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "uvicorn",
    "starlette",
)


@dataclass(frozen=True)
class Benchmark:
    """One script of the suite and how to run it here."""

    title: str
    script: str
    args: tuple[str, ...] = ()
    limit_s: float = 300.0
    """Past this the run is stopped and recorded as failed."""


SUITE = (
    Benchmark("Runner cost per run", "runner_cost.py", ("--runs", "40", "--rounds", "9"), 420),
    Benchmark("Concurrency: 100 runs at once, 50 ms model latency", "concurrency.py", ("--rounds", "3"), 300),
    Benchmark("Fan-out: 8 calls of a 100 ms tool in one turn", "fanout.py", ("--repeat", "15"), 120),
    Benchmark("Gate cost per call", "gate_cost.py", ("--repeat", "15"), 180),
    Benchmark("Start-up", "startup.py", ("--rounds", "10"), 180),
    Benchmark("Ledger claims per second", "ledger_claims.py", ("--ops", "400"), 300),
    Benchmark("The service: /v1/chat and the gateway's added latency", "service.py", ("--rounds", "3"), 300),
    Benchmark("What a pause costs one HTTP round trip", "idle_wake.py", ("--requests", "200"), 180),
    Benchmark("The embedded model: speed beside llama.cpp", "local_speed.py", ("--reps", "2"), 300),
)
# The tool-call accuracy of the embedded model takes about 15 minutes for both sets of cases on two
# cores, more than the whole suite: `make bench-local` runs it.
NOT_BENCHMARKS = frozenset({"run_all.py", "local_accuracy.py"})


@dataclass
class Outcome:
    """What one benchmark printed, and how it ended."""

    benchmark: Benchmark
    output: str
    seconds: float
    error: str | None = None


def discovered() -> list[Benchmark]:
    """The suite, then every other benchmark script in this folder, with its default sizes."""
    listed = {b.script for b in SUITE} | NOT_BENCHMARKS
    extra = [
        Benchmark(path.stem.replace("_", " ").capitalize(), path.name)
        for path in sorted(HERE.glob("*.py"))
        if path.name not in listed and not path.name.startswith("_")
    ]
    return [*SUITE, *extra]


def run(benchmark: Benchmark) -> Outcome:
    command = [sys.executable, str(HERE / benchmark.script), *benchmark.args]
    print(f"== {benchmark.title}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=benchmark.limit_s, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Outcome(
            benchmark, output, time.perf_counter() - started, f"stopped after {benchmark.limit_s:g} s"
        )
    seconds = time.perf_counter() - started
    print(done.stdout, file=sys.stderr, flush=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-30:])
        return Outcome(benchmark, done.stdout, seconds, f"exit status {done.returncode}:\n{tail}")
    return Outcome(benchmark, done.stdout, seconds)


def versions() -> list[tuple[str, str]]:
    found = []
    for name in PACKAGES:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, "not installed"))
    return found


def postgres_version() -> str:
    """The version of the PostgreSQL server the ledger benchmark uses, if psql can ask it."""
    url = os.environ.get("TOOLWIRE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        done = subprocess.run(
            ["psql", url, "-Atc", "SHOW server_version"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (psql is not available)"
    return done.stdout.strip() if done.returncode == 0 else "not reachable"


def git_state() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"{commit}" + (" with uncommitted changes" if changed else "")


def machine() -> str:
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, load average {load} at start"


def targets(outcome: Outcome) -> tuple[int, list[str]]:
    """How many verdicts in the tables say `met`, and each `**MISSED**` one with its row and column."""
    met = 0
    missed = []
    header: list[str] = []
    for line in outcome.output.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        for column, cell in zip(header, cells, strict=False):
            if re.search(r"(^|: )met$", cell):
                met += 1
            elif "**MISSED**" in cell:
                # The row's name: its leading cells, up to the first figure.
                name = []
                for leading in cells:
                    if not leading or leading[0].isdigit():
                        break
                    name.append(leading)
                missed.append(f"{' / '.join(name)} ({column}): {cell}")
    return met, missed


def section(outcome: Outcome) -> str:
    benchmark = outcome.benchmark
    command = " ".join(["python", f"benchmarks/{benchmark.script}", *benchmark.args])
    parts = [f"## {benchmark.title}", "", f"`{command}`, {outcome.seconds:.0f} s.", ""]
    output = outcome.output.strip()
    if output:
        # Tables print as markdown; anything else (a fixed-width table) is kept as it was printed.
        markdown = any(line.startswith("|") for line in output.splitlines())
        parts.append(output if markdown else f"```\n{output}\n```")
    if outcome.error:
        parts += ["", f"**Failed** ({outcome.error.splitlines()[0]}):", "", "```", outcome.error, "```"]
    return "\n".join(parts)


def results(outcomes: list[Outcome], started: dt.datetime, load: str, total: float) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Written by `benchmarks/run_all.py` (`make bench`); the suite took {total / 60:.1f} minutes. "
        "Absolute times on a shared two-core machine are noise: read the ratios, measured in the same run. "
        "How each benchmark measures is in `benchmarks/README.md`.",
        "",
        "| | |",
        "|---|---|",
        f"| date | {started:%Y-%m-%d %H:%M} UTC |",
        f"| machine | {load} |",
        f"| Python | {platform.python_version()} ({platform.python_implementation()}) |",
        f"| checkout | {git_state()} |",
    ]
    lines += [f"| {name} | {version} |" for name, version in versions()]
    lines.append(f"| PostgreSQL server | {postgres_version()} |")
    lines += ["", "## Targets", "", "| benchmark | met | missed |", "|---|--:|---|"]
    for outcome in outcomes:
        met, missed = targets(outcome)
        if outcome.error:
            status = f"failed: {outcome.error.splitlines()[0]}"
        else:
            status = "<br>".join(missed) or ("none" if met else "(no target)")
        lines.append(f"| {outcome.benchmark.title} | {met} | {status} |")
    return "\n".join(lines + [""] + [section(o) + "\n" for o in outcomes])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only this script (e.g. fanout); repeatable")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    chosen = [b for b in discovered() if not args.only or Path(b.script).stem in args.only]
    if not chosen:
        parser.error(f"no benchmark matches {args.only}")
    started = dt.datetime.now(dt.UTC)
    load = machine()
    clock = time.perf_counter()
    outcomes = [run(benchmark) for benchmark in chosen]
    total = time.perf_counter() - clock
    args.output.write_text(results(outcomes, started, load, total))
    failed = [o.benchmark.script for o in outcomes if o.error]
    print(f"Wrote {args.output} in {total / 60:.1f} minutes.", file=sys.stderr)
    if failed:
        print(f"Failed: {', '.join(failed)} (see {args.output}).", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
