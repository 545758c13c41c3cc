"""Seed 003's evidence table, run against any OpenAI-compatible endpoint.

Each row provokes one behaviour with a prompt, runs it through the real `Runner`, `Gate` and
idempotency ledger with the built-in toolset (`toolwire.conformance.toolset`), and reads the
evidence from what came back *and* from the request bodies that went out. A row passes only on
that evidence. When the model does not do what the prompt provokes (it sends valid arguments where
invalid ones were asked for, or proposes no call where one was invited) the row is skipped with
that reason, never passed. An endpoint error fails the row with the error's own sentence, and
every row has a deadline, so the suite never hangs.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx2

from toolwire.conformance.probe import Exchange, Outcome, Probe, Row, Status, Target, recorder
from toolwire.exceptions import RouteUnsupportedError, ToolwireError
from toolwire.gate.ledger import Ledger
from toolwire.messages import CallTrace
from toolwire.models.base import TextDelta
from toolwire.models.openai import clear_route_memory
from toolwire.runner import CallFinished, CallProposed
from toolwire.store.db import Database

__all__ = ["ROWS", "RowCheck", "run_suite"]

RowCheck = Callable[[Probe], Awaitable[Row]]
"""A row of the table: provokes one behaviour and judges the evidence."""

_STATUS = "get_delivery_status"


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _shown(trace: CallTrace) -> str:
    return f"{trace.name}({trace.arguments}) id {trace.call_id}"


def _answered(outcome: Outcome, trace: CallTrace) -> str | None:
    """Why the call's result was not linked to it by id on the wire, or `None` when it was."""
    if outcome.result.route == "jsonplan":
        return (
            "The endpoint refused tools, so the run fell back to the JSON plan, which carries no call "
            "id on the wire; native tool calling is not available there."
        )
    if not trace.call_id:
        return (
            f"The call {trace.name}({trace.arguments}) came without an id, so no result can be joined to it."
        )
    sent = outcome.sent_results().get(trace.call_id, [])
    if sent != [trace.result]:
        found = "no result" if not sent else f"{len(sent)} results, not the call's own"
        return f"The next request carried {found} under the call id {trace.call_id}."
    return None


def _row(name: str, status: Status, detail: str, outcome: Outcome | None = None, **evidence: Any) -> Row:
    route = outcome.result.route if outcome is not None else None
    if outcome is not None:
        evidence.setdefault("answer", outcome.result.answer)
        evidence.setdefault("calls", [_trace_json(t) for t in outcome.result.calls])
    return Row(name=name, status=status, detail=detail, route=route, evidence=evidence)


def _trace_json(trace: CallTrace) -> dict[str, Any]:
    return {
        "call_id": trace.call_id,
        "name": trace.name,
        "arguments": trace.arguments,
        "outcome": trace.outcome,
        "result": trace.result,
        "replayed": trace.replayed,
        "round": trace.round,
    }


async def read_only_call(probe: Probe) -> Row:
    """Name, parsed arguments, call id, result linkage and final text of one read."""
    name = "read-only call"
    outcome = await probe.run("Where is order ORDER-1001? Look it up with get_delivery_status.")
    calls = outcome.calls(_STATUS)
    if not calls:
        return _row(
            name, "FAIL", f"No {_STATUS} call was proposed although the prompt asked for it.", outcome
        )
    trace = calls[0]
    if _parsed(trace.arguments) != {"order_id": "ORDER-1001"} or trace.outcome != "ok":
        detail = f"{_shown(trace)} was answered {trace.outcome}; expected order_id ORDER-1001 and ok."
        return _row(name, "FAIL", detail, outcome)
    if problem := _answered(outcome, trace):
        return _row(name, "FAIL", problem, outcome)
    if not outcome.result.answer.strip():
        return _row(name, "FAIL", "The final answer after the result was empty.", outcome)
    detail = f"{_shown(trace)} -> result sent back under that id; final text {outcome.result.answer[:60]!r}."
    return _row(name, "PASS", detail, outcome)


async def invalid_arguments(probe: Probe) -> Row:
    """Arguments that break the schema get an explicit error and nothing runs."""
    name = "invalid arguments"
    since = len(probe.toolset.executed)
    outcome = await probe.run(
        'Where is order 12345? Call get_delivery_status with order_id "12345" exactly as written; '
        "do not add a prefix or change it."
    )
    calls = outcome.calls(_STATUS)
    refused = [t for t in calls if t.outcome in ("invalid_arguments", "invalid_json")]
    if not refused:
        why = f"sent valid arguments ({calls[0].arguments})" if calls else "proposed no call"
        detail = f"The model {why} although asked for the order id '12345', so validation was not provoked."
        return _row(name, "SKIP", detail, outcome)
    trace = refused[0]
    bad = _parsed(trace.arguments)
    if any(args == bad for args in probe.toolset.runs(_STATUS, since)):
        return _row(
            name, "FAIL", f"{_shown(trace)} was executed although its arguments break the schema.", outcome
        )
    error = (_parsed(trace.result) or {}).get("error") or {}
    if error.get("code") != trace.outcome:
        return _row(name, "FAIL", f"The refusal of {_shown(trace)} does not carry its error code.", outcome)
    if problem := _answered(outcome, trace):
        return _row(name, "FAIL", problem, outcome)
    reason = next((d.get("message") for d in error.get("details") or () if isinstance(d, dict)), "")
    detail = f"{_shown(trace)} refused with {trace.outcome} ({reason}); the tool did not run."
    return _row(name, "PASS", detail, outcome)


async def unknown_function(probe: Probe) -> Row:
    """A name outside the allowlist is refused, and nothing runs."""
    name = "unknown function"
    since = len(probe.toolset.executed)
    outcome = await probe.run(
        "Cancel order ORDER-1001 with the cancel_order tool.", offer=[probe.toolset.offered_only()]
    )
    calls = outcome.calls("cancel_order")
    if not calls:
        detail = "The model proposed no cancel_order call, so the allowlist was not provoked."
        return _row(name, "SKIP", detail, outcome)
    trace = calls[0]
    if probe.toolset.runs("cancel_order", since):
        return _row(name, "FAIL", "cancel_order ran although it is not on the allowlist.", outcome)
    if trace.outcome != "unknown_tool":
        return _row(name, "FAIL", f"{_shown(trace)} was answered {trace.outcome}, not unknown_tool.", outcome)
    if problem := _answered(outcome, trace):
        return _row(name, "FAIL", problem, outcome)
    detail = f"{_shown(trace)} (offered, not allowlisted) refused with unknown_tool; nothing ran."
    return _row(name, "PASS", detail, outcome)


async def no_tool_needed(probe: Probe) -> Row:
    """A question no tool answers gets plain text and no invented call."""
    name = "no tool needed"
    outcome = await probe.run("What is 2 + 3? Reply with just the number; no tool is needed for this.")
    if outcome.result.calls:
        names = ", ".join(t.name for t in outcome.result.calls)
        return _row(name, "FAIL", f"The model proposed {names} although no tool was needed.", outcome)
    answer = outcome.result.answer.strip()
    if not answer:
        return _row(name, "FAIL", "The model answered with neither text nor a call.", outcome)
    detail = f"Plain text {answer[:60]!r} in {outcome.result.rounds} request, no call."
    return _row(name, "PASS", detail, outcome)


async def streaming(probe: Probe) -> Row:
    """Streamed arguments are reassembled whole, under the right id."""
    name = "streaming"
    outcome = await probe.run("Where is order ORDER-2002? Look it up with get_delivery_status.", stream=True)
    if any(x.body.get("stream") is not True for x in outcome.exchanges):
        return _row(name, "FAIL", "A request of the streamed run was not sent with stream: true.", outcome)
    proposed = [e.call for e in outcome.events if isinstance(e, CallProposed) and e.call.name == _STATUS]
    finished = [e.result.call_id for e in outcome.events if isinstance(e, CallFinished)]
    deltas = sum(isinstance(e, TextDelta) for e in outcome.events)
    if not proposed:
        return _row(name, "FAIL", f"No {_STATUS} call was reassembled from the stream.", outcome)
    call = proposed[0]
    if _parsed(call.arguments) != {"order_id": "ORDER-2002"}:
        return _row(name, "FAIL", f"The stream's arguments reassembled as {call.arguments!r}.", outcome)
    trace = next(t for t in outcome.result.calls if t.call_id == call.id)
    if finished.count(call.id) != 1:
        return _row(name, "FAIL", f"The streamed call {call.id} was not answered once by its id.", outcome)
    if problem := _answered(outcome, trace):
        return _row(name, "FAIL", problem, outcome)
    detail = (
        f"Reassembled {call.arguments} from the stream; id {call.id} answered by its result; "
        f"{deltas} text deltas."
    )
    return _row(name, "PASS", detail, outcome, text_deltas=deltas)


async def repeated_request(probe: Probe) -> Row:
    """The same application request twice: one side effect, the retry gets the stored result."""
    name = "repeated request"
    since = len(probe.toolset.executed)
    text = f"conformance-{uuid.uuid4().hex[:8]}"
    request_id = f"conformance-retry-{uuid.uuid4().hex}"
    prompt = f'Save a note with create_note; its text must be exactly "{text}".'
    first = await probe.run(prompt, request_id=request_id)
    second = await probe.run(prompt, request_id=request_id)  # the application retries the request
    one, two = first.calls("create_note"), second.calls("create_note")
    if not one or not two:
        detail = f"The model proposed no create_note call in the {'first' if not one else 'retried'} request."
        return _row(name, "SKIP", detail, second if one else first)
    if one[0].outcome != "ok":
        return _row(name, "FAIL", f"The first {_shown(one[0])} was answered {one[0].outcome}.", first)
    if _parsed(two[0].arguments) != _parsed(one[0].arguments):
        detail = f"The retry sent other arguments ({two[0].arguments}), so it is another write, not a repeat."
        return _row(name, "SKIP", detail, second)
    runs = len(probe.toolset.runs("create_note", since))
    if runs != 1 or not two[0].replayed or two[0].result != one[0].result:
        detail = (
            f"create_note ran {runs} times for one request id; the retry was not given the stored result."
        )
        return _row(name, "FAIL", detail, second, executions=runs)
    detail = (
        f"{_shown(one[0])} ran once; the retry ({two[0].call_id}) got the stored result, marked replayed."
    )
    return _row(name, "PASS", detail, second, executions=runs)


async def several_calls(probe: Probe) -> Row:
    """Several calls in one turn finishing out of order are each joined to their own result."""
    name = "several calls"
    since = len(probe.toolset.completed)
    probe.toolset.stagger = 0.05
    try:
        outcome = await probe.run(
            "Look up the delivery status of ORDER-1001, ORDER-2002 and ORDER-3003. Call "
            "get_delivery_status once per order, all three calls in the same turn."
        )
    finally:
        probe.toolset.stagger = 0.0
    calls = outcome.calls(_STATUS)
    per_round = Counter(t.round for t in calls)
    if max(per_round.values(), default=0) < 2:
        detail = (
            f"The model proposed {len(calls)} call(s), never two in one turn, "
            "so none could finish out of order."
        )
        return _row(name, "SKIP", detail, outcome)
    ids = [t.call_id for t in calls]
    if duplicate := next((i for i in ids if ids.count(i) > 1), None):
        return _row(
            name,
            "FAIL",
            f"Two calls share the id {duplicate!r}; their results cannot be told apart.",
            outcome,
        )
    sent = outcome.sent_results()
    for trace in calls:
        asked = (_parsed(trace.arguments) or {}).get("order_id")
        got = [(_parsed(content) or {}).get("order_id") for content in sent.get(trace.call_id, [])]
        if trace.outcome == "ok" and got != [asked]:
            detail = (
                f"The result sent under {trace.call_id} is for {got or 'nothing'}, "
                f"but that call asked for {asked}."
            )
            return _row(name, "FAIL", detail, outcome)
        if problem := _answered(outcome, trace):
            return _row(name, "FAIL", problem, outcome)
    order = [(_parsed(t.arguments) or {}).get("order_id") for t in calls if t.outcome == "ok"]
    completed = probe.toolset.completed[since:]
    detail = (
        f"{len(calls)} calls proposed {order}, finished {completed}; each result went back under its own id."
    )
    return _row(name, "PASS", detail, outcome, proposed=order, completed=completed)


def _contract(outcome: Outcome) -> list[tuple[Any, ...]]:
    return [
        (t.name, _parsed(t.arguments), t.outcome, _parsed(t.result), t.replayed) for t in outcome.result.calls
    ]


async def route_fallback(probe: Probe) -> Row:
    """Both routes (or the fallback to the served one) give the same model, schema and result contract."""
    name = "route fallback"
    prompt = "Where is order ORDER-3003? Look it up with get_delivery_status."
    runs: dict[str, Outcome] = {}
    unserved: dict[str, RouteUnsupportedError] = {}
    for route in ("chat", "responses"):
        try:
            runs[route] = await probe.run(prompt, route=route)
        except RouteUnsupportedError as exc:
            unserved[route] = exc
    if not runs:
        return _row(name, "FAIL", f"Neither route is served: {unserved['chat']}")
    if unserved:
        [(missing, _)] = unserved.items()
        served = "responses" if missing == "chat" else "chat"
        clear_route_memory(base_url=probe.target.base_url, model=probe.target.model)
        auto = await probe.run(prompt, route="auto")
        if auto.result.route != served:
            return _row(name, "FAIL", f"Route auto answered on {auto.result.route}, not on {served}.", auto)
        tried = next((x for x in auto.exchanges if x.route == missing), None)
        how = f" after {missing} answered HTTP {tried.status}" if tried is not None else ""
        story, pair = f"{missing} is not served; auto answered on {served}{how}", (runs[served], auto)
        routes = f"auto->{served}"
    else:
        story, pair = "both routes are served", (runs["chat"], runs["responses"])
        routes = "chat+responses"
    exchanges: list[Exchange] = [x for outcome in pair for x in outcome.exchanges]
    models = sorted({str(x.body.get("model")) for x in exchanges})
    if models != [probe.target.model]:
        return _row(name, "FAIL", f"The routes sent different model names: {', '.join(models)}.", pair[1])
    schemas = [x.tools() for x in exchanges if x.body.get("tools")]
    if any(schema != schemas[0] for schema in schemas):
        return _row(name, "FAIL", "The tool definitions sent differ between the routes.", pair[1])
    first, second = (_contract(outcome) for outcome in pair)
    if not first or [c[:2] for c in first] != [c[:2] for c in second]:
        detail = (
            "The model proposed different calls (or none) on the two routes, "
            "so their results cannot be compared."
        )
        return _row(name, "SKIP", detail, pair[1], contracts=[first, second])
    if first != second:
        return _row(name, "FAIL", "The same calls got different results on the two routes.", pair[1])
    detail = (
        f"{story}; same model {models[0]!r}, same schema for {len(schemas[0])} tools, "
        f"same result contract for {', '.join(f'{c[0]}({json.dumps(c[1])})' for c in first)}."
    )
    return Row(
        name=name, status="PASS", detail=detail, route=routes, evidence={"contract": [list(c) for c in first]}
    )


ROWS: tuple[tuple[str, RowCheck], ...] = (
    ("read-only call", read_only_call),
    ("invalid arguments", invalid_arguments),
    ("unknown function", unknown_function),
    ("no tool needed", no_tool_needed),
    ("streaming", streaming),
    ("repeated request", repeated_request),
    ("several calls", several_calls),
    ("route fallback", route_fallback),
)
"""Every row of the table, in order: its name and its check."""


async def run_suite(target: Target, *, only: Sequence[str] = ()) -> list[Row]:
    """Run the evidence table against `target`: one `Row` per test, in table order.

    The write tool's ledger lives in a temporary SQLite file, removed afterwards.

    Args:
        target: The endpoint, model and route under test.
        only: Run only the rows with these names (all when empty).
    """
    sent: list[Exchange] = []
    deadline = target.timeout * 6
    with tempfile.TemporaryDirectory(prefix="toolwire-conformance-") as folder:
        db = await Database.open(f"sqlite:///{Path(folder) / 'ledger.db'}")
        try:
            async with httpx2.AsyncClient(
                timeout=httpx2.Timeout(target.timeout), event_hooks={"response": [recorder(sent)]}
            ) as client:
                probe = Probe(target, client, Ledger(db), sent)
                return [
                    await _checked(name, check, probe, deadline)
                    for name, check in ROWS
                    if not only or name in only
                ]
        finally:
            await db.aclose()


async def _checked(name: str, check: RowCheck, probe: Probe, deadline: float) -> Row:
    try:
        async with asyncio.timeout(deadline):
            return await check(probe)
    except TimeoutError:
        return Row(name=name, status="FAIL", detail=f"The row did not finish within {deadline:g} s.")
    except ToolwireError as exc:
        return Row(name=name, status="FAIL", detail=str(exc))
