"""A scripted OpenAI-compatible server in its own process, so it does not share the GIL with the client.

`python benchmarks/_scripted.py [latency]` prints `READY <base_url>` and serves until stdin closes.
The script: a request whose last message is not a tool result gets one `get_weather` call; a request
after the tool result gets the final text. Both routes, streaming or not.
"""

from __future__ import annotations

import sys
from typing import Any

from toolwire.testing.server import ScriptedServer, Step

TOOL = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
    "additionalProperties": False,
}


def script(body: dict[str, Any], route: str) -> Step:
    items = body.get("messages") or body.get("input") or []
    last = items[-1] if isinstance(items, list) and items else {}
    answered = last.get("role") == "tool" or last.get("type") == "function_call_output"
    if answered:
        return Step.reply("It is 18 degrees and sunny in Paris.")
    return Step.call("get_weather", {"city": "Paris"})


def main() -> None:
    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    with ScriptedServer(script, latency=latency, check_transcript=False) as server:
        print(f"READY {server.base_url}", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
