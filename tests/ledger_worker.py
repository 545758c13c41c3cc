"""Bookkeeping requests in a process of their own, for the exactly-once tests (and their fixtures).

    python tests/ledger_worker.py ROLE --url URL [--schema NAME] --request-id ID --marker PATH [--tasks N]

Roles:
    concurrent        write PATH.ready, wait for PATH.go, then run N identical requests at once;
                      print one JSON line per request
    crash-mid-write   run one request; when the ledger is about to record the result (the item is
                      inserted, not committed) write PATH and hang, waiting to be killed
    crash-after-write run one request; once the write is committed, before the model sees the
                      result, write PATH and hang
    crash-mid-claimed call `send_note` (a write outside the database, not transactional): append a
                      line to PATH.notes, write PATH and hang
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import event

from pg import database
from toolwire.context import Context
from toolwire.demo.bookkeeping import bookkeeping_toolbox
from toolwire.gate import AuditLog, CheckedCall, Gate, Ledger
from toolwire.messages import ToolCall, ToolResult
from toolwire.runner import Runner, RunResult
from toolwire.store import Database
from toolwire.testing import FunctionModel, ModelRequest, reply
from toolwire.tools import Toolbox, tool

BOOKING = {"category": "food", "amount": 12.5, "title": "Lunch", "date": "2024-05-15"}
"""What the scripted user asks to book, every time."""
ROOT = Path(__file__).resolve().parent


def booking_model(arguments: dict[str, Any] | None = None) -> FunctionModel:
    """A model that proposes one `create_item` (a new call id each time), then answers from its result."""

    def turn(request: ModelRequest) -> Any:
        last = request.transcript[-1]
        if isinstance(last, ToolResult):
            payload = json.loads(last.content)
            if "item" in payload:
                return f"Booked entry #{payload['item']['id']}."
            return f"That did not work: {payload['error']['code']}."
        call = ToolCall(
            id=f"call_{uuid.uuid4().hex[:12]}", name="create_item", arguments=json.dumps(arguments or BOOKING)
        )
        return reply(None, call)

    return FunctionModel(turn)


def bookkeeping_gate(db: Database, *, ledger: Ledger | None = None) -> Gate:
    """The bookkeeping tools behind a Gate with a ledger and an audit log on `db`."""
    return Gate(bookkeeping_toolbox(), ledger=ledger or Ledger(db), audit=AuditLog(db))


async def book(db: Database, request_id: str, gate: Gate | None = None) -> RunResult:
    """One application request: "book my lunch", answered by the scripted model."""
    gate = gate or bookkeeping_gate(db)
    runner = Runner(booking_model(), gate.toolbox, gate=gate)
    context = Context(user_id="alice", tenant_id="acme", request_id=request_id, extra={"db": db})
    return await runner.run("Book 12.50 for lunch", context=context)


def outcome(result: RunResult) -> dict[str, Any]:
    """What a test needs to know about one request, as JSON."""
    trace = result.calls[0]
    payload = json.loads(trace.result)
    item = payload.get("item", {}).get("id")
    return {"outcome": trace.outcome, "replayed": trace.replayed, "item": item, "answer": result.answer}


@tool(effect="write", timeout=None)
async def send_note(ctx: Context, text: str) -> str:
    """Send a note to the team (a write outside the database).

    Args:
        ctx: The run's context.
        text: What to send.
    """
    await asyncio.to_thread(append, Path(ctx.extra["notes"]), text + "\n")
    if ctx.extra.get("hang"):
        await asyncio.to_thread(hang, ctx.extra["hang"])
    return "sent"


def append(path: Path, text: str) -> None:
    """Add `text` at the end of the file."""
    with path.open("a") as file:
        file.write(text)


def ready_and_wait(marker: Path) -> None:
    """Say we are ready to start, and wait until told to go."""
    Path(f"{marker}.ready").write_text("ready")
    while not Path(f"{marker}.go").exists():
        time.sleep(0.005)


def hang(marker: str) -> None:
    """Say where we are, then wait to be killed."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(3600)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role")
    parser.add_argument("--url", required=True)
    parser.add_argument("--schema")
    parser.add_argument("--request-id", required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--tasks", type=int, default=1)
    args = parser.parse_args(argv)
    db = database(args.url, args.schema)
    try:
        if args.role == "concurrent":
            await asyncio.to_thread(ready_and_wait, Path(args.marker))
            results = await asyncio.gather(*(book(db, args.request_id) for _ in range(args.tasks)))
            for result in results:
                print(json.dumps(outcome(result)), flush=True)
        elif args.role == "crash-mid-write":

            def before(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
                if statement.lstrip().upper().startswith("UPDATE LEDGER"):
                    hang(args.marker)

            event.listen(db.engine.sync_engine, "before_cursor_execute", before)
            await book(db, args.request_id)
        elif args.role == "crash-after-write":

            class StopsAfterTheWrite(Gate):
                async def execute(
                    self, checked: CheckedCall, context: Context, *, occurrence: int = 0
                ) -> ToolResult:
                    result = await super().execute(checked, context, occurrence=occurrence)
                    hang(args.marker)
                    return result

            gate = StopsAfterTheWrite(bookkeeping_toolbox(), ledger=Ledger(db), audit=AuditLog(db))
            await book(db, args.request_id, gate)
        elif args.role == "crash-mid-claimed":
            gate = Gate(Toolbox([send_note]), ledger=Ledger(db, default_lease=1.0, lease_margin=0.5))
            context = Context(
                request_id=args.request_id, extra={"notes": args.marker + ".notes", "hang": args.marker}
            )
            call = ToolCall(id="call_first", name="send_note", arguments='{"text": "invoice sent"}')
            await gate.run(call, context)
        else:
            raise SystemExit(f"unknown role {args.role!r}")
    finally:
        await db.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
