"""`toolwire conformance`: run seed 003's evidence table against an OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

__all__ = ["conformance"]

_ROUTES = ("chat", "responses", "auto")
_COLOURS = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}


def _fail(message: str) -> typer.Exit:
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]Error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=1)


def conformance(
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible endpoint to test (env TOOLWIRE_BASE_URL).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name (env TOOLWIRE_MODEL).")] = None,
    route: Annotated[str, typer.Option(help="chat, responses or auto (Chat first, fall back).")] = "auto",
    api_key: Annotated[str | None, typer.Option(help="API key (env TOOLWIRE_API_KEY).")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the table.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each HTTP read.")] = 60.0,
    row: Annotated[
        list[str] | None, typer.Option(help="Run only this row (repeatable), e.g. 'streaming'.")
    ] = None,
) -> None:
    """Check tool calling against an endpoint: one PASS / FAIL / SKIP line per test of the evidence table.

    Exits non-zero when any row fails.
    """
    from toolwire.conformance import ROWS, Target, render_json, render_lines, run_suite
    from toolwire.conformance.report import failed
    from toolwire.exceptions import ToolwireError
    from toolwire.settings import Settings

    if route not in _ROUTES:
        raise _fail(f"Route {route!r} is not known here: use chat, responses or auto.")
    unknown = sorted(set(row or ()) - {name for name, _ in ROWS})
    if unknown:
        raise _fail(f"No row is named {', '.join(map(repr, unknown))}: use {', '.join(n for n, _ in ROWS)}.")
    try:
        settings = Settings.from_env(base_url=base_url, model=model, api_key=api_key)
        if not settings.base_url:
            raise _fail("No endpoint to test: pass --base-url or set TOOLWIRE_BASE_URL.")
        target = Target(
            base_url=settings.base_url,
            model=settings.model,
            route=route,  # type: ignore[arg-type]  # checked against _ROUTES above
            api_key=settings.api_key,
            timeout=timeout,
        )
        rows = asyncio.run(run_suite(target, only=row or ()))
    except ToolwireError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    if as_json:
        typer.echo(json.dumps(render_json(rows, target), ensure_ascii=False))
    else:
        for line in render_lines(rows, target):
            status = line[:4]
            if status in _COLOURS:
                line = typer.style(status, fg=_COLOURS[status], bold=True) + line[4:]
            typer.echo(line)
    if failed(rows):
        raise typer.Exit(code=1)
