"""Cost of one run (user turn -> one tool call -> final text) against a scripted server at zero latency.

Three clients drive the same server (in its own process) and the same tool, interleaved in rounds so
that noise on the shared machine hits all of them alike:
- toolwire's Runner (Chat route, non-streaming and streaming);
- a minimal hand-written loop on the official `openai` client;
- a minimal hand-written loop on bare `httpx2`.
Printed: the median wall time and client CPU time per run, and the ratios to both references.
Run: `.venv/bin/python benchmarks/runner_overhead.py [--runs N]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import openai

from toolwire import Runner, tool
from toolwire.models.openai import OpenAIModel

HERE = Path(__file__).parent
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def weather(city: str) -> str:
    return json.dumps({"city": city, "temp_c": 18, "sky": "sunny"})


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temp_c": 18, "sky": "sunny"}


def start_server(latency: float = 0.0) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_scripted.py"), str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        raise SystemExit("The scripted server did not start.")
    return proc, line.split()[1]


async def openai_loop(client: openai.AsyncOpenAI) -> str:
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    while True:
        response = await client.chat.completions.create(model="bench", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": weather(**args)})


async def httpx_loop(client: httpx2.AsyncClient, url: str) -> str:
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    while True:
        response = await client.post(url, json={"model": "bench", "messages": messages, "tools": TOOLS})
        message = response.json()["choices"][0]["message"]
        calls = message.get("tool_calls")
        if not calls:
            return str(message.get("content") or "")
        messages.append(message)
        for call in calls:
            args = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": weather(**args)})


async def measure(name: str, run: Callable[[], Awaitable[str]], n: int) -> tuple[float, float]:
    wall = time.perf_counter()
    cpu = time.process_time()
    for _ in range(n):
        answer = await run()
        assert "18 degrees" in answer, (name, answer)
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


async def main(runs: int, rounds: int) -> dict[str, dict[str, float]]:
    proc, base_url = start_server()
    try:
        oai = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        raw = httpx2.AsyncClient()
        model = OpenAIModel("bench", base_url=base_url, api_key="bench")
        runner = Runner(model, [get_weather])
        streaming = Runner(model, [get_weather])

        async def toolwire_run() -> str:
            return (await runner.run("Weather in Paris?")).answer

        async def toolwire_stream() -> str:
            answer = ""
            async for event in streaming.stream("Weather in Paris?"):
                if type(event).__name__ == "RunComplete":
                    answer = event.result.answer  # type: ignore[union-attr]
            return answer

        contenders: dict[str, Callable[[], Awaitable[str]]] = {
            "httpx2 loop": lambda: httpx_loop(raw, f"{base_url}/chat/completions"),
            "openai loop": lambda: openai_loop(oai),
            "toolwire": toolwire_run,
            "toolwire stream": toolwire_stream,
        }
        for run in contenders.values():  # warm up connections and caches
            await measure("warm", run, 20)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        for _ in range(rounds):
            for name, run in contenders.items():
                samples[name].append(await measure(name, run, runs))
        await raw.aclose()
        await oai.close()
        await model.aclose()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
    return {
        name: {
            "wall_ms": statistics.median(s[0] for s in values) * 1000,
            "cpu_ms": statistics.median(s[1] for s in values) * 1000,
        }
        for name, values in samples.items()
    }


def report(figures: dict[str, dict[str, float]]) -> str:
    base_httpx = figures["httpx2 loop"]
    base_openai = figures["openai loop"]
    lines = [
        "| client | wall ms/run | client CPU ms/run | wall vs openai | wall vs httpx2 "
        "| CPU vs openai | CPU vs httpx2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        lines.append(
            f"| {name} | {f['wall_ms']:.2f} | {f['cpu_ms']:.2f} | "
            f"{f['wall_ms'] / base_openai['wall_ms']:.2f}x | {f['wall_ms'] / base_httpx['wall_ms']:.2f}x | "
            f"{f['cpu_ms'] / base_openai['cpu_ms']:.2f}x | {f['cpu_ms'] / base_httpx['cpu_ms']:.2f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs per sample")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved samples per client")
    args = parser.parse_args()
    print(report(asyncio.run(main(args.runs, args.rounds))))
