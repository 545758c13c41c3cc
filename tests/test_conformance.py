"""The conformance suite against the scripted server: it passes where the rules hold, and fails
(or skips) the matching row, with a clear reason, where the endpoint or the model breaks one."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from toolwire.conformance import Row, Target, run_suite
from toolwire.messages import ToolResult, UserMessage
from toolwire.models.openai import clear_route_memory
from toolwire.testing.server import Script, ScriptedServer, Step

ROW_NAMES = [
    "read-only call",
    "invalid arguments",
    "unknown function",
    "no tool needed",
    "streaming",
    "repeated request",
    "several calls",
    "route fallback",
]


@pytest.fixture(autouse=True)
def _fresh_route_memory() -> None:
    clear_route_memory()


def conforming(body: dict[str, Any], route: str) -> Step:
    """A model that does what each prompt of the suite asks, on either route."""
    transcript = ScriptedServer.read_transcript(body, route)
    last_user = max(i for i, m in enumerate(transcript) if isinstance(m, UserMessage))
    asked = transcript[last_user]
    assert isinstance(asked, UserMessage)
    results = [m for m in transcript[last_user:] if isinstance(m, ToolResult)]
    if results:
        return Step.reply("Here is what I found: " + "; ".join(r.content for r in results))
    prompt = asked.content
    if "12345" in prompt:
        return Step.call("get_delivery_status", {"order_id": "12345"})
    if "cancel_order" in prompt:
        return Step.call("cancel_order", {"order_id": "ORDER-1001"})
    if "2 + 3" in prompt:
        return Step.reply("5")
    if note := re.search(r'exactly "([^"]+)"', prompt):
        return Step.call("create_note", {"text": note.group(1)})
    orders = re.findall(r"ORDER-\d{4}", prompt)
    return Step(text="Checking.", tool_calls=[("get_delivery_status", {"order_id": o}) for o in orders])


def misbehaving(marker: str, make: Callable[[Step], Step] | None = None, **misbehaviour: Any) -> Script:
    """`conforming`, except for the first turn of the prompt containing `marker`."""

    def script(body: dict[str, Any], route: str) -> Step:
        step = conforming(body, route)
        transcript = ScriptedServer.read_transcript(body, route)
        fresh = not any(isinstance(m, ToolResult) for m in transcript)
        user = [m.content for m in transcript if isinstance(m, UserMessage)][-1]
        if marker in user and fresh:
            step = make(step) if make else dataclasses.replace(step, **misbehaviour)
        return step

    return script


async def suite(srv: ScriptedServer, route: str = "auto", *rows: str) -> dict[str, Row]:
    target = Target(base_url=srv.base_url, model="scripted", route=route, timeout=10)  # type: ignore[arg-type]
    return {row.name: row for row in await run_suite(target, only=rows)}


@pytest.mark.parametrize("route", ["chat", "responses", "auto"])
async def test_every_row_passes_against_a_conforming_endpoint(route: str) -> None:
    async with ScriptedServer(conforming) as srv:
        rows = await suite(srv, route)

    assert list(rows) == ROW_NAMES
    assert {name: row.status for name, row in rows.items()} == dict.fromkeys(ROW_NAMES, "PASS"), rows
    answered = "chat" if route == "auto" else route
    assert {row.route for name, row in rows.items() if name != "route fallback"} == {answered}
    assert rows["read-only call"].detail.startswith(
        'get_delivery_status({"order_id": "ORDER-1001"}) id call_'
    )
    assert "refused with invalid_arguments ('12345' does not match" in rows["invalid arguments"].detail
    assert "refused with unknown_tool; nothing ran" in rows["unknown function"].detail
    assert rows["no tool needed"].detail == "Plain text '5' in 1 request, no call."
    assert rows["streaming"].evidence["text_deltas"] > 0
    assert rows["repeated request"].evidence["executions"] == 1
    assert "marked replayed" in rows["repeated request"].detail
    several = rows["several calls"].evidence
    assert several["proposed"] == ["ORDER-1001", "ORDER-2002", "ORDER-3003"]
    assert several["completed"] == ["ORDER-3003", "ORDER-2002", "ORDER-1001"]
    fallback = rows["route fallback"]
    assert fallback.route == "chat+responses" and fallback.detail.startswith(
        "both routes are served; same model"
    )


@pytest.mark.parametrize(
    ("missing", "story"),
    [
        ("responses", "responses is not served; auto answered on chat; same model"),
        ("chat", "chat is not served; auto answered on responses after chat answered HTTP 404; same model"),
    ],
)
async def test_auto_passes_on_an_endpoint_with_one_route_and_shows_the_fallback(
    missing: str, story: str
) -> None:
    async with ScriptedServer(conforming, **{f"serve_{missing}": False}) as srv:
        rows = await suite(srv, "auto")
    assert all(row.status == "PASS" for row in rows.values()), rows
    assert rows["route fallback"].detail.startswith(story)


async def test_a_configured_route_the_endpoint_lacks_fails_every_row_saying_so() -> None:
    async with ScriptedServer(conforming, serve_responses=False) as srv:
        rows = await suite(srv, "responses", "read-only call", "streaming")
    for row in rows.values():
        assert row.status == "FAIL"
        assert "does not serve Responses (HTTP 404); use route='auto'" in row.detail


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize(
    ("misbehaviour", "reason"),
    [
        ({"cut_stream": True}, "stream was cut off"),
        ({"stream_error": "Engine overloaded."}, "Engine overloaded"),
        ({"malformed": True}, "not a JSON object"),
    ],
    ids=["cut-mid-arguments", "error-mid-stream", "malformed"],
)
async def test_broken_streams_fail_the_streaming_row(
    route: str, misbehaviour: dict[str, Any], reason: str
) -> None:
    async with ScriptedServer(misbehaving("ORDER-2002", **misbehaviour)) as srv:
        rows = await suite(srv, route, "read-only call", "streaming")
    assert rows["read-only call"].status == "PASS"
    assert rows["streaming"].status == "FAIL" and reason in rows["streaming"].detail


@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_tolerated_stream_quirks_still_pass(route: str) -> None:
    script = misbehaving(
        "ORDER-2002", arguments_only_in_done=True, novel_events=True, ids_only_first_fragment=True
    )
    async with ScriptedServer(script, split=3) as srv:
        rows = await suite(srv, route, "streaming")
    assert rows["streaming"].status == "PASS", rows["streaming"]
    assert rows["streaming"].detail.startswith('Reassembled {"order_id": "ORDER-2002"} from the stream')


async def test_a_call_without_a_call_id_fails_on_responses() -> None:
    async with ScriptedServer(misbehaving("ORDER-1001", empty_string_id=True)) as srv:
        rows = await suite(srv, "responses", "read-only call")
    assert rows["read-only call"].status == "FAIL"
    assert "function_call without a call_id" in rows["read-only call"].detail


async def test_an_invented_call_fails_the_no_tool_row() -> None:
    invent = misbehaving("2 + 3", lambda _: Step.call("get_delivery_status", {"order_id": "ORDER-0005"}))
    async with ScriptedServer(invent) as srv:
        rows = await suite(srv, "auto", "no tool needed")
    row = rows["no tool needed"]
    assert row.status == "FAIL" and row.detail == (
        "The model proposed get_delivery_status although no tool was needed."
    )


async def test_calls_sharing_one_id_fail_the_several_calls_row() -> None:
    def same_id(step: Step) -> Step:
        return dataclasses.replace(step, tool_calls=[(n, a, "call_same") for n, a, *_ in step.tool_calls])

    async with ScriptedServer(misbehaving("ORDER-3003. Call", same_id)) as srv:
        rows = await suite(srv, "chat", "several calls")
    assert rows["several calls"].status == "FAIL"
    assert "Two calls share the id 'call_same'" in rows["several calls"].detail


async def test_a_model_that_will_not_be_provoked_is_skipped_not_passed() -> None:
    def valid_instead(step: Step) -> Step:
        return Step.call("get_delivery_status", {"order_id": "ORDER-1234"})

    def never_cancels(step: Step) -> Step:
        return Step.reply("I cannot cancel orders.")

    def stubborn(body: dict[str, Any], route: str) -> Step:
        user = [m for m in ScriptedServer.read_transcript(body, route) if isinstance(m, UserMessage)][-1]
        marker, change = (
            ("12345", valid_instead) if "12345" in user.content else ("cancel_order", never_cancels)
        )
        return misbehaving(marker, change)(body, route)  # type: ignore[operator]

    async with ScriptedServer(stubborn) as srv:
        rows = await suite(srv, "chat", "invalid arguments", "unknown function", "several calls")
    assert rows["invalid arguments"].status == "SKIP"
    assert rows["invalid arguments"].detail.startswith(
        'The model sent valid arguments ({"order_id": "ORDER-1234"}) although asked for the order id'
    )
    assert rows["unknown function"].status == "SKIP"
    assert "proposed no cancel_order call" in rows["unknown function"].detail
    assert rows["several calls"].status == "PASS"


async def test_a_retry_with_other_arguments_is_skipped_and_one_write_per_key_holds() -> None:
    seen = 0

    def drifting(body: dict[str, Any], route: str) -> Step:
        nonlocal seen
        step = conforming(body, route)
        if step.tool_calls and step.tool_calls[0][0] == "create_note":
            seen += 1
            if seen == 2:
                return Step.call("create_note", {"text": "something else"})
        return step

    async with ScriptedServer(drifting) as srv:
        rows = await suite(srv, "chat", "repeated request")
    row = rows["repeated request"]
    assert row.status == "SKIP"
    assert 'The retry sent other arguments ({"text": "something else"})' in row.detail


async def test_an_empty_final_answer_fails_the_read_only_row() -> None:
    def silent(body: dict[str, Any], route: str) -> Step:
        step = conforming(body, route)
        return Step() if step.text and step.text.startswith("Here is what I found") else step

    async with ScriptedServer(silent) as srv:
        rows = await suite(srv, "responses", "read-only call")
    assert rows["read-only call"].status == "FAIL"
    assert rows["read-only call"].detail == "The final answer after the result was empty."


async def test_an_endpoint_that_refuses_tools_fails_for_want_of_call_ids() -> None:
    def planner(body: dict[str, Any], route: str) -> Step:
        if "Result of get_delivery_status" in json.dumps(body):
            return Step.reply("ORDER-1001 is in transit.")
        return Step.plan("get_delivery_status", {"order_id": "ORDER-1001"})

    async with ScriptedServer(planner, reject_tools=True) as srv:
        rows = await suite(srv, "chat", "read-only call")
    row = rows["read-only call"]
    assert row.status == "FAIL" and row.route == "jsonplan"
    assert row.detail.startswith("The endpoint refused tools, so the run fell back to the JSON plan")


# --- the command ----------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
    env["TOOLWIRE_API_KEY"] = "sk-conformance-secret"
    return subprocess.run(
        [sys.executable, "-m", "toolwire", "conformance", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_one_row_per_test_and_exits_zero_when_all_pass() -> None:
    with ScriptedServer(conforming) as srv:
        done = run_cli("--base-url", srv.base_url, "--model", "scripted", "--route", "responses")
        sent_keys = {h.get("authorization") for h in srv.headers}
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == f"toolwire conformance: model 'scripted' at {srv.base_url}, route responses"
    assert [line.split("  ")[0] for line in lines[1:-1]] == ["PASS"] * 8
    assert [line[6:].split("  ")[0].strip() for line in lines[1:-1]] == ROW_NAMES
    assert lines[-1] == "8 passed, 0 failed, 0 skipped"
    assert sent_keys == {"Bearer sk-conformance-secret"}
    assert "sk-conformance-secret" not in done.stdout


def test_cli_json_and_a_failing_row_exit_non_zero() -> None:
    with ScriptedServer(misbehaving("ORDER-2002", cut_stream=True)) as srv:
        done = run_cli("--base-url", srv.base_url, "--model", "scripted", "--json", "--row", "streaming")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["summary"] == {"passed": 0, "failed": 1, "skipped": 0}
    assert report["target"] == {"base_url": srv.base_url, "model": "scripted", "route": "auto"}
    [row] = report["rows"]
    assert row["name"] == "streaming" and row["status"] == "FAIL"
    assert "cut off" in row["detail"]


def test_cli_refuses_unknown_routes_and_rows_in_one_sentence() -> None:
    route = run_cli("--base-url", "http://127.0.0.1:9/v1", "--route", "grpc")
    row = run_cli("--base-url", "http://127.0.0.1:9/v1", "--row", "telepathy")
    assert route.returncode == row.returncode == 1
    assert "Route 'grpc' is not known here: use chat, responses or auto." in route.stderr
    assert "No row is named 'telepathy'" in row.stderr
    assert "Traceback" not in route.stderr + row.stderr
