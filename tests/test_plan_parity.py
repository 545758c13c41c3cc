"""The JSON-plan path gives the same results as native tool calls for the same conversation.

One script drives both: natively it proposes `tool_calls`; on the JSON-plan route (no `tools` sent) it
writes the plan as text. The runs must agree on everything but the call ids and the route.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolwire import Runner, RunResult, ToolResult, tool
from toolwire.models.openai import OpenAIModel, clear_route_memory
from toolwire.testing import ScriptedServer, Step

executed: list[dict[str, Any]] = []


@tool
def get_delivery_status(order_id: str) -> dict[str, str]:
    """The delivery status of one order.

    Args:
        order_id: The order number, ORDER-1234.
    """
    executed.append({"order_id": order_id})
    return {"order_id": order_id, "status": "in transit"}


def script(body: dict[str, Any], route: str) -> Step:
    messages = body["messages"]
    native = "tools" in body
    last = messages[-1]
    if native and last["role"] == "tool":
        status = json.loads(last["content"])["status"]
        return Step.reply(f"Your order is {status}.")
    if not native and last["role"] == "user" and last["content"].startswith("Result of"):
        status = json.loads(last["content"].split(": ", 1)[1])["status"]
        return Step.reply(f"Your order is {status}.")
    if not native:
        return Step.plan("get_delivery_status", {"order_id": "ORDER-1001"})
    return Step.call("get_delivery_status", {"order_id": "ORDER-1001"})


def comparable(result: RunResult) -> dict[str, Any]:
    return {
        "answer": result.answer,
        "rounds": result.rounds,
        "calls": [(t.name, json.loads(t.arguments), t.outcome, t.result, t.replayed) for t in result.calls],
        "results": [m.content for m in result.transcript if isinstance(m, ToolResult)],
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_plan_and_native_routes_agree(stream: bool) -> None:
    clear_route_memory()
    outcomes = {}
    with ScriptedServer(script) as server:
        for route in ("chat", "jsonplan"):
            executed.clear()
            async with OpenAIModel("m", base_url=server.base_url, route=route) as model:  # type: ignore[arg-type]
                runner = Runner(model, [get_delivery_status])
                if stream:
                    events = [e async for e in runner.stream("Where is ORDER-1001?")]
                    result = events[-1].result  # type: ignore[union-attr]
                else:
                    result = await runner.run("Where is ORDER-1001?")
            assert result.route == route
            assert executed == [{"order_id": "ORDER-1001"}]
            outcomes[route] = comparable(result)
        sent = [("tools" in body) for body in server.requests]
    assert outcomes["chat"] == outcomes["jsonplan"]
    assert outcomes["chat"]["answer"] == "Your order is in transit."
    assert sent == [True, True, False, False]  # the plan route never sends `tools`
