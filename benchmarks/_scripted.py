"""A scripted OpenAI-compatible server in its own process, so it does not share the GIL with the client.

`python benchmarks/_scripted.py [latency]` prints `READY <base_url>` and serves until stdin closes;
a line `cpu` on stdin makes it print its CPU seconds so far. `serve(latency)` does that from a
benchmark and yields a `Served` (base URL, CPU time). The script, the same on both
routes, streaming or not: a request whose last message (Chat) or input item (Responses) is not a
tool result gets one `get_weather` call; a request after the tool result gets the final text.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["Served", "script", "serve"]

FINAL_TEXT = "It is 18 degrees and sunny in Paris."


def script(body: dict[str, Any], route: str) -> Any:
    """The scripted server's answer to one request on either route."""
    from toolwire.testing.server import Step

    items = body.get("messages") or body.get("input") or []
    last = items[-1] if isinstance(items, list) and items else {}
    answered = last.get("role") == "tool" or last.get("type") == "function_call_output"
    if answered:
        return Step.reply(FINAL_TEXT)
    return Step.call("get_weather", {"city": "Paris"})


class Served:
    """A running server process: its base URL, and the CPU time it has used."""

    def __init__(self, process: subprocess.Popen[str], base_url: str) -> None:
        self.process = process
        self.base_url = base_url

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the server process so far, all threads."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("cpu\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())


@contextmanager
def serve_command(argv: list[str]) -> Iterator[Served]:
    """Run a server command that prints `READY <base_url>` and serves until its stdin closes."""
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdin is not None
    try:
        line = process.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError("The scripted server did not start; see the error above.")
        yield Served(process, line.split()[1])
    finally:
        process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def serve(latency: float = 0.0) -> Iterator[Served]:
    """Run the scripted server in a child process for the duration of the block."""
    with serve_command([sys.executable, str(Path(__file__)), str(latency)]) as served:
        yield served


def main() -> None:
    from toolwire.testing.server import ScriptedServer

    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    with ScriptedServer(script, latency=latency, check_transcript=False) as server:
        print(f"READY {server.base_url}", flush=True)
        for line in sys.stdin:
            if line.strip() == "cpu":
                print(time.process_time(), flush=True)


if __name__ == "__main__":
    main()
