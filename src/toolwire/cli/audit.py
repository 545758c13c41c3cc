"""`toolwire audit`: list the audit records of tool calls, newest first, with filters."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from toolwire.gate.audit import AuditRecord

__all__ = ["audit", "parse_since", "record_json"]

_RELATIVE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """A moment from `30m`, `2h`, `7d`, `1w` (that long ago) or an ISO date or date-time.

    A date or date-time without a time zone is read as UTC.

    Raises:
        typer.BadParameter: the text is neither.
    """
    match = _RELATIVE.match(text)
    if match:
        amount, unit = int(match[1]), _UNITS[match[2]]
        return (now or dt.datetime.now(dt.UTC)) - dt.timedelta(**{unit: amount})
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a time: use 30m, 2h, 7d, 1w, or a date such as 2026-01-31 or 2026-01-31T08:00Z."
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def record_json(record: AuditRecord) -> dict[str, Any]:
    """One audit record as JSON, for `--json`."""
    return {
        "at": record.at.isoformat(),
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "request_id": record.request_id,
        "call_id": record.call_id,
        "tool": record.tool,
        "arguments_digest": record.arguments_digest,
        "arguments": record.arguments,
        "outcome": record.outcome,
        "duration_ms": record.duration_ms,
        "replayed": record.replayed,
        "idempotency_key": record.idempotency_key,
    }


async def _query(database_url: str | None, filters: dict[str, Any]) -> list[AuditRecord]:
    from toolwire.gate.audit import AuditLog
    from toolwire.settings import Settings
    from toolwire.store import Database, default_database_url

    url = database_url or Settings.from_env().database_url or default_database_url()
    async with await Database.open(url) as db:
        return await AuditLog(db).query(**filters)


def _print_table(records: list[AuditRecord]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not records:
        console.print("No audit records match.")
        return
    table = Table("time (UTC)", "request", "user", "tool", "outcome", "ms", "arguments")
    for record in records:
        outcome = record.outcome if record.outcome == "ok" else f"[red]{record.outcome}[/]"
        if record.replayed:
            outcome += " [yellow](replayed)[/]"
        table.add_row(
            record.at.strftime("%Y-%m-%d %H:%M:%S"),
            record.request_id,
            f"{record.tenant_id}/{record.user_id}",
            record.tool,
            outcome,
            f"{record.duration_ms:.1f}",
            record.arguments_digest[:12],
        )
    console.print(table)


def audit(
    user: Annotated[str | None, typer.Option(help="Only this user's calls.")] = None,
    tool: Annotated[str | None, typer.Option(help="Only calls of this tool.")] = None,
    outcome: Annotated[
        str | None, typer.Option(help="Only this outcome: ok, forbidden, tool_error, outcome_unknown...")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only calls since then: 30m, 2h, 7d, or a date such as 2026-01-31.")
    ] = None,
    request_id: Annotated[str | None, typer.Option(help="Only the calls of this request.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's calls.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many records.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per record.")] = False,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="The database URL (default: env TOOLWIRE_DATABASE_URL, else the local SQLite file)."
        ),
    ] = None,
) -> None:
    """List the audit records of tool calls, newest first."""
    from toolwire.exceptions import ToolwireError

    filters = {
        "user_id": user,
        "tool": tool,
        "outcome": outcome,
        "since": parse_since(since) if since is not None else None,
        "request_id": request_id,
        "tenant_id": tenant,
        "limit": limit,
    }
    try:
        records = asyncio.run(_query(database_url, filters))
    except ToolwireError as exc:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]Error:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    if as_json:
        for record in records:
            sys.stdout.write(json.dumps(record_json(record), ensure_ascii=False) + "\n")
        return
    _print_table(records)
