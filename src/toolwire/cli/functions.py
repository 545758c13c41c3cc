"""`toolwire functions`: HTTP functions the assistant can call, each bound to one connection.

A function is stored from its JSON definition (seed 001: `strict`, `parameters`,
`http_request_body`, optionally `method` and `path`), read from a file or standard input; its name,
description and connection come from options or from the document itself. Every stored function
is a tool of the assistant in the next `toolwire chat`. `test` runs one function and prints the
request exactly as it was sent, credentials masked, and the answer.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer

from toolwire.cli.connections import AsJson, Tenant, fail, with_registry

if TYPE_CHECKING:
    from toolwire.tools.registry import FunctionRegistry, FunctionTestResult, FunctionView

__all__ = ["functions_app"]

functions_app = typer.Typer(
    name="functions",
    help="Manage the HTTP functions the assistant can call: add, list, show, edit, remove, test, import.",
    no_args_is_help=True,
)

Source = Annotated[
    str | None,
    typer.Option("--file", "-f", help="The JSON definition file; '-' for standard input."),
]
Description = Annotated[
    str | None, typer.Option(help="What the function does and when to use it (overrides the document).")
]
ConnectionName = Annotated[
    str | None, typer.Option("--connection", help="The connection to bind to (overrides the document).")
]


def _read_document(source: str) -> Any:
    """The JSON document in a file (or standard input for `-`); a problem ends the command."""
    where = "standard input" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"Cannot read {where} ({getattr(exc, 'strerror', None) or exc}); check the path.")
    if not text.strip():
        fail(f"{where} is empty; give the function's JSON definition there.")
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"The definition in {where} is not valid JSON ({exc}); fix it.")


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        fail(f'--args is not valid JSON ({exc}); give an object such as \'{{"city": "Berlin"}}\'.')
    if not isinstance(value, dict):
        fail('--args must be a JSON object of named arguments, such as \'{"city": "Berlin"}\'.')
    return value


def _saved(view: FunctionView, verb: str) -> str:
    return f"{verb} function {view.name} ({view.method} {view.url}, connection {view.connection})."


@functions_app.command("add")
def add(
    name: Annotated[str | None, typer.Argument(help="The function's name (else the document's).")] = None,
    source: Source = "-",
    description: Description = None,
    connection: ConnectionName = None,
    replace: Annotated[bool, typer.Option(help="Replace a function of the same name.")] = False,
    tenant: Tenant = "default",
    as_json: AsJson = False,
) -> None:
    """Store a function from its JSON definition (a file, or standard input)."""
    from toolwire.tools.registry import function_from_json

    document = _read_document(source or "-")

    async def work(registry: FunctionRegistry) -> FunctionView:
        definition = function_from_json(document, name=name, description=description, connection=connection)
        return await registry.add_function(tenant, definition, replace=replace)

    view = with_registry(work)
    typer.echo(json.dumps(view.to_json()) if as_json else _saved(view, "Saved"))


@functions_app.command("list")
def list_(tenant: Tenant = "default", as_json: AsJson = False) -> None:
    """List the tenant's functions."""

    async def work(registry: FunctionRegistry) -> list[FunctionView]:
        return await registry.list_functions(tenant)

    views = with_registry(work)
    if as_json:
        typer.echo(json.dumps([view.to_json() for view in views]))
        return
    if not views:
        typer.echo(
            "No functions yet; add one with: toolwire functions add NAME --connection C < definition.json"
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "connection", "request", "description")
    for view in views:
        summary = view.description.splitlines()[0] if view.description else ""
        table.add_row(view.name, view.connection, f"{view.method} {view.url}", summary)
    Console(highlight=False, soft_wrap=True).print(table)


@functions_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The function to show.")],
    tenant: Tenant = "default",
) -> None:
    """Print a function as JSON; `functions add` accepts this document back."""

    async def work(registry: FunctionRegistry) -> FunctionView:
        return await registry.get_function(tenant, name)

    typer.echo(json.dumps(with_registry(work).to_json(), indent=2, ensure_ascii=False))


@functions_app.command("edit")
def edit(
    name: Annotated[str, typer.Argument(help="The function to change.")],
    source: Source = None,
    description: Description = None,
    connection: ConnectionName = None,
    rename: Annotated[str | None, typer.Option(help="Give the function a new name.")] = None,
    tenant: Tenant = "default",
) -> None:
    """Change a function: its definition (--file, or $EDITOR without options), description or connection."""
    from toolwire.tools.registry import function_from_json

    async def current(registry: FunctionRegistry) -> FunctionView:
        return await registry.get_function(tenant, name)

    document: Any = None
    if source is not None:
        document = _read_document(source)
    elif description is None and connection is None and rename is None:
        shown = json.dumps(with_registry(current).to_json(), indent=2, ensure_ascii=False)
        edited = click.edit(shown, extension=".json")
        if edited is None or edited.strip() == shown.strip():
            typer.echo(f"Nothing changed; function {name} is as it was.")
            return
        try:
            document = json.loads(edited)
        except ValueError as exc:
            fail(f"The edited definition is not valid JSON ({exc}); nothing was saved.")

    async def work(registry: FunctionRegistry) -> FunctionView:
        stored = await registry.get_definition(tenant, name)
        if document is not None:
            changed = function_from_json(
                document, name=rename, description=description, connection=connection, fallback=stored
            )
        else:
            changed = dataclasses.replace(
                stored,
                name=rename or stored.name,
                description=description or stored.description,
                connection=connection or stored.connection,
            )
        return await registry.update_function(tenant, name, changed)

    typer.echo(_saved(with_registry(work), "Updated"))


@functions_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="The function to remove.")],
    tenant: Tenant = "default",
) -> None:
    """Delete a function; the assistant no longer offers it."""

    async def work(registry: FunctionRegistry) -> None:
        await registry.remove_function(tenant, name)

    with_registry(work)
    typer.echo(f"Removed function {name}.")


def _print_test(result: FunctionTestResult) -> None:
    request = result.request
    if request is None:
        typer.echo("Nothing was sent.")
    else:
        typer.echo(f"{request.method} {request.url}")
        for header, value in request.headers.items():
            typer.echo(f"{header}: {value}")
        if request.body is not None:
            typer.echo("")
            typer.echo(json.dumps(request.body, indent=2, ensure_ascii=False))
    if result.status is not None:
        typer.echo("")
        typer.echo(f"HTTP {result.status}")
        try:
            typer.echo(json.dumps(json.loads(result.response), indent=2, ensure_ascii=False))
        except ValueError:
            typer.echo(result.response)


@functions_app.command("test")
def test(
    name: Annotated[str, typer.Argument(help="The function to run.")],
    args: Annotated[str, typer.Option("--args", help="The arguments as a JSON object.")] = "{}",
    tenant: Tenant = "default",
    as_json: AsJson = False,
) -> None:
    """Run a function once with the given arguments; show the request sent (auth masked) and the answer."""
    arguments = _arguments(args)

    async def work(registry: FunctionRegistry) -> FunctionTestResult:
        return await registry.test_function(tenant, name, arguments)

    result = with_registry(work)
    if as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        _print_test(result)
    if result.error is not None:
        details = result.error.get("details") or []
        listed = "; ".join(
            f"{d['path']}: {d['message']}" for d in details if isinstance(d, dict) and "path" in d
        )
        fail(f"{result.error['message']}{f' ({listed})' if listed else ''}")


def _openapi_document(spec: str) -> dict[str, Any]:
    from toolwire.exceptions import UserError
    from toolwire.tools.openapi import load_openapi

    if spec.startswith(("http://", "https://")):
        import httpx2

        try:
            response = httpx2.get(spec, timeout=30, follow_redirects=True)
            response.raise_for_status()
            document = response.json()
        except (httpx2.HTTPError, ValueError) as exc:
            fail(f"Cannot load the OpenAPI document from {spec} ({exc}); check the URL.")
        if not isinstance(document, dict):
            fail(f"{spec} does not hold an OpenAPI object; check the URL.")
        return document
    try:
        return load_openapi(spec)
    except OSError as exc:
        fail(f"Cannot read {spec} ({exc.strerror or exc}); check the path.")
    except UserError as exc:
        fail(str(exc))


@functions_app.command("import-openapi")
def import_openapi(
    spec: Annotated[str, typer.Argument(help="The OpenAPI 3 document: a JSON (or YAML) file, or its URL.")],
    connection: Annotated[
        str, typer.Option("--connection", help="The connection every function is bound to.")
    ],
    replace: Annotated[bool, typer.Option(help="Replace functions of the same names.")] = False,
    tenant: Tenant = "default",
    as_json: AsJson = False,
) -> None:
    """Create one function per operation of an OpenAPI 3 document, all on one connection."""
    document = _openapi_document(spec)

    async def work(registry: FunctionRegistry) -> tuple[list[FunctionView], list[tuple[str, str]]]:
        return await registry.import_openapi(tenant, document, connection=connection, replace=replace)

    views, skipped = with_registry(work)
    if as_json:
        out = {
            "functions": [v.to_json() for v in views],
            "skipped": [{"where": w, "why": y} for w, y in skipped],
        }
        typer.echo(json.dumps(out))
        return
    for view in views:
        typer.echo(_saved(view, "Imported"))
    for where, why in skipped:
        typer.echo(f"Skipped {where}: {why}", err=True)
    if not views:
        fail("No operation of the document could be imported; see the reasons above.")
