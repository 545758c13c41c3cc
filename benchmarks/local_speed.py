"""Speed of the embedded model through toolwire against llama.cpp's own, same model, prompt and run.

Measured, alternating toolwire and llama-cpp-python's `create_completion` (`--reps` times each,
medians reported):
- decode tokens per second of a text answer (from the first token to the last), and the ratio
  toolwire / llama.cpp (target >= 0.9);
- time to first token with a cold KV cache (the whole prompt evaluated) and with the system prompt
  already cached, as on a second request;
- the demo request with tools ("Book 12.50 for lunch in category food"): cold and warm latency of
  the whole turn, and its decode speed under the call grammar.

Run: .venv/bin/python benchmarks/local_speed.py [--model X.gguf] [--tokens 96] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from toolwire.messages import SystemMessage, ToolSpec, UserMessage
from toolwire.models.base import RequestOptions, TextDelta, TurnComplete
from toolwire.models.local import LocalModel
from toolwire.models.local_prompt import chat_messages

SYSTEM = SystemMessage(content="You are a helpful assistant. Answer in plain prose.")
QUESTION = UserMessage(content="Tell a long story about a lighthouse keeper who finds a message in a bottle.")
BOOK = UserMessage(content="Book 12.50 for lunch in category food")
CREATE_ITEM = ToolSpec(
    name="create_item",
    description="Create a bookkeeping entry. Use when the user says book, add, record or register an amount.",
    parameters={
        "type": "object",
        "properties": {
            "category": {"type": "string"},
            "amount": {"type": "number"},
            "title": {"type": "string"},
            "date": {"type": "string", "description": "YYYY-MM-DD"},
        },
        "required": ["category", "amount", "title"],
    },
)


def _reset(model: LocalModel) -> None:
    """Forget the KV cache, so the next request evaluates its whole prompt."""
    model.engine().llm.reset()


async def toolwire_text(model: LocalModel, tokens: int, *, cold: bool) -> dict[str, float]:
    if cold:
        _reset(model)
    started = time.perf_counter()
    first = last = 0.0
    turn = None
    async for event in model.stream([SYSTEM, QUESTION], [], RequestOptions(max_tokens=tokens)):
        now = time.perf_counter()
        if isinstance(event, TextDelta) and event.text:
            first = first or now
            last = now
        elif isinstance(event, TurnComplete):
            turn = event.turn
    assert turn is not None
    n = turn.usage.output_tokens
    return {"ttft": first - started, "tps": (n - 1) / (last - first), "tokens": n}


def llama_text(model: LocalModel, tokens: int, *, cold: bool) -> dict[str, float]:
    engine = model.engine()
    prompt = engine.tokenize(engine.render(chat_messages([SYSTEM, QUESTION]), []))
    if cold:
        _reset(model)
    started = time.perf_counter()
    first = last = 0.0
    n = 0
    for _chunk in engine.llm.create_completion(prompt, max_tokens=tokens, temperature=0.0, stream=True):
        now = time.perf_counter()
        first = first or now
        last = now
        n += 1
    return {"ttft": first - started, "tps": (n - 1) / (last - first), "tokens": n}


async def demo_call(model: LocalModel, *, cold: bool) -> dict[str, Any]:
    if cold:
        _reset(model)
    started = time.perf_counter()
    turn = await model.request([SYSTEM, BOOK], [CREATE_ITEM], RequestOptions())
    seconds = time.perf_counter() - started
    [call] = turn.message.tool_calls
    return {"seconds": seconds, "call": f"{call.name}({call.arguments})"}


def median(rows: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 2)


TARGET_RATIO = 0.9


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF file (default: TOOLWIRE_LOCAL_MODEL or the packaged model)")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    ns = parser.parse_args()
    model = LocalModel(ns.model, n_threads=ns.threads)
    started = time.perf_counter()
    await asyncio.to_thread(model.engine)
    load = time.perf_counter() - started
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    warm_ours: list[dict[str, float]] = []
    for _ in range(ns.reps):
        theirs.append(await asyncio.to_thread(llama_text, model, ns.tokens, cold=True))
        ours.append(await toolwire_text(model, ns.tokens, cold=True))
        warm_ours.append(await toolwire_text(model, ns.tokens, cold=False))
    calls_cold = [await demo_call(model, cold=True) for _ in range(ns.reps)]
    calls_warm = [await demo_call(model, cold=False) for _ in range(ns.reps)]
    result = {
        "model": model.name,
        "threads": ns.threads,
        "load_seconds": round(load, 2),
        "decode_tps_toolwire": median(ours, "tps"),
        "decode_tps_llama_cpp": median(theirs, "tps"),
        "ratio": round(median(ours, "tps") / median(theirs, "tps"), 3),
        "ttft_cold_toolwire": median(ours, "ttft"),
        "ttft_cold_llama_cpp": median(theirs, "ttft"),
        "ttft_cached_prefix_toolwire": median(warm_ours, "ttft"),
        "demo_call_cold_seconds": median(calls_cold, "seconds"),
        "demo_call_warm_seconds": median(calls_warm, "seconds"),
        "demo_call": calls_warm[-1]["call"],
    }
    print(json.dumps(result, indent=1))
    ratio = result["ratio"]
    verdict = "met" if ratio >= TARGET_RATIO else f"**MISSED**: {ratio:.2f}x"
    print(
        "\n| decode tokens/s, toolwire | llama.cpp | ratio | first token cold, toolwire s | llama.cpp s "
        f"| first token, prompt cached s | target: ratio >= {TARGET_RATIO} |\n"
        "|--:|--:|--:|--:|--:|--:|---|\n"
        f"| {result['decode_tps_toolwire']} | {result['decode_tps_llama_cpp']} | {ratio:.2f}x "
        f"| {result['ttft_cold_toolwire']} | {result['ttft_cold_llama_cpp']} "
        f"| {result['ttft_cached_prefix_toolwire']} | {verdict} |"
    )


if __name__ == "__main__":
    asyncio.run(main())
