"""Route selection: `auto` switches wire when an endpoint does not serve one, and both wires agree."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from toolwire.context import Context
from toolwire.exceptions import ModelHTTPError, RouteUnsupportedError
from toolwire.messages import ToolResult, UserMessage
from toolwire.models.base import RequestOptions
from toolwire.models.openai import OpenAIModel, clear_route_memory
from toolwire.runner import RunComplete, Runner, RunResult
from toolwire.testing.server import ScriptedServer, Step
from toolwire.tools import Tool

SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "pattern": "^ORDER-[0-9]{4}$"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
ASK = "Where are ORDER-1001 and ORDER-2002?"


@pytest.fixture(autouse=True)
def _fresh_route_memory() -> None:
    clear_route_memory()


@pytest.fixture(params=[False, True], ids=["run", "stream"])
def streaming(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def delivery_tool() -> Tool:
    async def handler(args: dict[str, Any], ctx: Context) -> dict[str, str]:
        # The first order finishes last, so completion order differs from proposal order.
        await asyncio.sleep(0.05 if args["order_id"] == "ORDER-1001" else 0)
        return {"order_id": args["order_id"], "status": f"in transit ({args['order_id'][-4:]})"}

    return Tool(
        name="get_delivery_status",
        description="Return the current delivery status for one order.",
        parameters=SCHEMA,
        handler=handler,
        strict=True,
    )


def courier(body: dict[str, Any], route: str) -> Step:
    """A route-blind model: asks for both orders (plus a bad one), then reports what came back."""
    transcript = ScriptedServer.read_transcript(body, route)
    results = [m for m in transcript if isinstance(m, ToolResult)]
    if not results:
        calls = [
            ("get_delivery_status", {"order_id": order}) for order in ("ORDER-1001", "ORDER-2002", "1001")
        ]
        return Step(text="Checking.", tool_calls=calls)
    return Step.reply(" | ".join(f"{r.call_id}: {r.content}" for r in results))


async def run(runner: Runner, streaming: bool, text: str = ASK) -> RunResult:
    if not streaming:
        return await runner.run(text, context=Context(request_id="req-1"))
    events = [e async for e in runner.stream(text, context=Context(request_id="req-1"))]
    assert isinstance(events[-1], RunComplete)
    return events[-1].result


def comparable(result: RunResult) -> RunResult:
    """The result without what legitimately differs between runs: timings and the route."""
    calls = tuple(replace(trace, duration_ms=0.0) for trace in result.calls)
    return replace(result, calls=calls, route="-")


async def test_one_script_gives_identical_runs_on_both_routes(streaming: bool) -> None:
    results = {}
    for route in ("chat", "responses"):
        async with (
            ScriptedServer(courier) as srv,
            OpenAIModel("gpt-test", base_url=srv.base_url, route=route) as model,
        ):
            results[route] = await run(Runner(model, [delivery_tool()]), streaming)
            assert set(srv.routes) == {route}

    chat, responses = results["chat"], results["responses"]
    assert (chat.route, responses.route) == ("chat", "responses")
    assert comparable(chat) == comparable(responses)
    # The contract itself: every call answered once, by id, the bad one refused without running.
    assert [(t.call_id, t.outcome) for t in chat.calls] == [
        ("call_1_0", "ok"),
        ("call_1_1", "ok"),
        ("call_1_2", "invalid_arguments"),
    ]
    assert chat.answer.startswith('call_1_0: {"order_id": "ORDER-1001"')
    assert 'call_1_2: {"error": {"code": "invalid_arguments"' in chat.answer


@pytest.mark.parametrize("unserved_status", [404, 405, 400])
async def test_auto_moves_to_responses_when_chat_is_not_served(streaming: bool, unserved_status: int) -> None:
    async with (
        ScriptedServer(courier, serve_chat=False, unserved_status=unserved_status) as srv,
        OpenAIModel("gpt-test", base_url=srv.base_url, route="auto") as model,
    ):
        before = model.route
        result = await run(Runner(model, [delivery_tool()]), streaming)
        assert (before, model.route) == ("chat", "responses")
        assert srv.routes == ["chat", "responses", "responses"]
        refused, answered = srv.requests[0], srv.requests[1]
        # Same model, same schema, same tools: only the wire changed.
        assert refused["model"] == answered["model"] == "gpt-test"
        assert [t["function"] for t in refused["tools"]] == [
            {k: t[k] for k in ("name", "description", "parameters", "strict")} for t in answered["tools"]
        ]

        # Remembered for the endpoint for the process's life: a new model object does not probe again.
        async with OpenAIModel("gpt-test", base_url=srv.base_url + "/", route="auto") as again:
            assert again.route == "responses"
            await run(Runner(again, [delivery_tool()]), streaming)
        assert srv.routes[3:] == ["responses", "responses"]

    assert result.route == "responses"
    assert [t.outcome for t in result.calls] == ["ok", "ok", "invalid_arguments"]


async def test_auto_stays_on_chat_where_chat_is_served(streaming: bool) -> None:
    async with (
        ScriptedServer(courier, serve_responses=False) as srv,
        OpenAIModel("gpt-test", base_url=srv.base_url, route="auto") as model,
    ):
        result = await run(Runner(model, [delivery_tool()]), streaming)
    assert result.route == "chat" and srv.routes == ["chat", "chat"]


async def test_route_lost_mid_run_switches_and_the_transcript_carries_over(streaming: bool) -> None:
    def script(body: dict[str, Any], route: str) -> Step:
        srv.serve_chat = False  # the gateway loses its chat route after the first answer
        return courier(body, route)

    async with (
        ScriptedServer(script) as srv,
        OpenAIModel("gpt-test", base_url=srv.base_url, route="auto") as model,
    ):
        result = await run(Runner(model, [delivery_tool()]), streaming)
    assert srv.routes == ["chat", "chat", "responses"]
    # The calls proposed on Chat are answered on Responses by the same ids.
    outputs = [i["call_id"] for i in srv.requests[2]["input"] if i.get("type") == "function_call_output"]
    calls = [i["call_id"] for i in srv.requests[2]["input"] if i.get("type") == "function_call"]
    assert outputs == calls == ["call_1_0", "call_1_1", "call_1_2"]
    assert result.route == "responses" and result.answer.startswith("call_1_0: ")


async def test_openais_model_only_on_responses_message_switches_for_that_model() -> None:
    only_responses = "This model is only supported in v1/responses and not in v1/chat/completions."
    steps = [Step.error(404, only_responses), Step.reply("Hello from Responses.")]
    async with (
        ScriptedServer(steps) as srv,
        OpenAIModel("codex-test", base_url=srv.base_url, route="auto") as model,
        OpenAIModel("other-model", base_url=srv.base_url, route="auto") as other,
    ):
        turn = await model.request([UserMessage(content="Hi")], (), RequestOptions())
        assert turn.message.text == "Hello from Responses." and turn.route == "responses"
        assert other.route == "chat"  # another model on the same endpoint keeps its own route
    assert srv.routes == ["chat", "responses"]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Invalid schema for function 'get_delivery_status': 'required' is missing."),
        (404, "The model 'gpt-test' does not exist or you do not have access to it."),
    ],
    ids=["bad-schema", "unknown-model"],
)
async def test_errors_that_are_not_about_the_route_do_not_switch(status: int, message: str) -> None:
    async with (
        ScriptedServer.from_steps(Step.error(status, message), Step.reply("unused")) as srv,
        OpenAIModel("gpt-test", base_url=srv.base_url, route="auto") as model,
    ):
        with pytest.raises(ModelHTTPError) as info:
            await model.request([UserMessage(content="Hi")], (), RequestOptions())
        assert not isinstance(info.value, RouteUnsupportedError)
        assert model.route == "chat" and srv.routes == ["chat"]


@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_a_configured_route_never_falls_back(route: str) -> None:
    other = {"chat": "Responses", "responses": "Chat Completions"}[route]
    label = {"chat": "Chat Completions", "responses": "Responses"}[route]
    async with (
        ScriptedServer.from_steps(Step.reply("unused"), **{f"serve_{route}": False}) as srv,
        OpenAIModel("gpt-test", base_url=srv.base_url, route=route) as model,  # type: ignore[arg-type]
    ):
        with pytest.raises(RouteUnsupportedError) as info:
            await model.request([UserMessage(content="Hi")], (), RequestOptions())
    assert info.value.status_code == 404
    assert f"does not serve {label} (HTTP 404); use route='auto' to fall back to {other}" in str(info.value)
    assert srv.routes == [route]


async def test_auto_against_an_endpoint_serving_neither_says_so_and_probes_again(streaming: bool) -> None:
    async with (
        ScriptedServer(serve_chat=False, serve_responses=False) as srv,
        OpenAIModel("gpt-test", base_url=srv.base_url, route="auto") as model,
    ):
        for _ in range(2):
            with pytest.raises(RouteUnsupportedError, match="serves neither Responses nor Chat Completions"):
                await run(Runner(model, [delivery_tool()]), streaming)
    assert srv.routes == ["chat", "responses", "chat", "responses"]


# --- the CLI -------------------------------------------------------------------------------------


def bookkeeper(body: dict[str, Any], route: str) -> Step:
    transcript = ScriptedServer.read_transcript(body, route)
    results = [m for m in transcript if isinstance(m, ToolResult)]
    if results:
        item = json.loads(results[-1].content)["item"]
        return Step.reply(f"Booked {item['title']} for {item['amount']:.2f}.")
    return Step.call("create_item", {"category": "food", "amount": 12.5, "title": "lunch"})


@pytest.mark.parametrize(
    ("missing", "answered", "how"),
    [("responses", "chat", "env"), ("chat", "responses", "flag")],
    ids=["no-responses-route-from-env", "no-chat-route-from-flag"],
)
def test_cli_chat_json_reports_the_route_that_answered(
    tmp_path: Path, missing: str, answered: str, how: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
    env["TOOLWIRE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'books.db'}"
    args = ["chat", "Book 12.50 for lunch", "--json"]
    if how == "flag":
        args += ["--route", "auto"]
    else:
        env["TOOLWIRE_ROUTE"] = "auto"
    with ScriptedServer(bookkeeper, **{f"serve_{missing}": False}) as srv:
        env["TOOLWIRE_BASE_URL"] = srv.base_url
        done = subprocess.run(
            [sys.executable, "-m", "toolwire", *args], env=env, capture_output=True, text=True, timeout=60
        )
        routes = list(srv.routes)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["route"] == answered
    assert out["answer"] == "Booked lunch for 12.50."
    assert [(c["name"], c["outcome"]) for c in out["calls"]] == [("create_item", "ok")]
    assert routes == (["chat", "responses", "responses"] if answered == "responses" else ["chat", "chat"])
