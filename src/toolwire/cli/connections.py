"""`toolwire connections`: the APIs that HTTP functions call, and how they authenticate.

Credentials are given with `--secret key=value`, or typed at a hidden prompt (read from standard
input when it is not a terminal); they are encrypted before they are stored and never printed again,
not even by `show`. The commands work on the database of the settings (`TOOLWIRE_DATABASE_URL`) and
the key of `TOOLWIRE_SECRET_KEY` (or the key file).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer

if TYPE_CHECKING:
    from toolwire.tools.registry import ConnectionView, FunctionRegistry

__all__ = ["AsJson", "Tenant", "connections_app", "describe", "fail", "with_registry"]

T = TypeVar("T")

connections_app = typer.Typer(
    name="connections",
    help="Manage the API connections of HTTP functions: URL, method, auth and credentials.",
    no_args_is_help=True,
)

Tenant = Annotated[str, typer.Option(help="The tenant the connection or function belongs to.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def fail(message: str) -> NoReturn:
    """End the command with `Error: <message>` on standard error and exit status 1."""
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(code=1)


def describe(exc: Exception) -> str:
    """The one sentence a user reads for an error."""
    from toolwire.tools.http import DefinitionError

    if isinstance(exc, DefinitionError):
        count = len(exc.problems)
        return f"Nothing was saved; fix {'this problem' if count == 1 else f'these {count} problems'}: {exc}"
    return str(exc)


def with_registry(work: Callable[[FunctionRegistry], Awaitable[T]]) -> T:
    """Run `work` with the registry of the configured database; a toolwire error ends the command."""
    from toolwire.assistant import function_registry
    from toolwire.exceptions import ToolwireError
    from toolwire.settings import Settings
    from toolwire.store import Database

    async def main() -> T:
        db = await Database.open(Settings.from_env().database_url)
        try:
            return await work(function_registry(db))
        finally:
            await db.aclose()

    try:
        return asyncio.run(main())
    except ToolwireError as exc:
        fail(describe(exc))


def _secrets(pairs: list[str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            # The value is not repeated: it may be a credential typed in the wrong place.
            fail("Give each --secret as key=value, for example --secret token=...; see --help for the keys.")
        given[key.strip()] = value
    return given


def _ask_secret(key: str, connection: str) -> str:
    """A credential typed at a hidden prompt, or the next line of standard input when it is piped."""
    import sys

    if sys.stdin.isatty():
        value: str = typer.prompt(f"{key} for connection {connection}", hide_input=True, err=True)
        return value
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        fail(f"The connection needs its {key}; give it with --secret {key}=... or on standard input.")
    return line


def _print_connection(view: ConnectionView) -> None:
    auth = dict(view.auth)
    typer.echo(f"name:        {view.name}")
    typer.echo(f"request:     {view.method} {view.url}")
    typer.echo(f"auth:        {auth.pop('type')}")
    for key, value in auth.items():
        typer.echo(f"  {key}: {', '.join(value) if isinstance(value, list) else value}")
    typer.echo(f"credentials: {', '.join(view.secrets_set) or 'none'} (stored encrypted, never shown)")
    typer.echo(f"timeout:     {view.timeout:g}s")
    typer.echo(f"functions:   {', '.join(view.functions) or 'none'}")


@connections_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The connection's name, unique within its tenant.")],
    url: Annotated[str, typer.Option(help="The API endpoint; {name} placeholders may appear in its path.")],
    method: Annotated[str, typer.Option(help="GET, POST, PUT or PATCH.")] = "GET",
    auth: Annotated[
        str,
        typer.Option(help="none, api_key_header, api_key_query, basic, bearer or oauth2_client_credentials."),
    ] = "none",
    header_name: Annotated[str | None, typer.Option(help="The API key's header (api_key_header).")] = None,
    query_name: Annotated[
        str | None, typer.Option(help="The API key's query parameter (api_key_query).")
    ] = None,
    username: Annotated[str | None, typer.Option(help="The user name (basic).")] = None,
    token_url: Annotated[
        str | None, typer.Option(help="The token endpoint (oauth2_client_credentials).")
    ] = None,
    client_id: Annotated[str | None, typer.Option(help="The client id (oauth2_client_credentials).")] = None,
    scope: Annotated[list[str] | None, typer.Option(help="An OAuth2 scope; repeat for several.")] = None,
    token_auth_method: Annotated[
        str, typer.Option(help="client_secret_basic or client_secret_post (oauth2_client_credentials).")
    ] = "client_secret_basic",
    timeout: Annotated[float, typer.Option(help="Seconds to connect and for each read.")] = 10.0,
    secret: Annotated[
        list[str] | None,
        typer.Option(
            help="A credential as key=value (api_key, password, token or client_secret); "
            "missing ones are asked for."
        ),
    ] = None,
    replace: Annotated[
        bool, typer.Option(help="Update the connection if it exists; stored credentials not given are kept.")
    ] = False,
    tenant: Tenant = "default",
    as_json: AsJson = False,
) -> None:
    """Create (or with --replace, update) a connection; credentials are stored encrypted."""
    from toolwire.tools.auth import SECRET_KEYS, AuthConfig
    from toolwire.tools.http import Connection
    from toolwire.tools.registry import NotFoundError

    given = _secrets(secret or [])
    if token_auth_method not in ("client_secret_basic", "client_secret_post"):
        fail("--token-auth-method must be client_secret_basic or client_secret_post.")

    async def work(registry: FunctionRegistry) -> ConnectionView:
        missing = [key for key in SECRET_KEYS.get(auth, ()) if not given.get(key)]
        if missing and replace:
            try:
                stored = await registry.get_connection(tenant, name)
            except NotFoundError:
                stored = None
            if stored is not None and stored.auth["type"] == auth:
                missing = [key for key in missing if key not in stored.secrets_set]
        for key in missing:
            given[key] = _ask_secret(key, name)
        config = AuthConfig(
            type=auth,  # type: ignore[arg-type]  # an unknown type is reported by the checks
            header_name=header_name,
            query_name=query_name,
            username=username,
            token_url=token_url,
            client_id=client_id,
            scopes=tuple(scope or ()),
            token_auth_method=token_auth_method,  # type: ignore[arg-type]  # checked above
            secrets=given,
        )
        connection = Connection(
            name=name,
            url=url,
            method=method.upper(),  # type: ignore[arg-type]  # an unknown method is reported by the checks
            auth=config,
            timeout=timeout,
        )
        return await registry.add_connection(tenant, connection, replace=replace)

    view = with_registry(work)
    if as_json:
        typer.echo(json.dumps(view.to_json()))
        return
    stored = ", ".join(view.secrets_set) or "none"
    typer.echo(
        f"Saved connection {view.name} ({view.auth['type']}, {view.method} {view.url}); "
        f"credentials stored encrypted: {stored}."
    )


@connections_app.command("list")
def list_(tenant: Tenant = "default", as_json: AsJson = False) -> None:
    """List the tenant's connections (credentials are never shown)."""

    async def work(registry: FunctionRegistry) -> list[ConnectionView]:
        return await registry.list_connections(tenant)

    views = with_registry(work)
    if as_json:
        typer.echo(json.dumps([view.to_json() for view in views]))
        return
    if not views:
        typer.echo("No connections yet; create one with: toolwire connections add NAME --url URL --auth TYPE")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "method", "url", "auth", "credentials", "functions")
    for view in views:
        table.add_row(
            view.name,
            view.method,
            view.url,
            str(view.auth["type"]),
            ", ".join(view.secrets_set) or "-",
            ", ".join(view.functions) or "-",
        )
    Console(highlight=False, soft_wrap=True).print(table)


@connections_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The connection to show.")],
    tenant: Tenant = "default",
    as_json: AsJson = False,
) -> None:
    """Show one connection: its settings and which credentials are stored, never their values."""

    async def work(registry: FunctionRegistry) -> ConnectionView:
        return await registry.get_connection(tenant, name)

    view = with_registry(work)
    if as_json:
        typer.echo(json.dumps(view.to_json(), indent=2))
    else:
        _print_connection(view)


@connections_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="The connection to remove.")],
    tenant: Tenant = "default",
) -> None:
    """Delete a connection; refused while functions use it."""

    async def work(registry: FunctionRegistry) -> None:
        await registry.remove_connection(tenant, name)

    with_registry(work)
    typer.echo(f"Removed connection {name} and its stored credentials.")
