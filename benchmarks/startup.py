"""Start-up time: `toolwire --help` and `import toolwire` against `python -c pass`, in the same run.

Each command runs as a fresh process, the commands interleaved in rounds (the order rotating), and
the median and the best wall time of each are printed with the ratio to `python -c pass` on the
same machine in the same run. The imports of the peers the runner benchmarks compare against are
timed the same way, for context. Then `python -X importtime` shows where the time of
`toolwire --help` goes: the imports with the largest cumulative time, nested as imported.

Target: `toolwire --help` under 0.5 s (median). A missed target is marked, not an error.
Run: `.venv/bin/python benchmarks/startup.py [--rounds N]`
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.5
PYTHON = sys.executable
CLI = str(Path(sys.executable).parent / "toolwire")
COMMANDS = {
    "python -c pass": [PYTHON, "-c", "pass"],
    "toolwire --help": [CLI, "--help"],
    "python -c 'import toolwire'": [PYTHON, "-c", "import toolwire"],
    "python -c 'import httpx2'": [PYTHON, "-c", "import httpx2"],
    "python -c 'import openai'": [PYTHON, "-c", "import openai"],
    "python -c 'import agents'": [PYTHON, "-c", "import agents"],
    "python -c 'import pydantic_ai'": [PYTHON, "-c", "import pydantic_ai"],
}


def run_once(command: list[str]) -> float | None:
    """Wall seconds of one process; None when it fails (a peer that is not installed)."""
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    return elapsed if done.returncode == 0 else None


def measure(rounds: int) -> dict[str, list[float] | None]:
    names = list(COMMANDS)
    samples: dict[str, list[float] | None] = {name: [] for name in names}
    for name in names:  # warm the file cache and the bytecode caches
        if run_once(COMMANDS[name]) is None:
            samples[name] = None
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            values = samples[name]
            if values is None:
                continue
            elapsed = run_once(COMMANDS[name])
            if elapsed is None:
                raise RuntimeError(f"`{name}` failed after it had worked; run it by hand to see why.")
            values.append(elapsed)
    if samples["toolwire --help"] is None or samples["python -c pass"] is None:
        raise RuntimeError(f"`{CLI} --help` failed; is toolwire installed in this environment?")
    return samples


def report(samples: dict[str, list[float] | None]) -> str:
    base = samples["python -c pass"]
    assert base is not None
    floor = statistics.median(base)
    lines = [
        "| command | median ms | best ms | vs python -c pass | added ms | target |",
        "|---|--:|--:|--:|--:|---|",
    ]
    for name, values in samples.items():
        if values is None:
            lines.append(f"| `{name}` | n/a: failed (not installed?) |||||")
            continue
        median = statistics.median(values)
        target = ""
        if name == "toolwire --help":
            target = f"< {TARGET_S * 1000:g} ms: " + ("met" if median < TARGET_S else "**MISSED**")
        lines.append(
            f"| `{name}` | {median * 1000:.0f} | {min(values) * 1000:.0f} | {median / floor:.1f}x "
            f"| {(median - floor) * 1000:.0f} | {target} |"
        )
    return "\n".join(lines)


def import_breakdown(top: int) -> str:
    """The imports of `toolwire --help` with the largest cumulative time, from `-X importtime`."""
    done = subprocess.run([PYTHON, "-X", "importtime", CLI, "--help"], capture_output=True, text=True)
    entries = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        head, cumulative, name = line.split("|")  # "import time: <own us> | <cumulative us> | <name>"
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        entries.append((int(cumulative) / 1000, int(head.split(":")[1]) / 1000, depth, name.strip()))
    chosen = sorted(entries, key=lambda entry: -entry[0])[:top]
    lines = ["| module (depth in the import tree) | cumulative ms | own ms |", "|---|--:|--:|"]
    for cumulative, own, depth, name in chosen:
        lines.append(f"| {'. ' * depth}`{name}` | {cumulative:.0f} | {own:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved runs of each command")
    parser.add_argument("--top", type=int, default=15, help="imports to list in the breakdown")
    args = parser.parse_args()
    print(f"Fresh processes, {args.rounds} interleaved rounds; Python {sys.version.split()[0]}.\n")
    print(report(measure(args.rounds)))
    print(f"\nWhere `toolwire --help` spends its import time (one `-X importtime` run, top {args.top}):\n")
    print(import_breakdown(args.top))
