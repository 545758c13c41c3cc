"""`toolwire users`: who may call the service, and their API keys.

`add` prints the new key once; toolwire keeps only its salted hash, so a lost key is replaced with
`rotate-key`, never shown again. The commands work on the database of the settings
(`TOOLWIRE_DATABASE_URL`, or the TOML file of `TOOLWIRE_CONFIG`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from toolwire.store.tables_principals import ApiKey, User

__all__ = ["users_app"]

T = TypeVar("T")

users_app = typer.Typer(
    name="users",
    help="Manage who may call the service: users, their tenants and scopes, and their API keys.",
    no_args_is_help=True,
)

Tenant = Annotated[str, typer.Option(help="The tenant the user belongs to.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _run(work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run `work` in one write transaction on the configured database; errors end the command."""
    from toolwire.exceptions import ToolwireError
    from toolwire.settings import Settings
    from toolwire.store import Database

    async def main() -> T:
        db = await Database.open(Settings.from_env().database_url)
        try:
            async with db.transaction(write=True) as session:
                return await work(session)
        finally:
            await db.aclose()

    try:
        return asyncio.run(main())
    except ToolwireError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=1) from None


async def _named(session: AsyncSession, tenant: str, name: str) -> User:
    from toolwire.store.principals import UserNotFoundError, find_user

    user = await find_user(session, tenant_id=tenant, name=name)
    if user is None:
        raise UserNotFoundError(f"Tenant {tenant!r} has no user named {name!r}; see toolwire users list.")
    return user


def _user_json(user: User, keys: list[ApiKey]) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "tenant_id": user.tenant_id,
        "scopes": list(user.scopes),
        "created_at": user.created_at.isoformat(),
        "keys": [
            {
                "id": k.id,
                "created_at": k.created_at.isoformat(),
                "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
            }
            for k in keys
        ],
    }


@users_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The user's name, unique within its tenant.")],
    tenant: Tenant = "default",
    scopes: Annotated[
        list[str] | None,
        typer.Option("--scopes", help="Scopes, comma-separated or repeated; 'admin' opens the admin API."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Create a user and print its API key (shown only this once)."""
    from toolwire.store.principals import create_user

    async def work(session: AsyncSession) -> dict[str, Any]:
        user, issued = await create_user(session, tenant_id=tenant, name=name, scopes=scopes or ())
        return {"id": user.id, "name": user.name, "tenant_id": user.tenant_id, "scopes": user.scopes} | {
            "key_id": issued.key_id,
            "api_key": issued.key,
        }

    created = _run(work)
    if as_json:
        typer.echo(json.dumps(created))
        return
    shown = ", ".join(created["scopes"]) or "none"
    typer.echo(f"Created user {name} ({created['id']}) in tenant {tenant}; scopes: {shown}.")
    typer.echo("Its API key, shown only now (store it safely; lost keys are replaced with rotate-key):")
    typer.echo(created["api_key"])


@users_app.command("list")
def list_(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's users.")] = None,
    as_json: AsJson = False,
) -> None:
    """List users with their scopes and keys."""
    from toolwire.store.principals import keys_of, list_users

    async def work(session: AsyncSession) -> list[dict[str, Any]]:
        users = await list_users(session, tenant_id=tenant)
        keys = await keys_of(session, [u.id for u in users])
        return [_user_json(u, keys[u.id]) for u in users]

    listed = _run(work)
    if as_json:
        typer.echo(json.dumps(listed))
        return
    if not listed:
        typer.echo("No users yet; create one with: toolwire users add NAME --tenant T --scopes admin")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("tenant", "name", "id", "scopes", "working keys", "created")
    for user in listed:
        working = [k["id"] for k in user["keys"] if k["revoked_at"] is None]
        table.add_row(
            user["tenant_id"],
            user["name"],
            user["id"],
            ", ".join(user["scopes"]),
            ", ".join(working) or "-",
            user["created_at"][:19].replace("T", " "),
        )
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 200  # piped or captured: keep ids whole rather than wrapped at 80 columns
    console.print(table)


@users_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="The user to remove.")],
    tenant: Tenant = "default",
) -> None:
    """Delete a user and its keys (its conversations and data stay)."""
    from toolwire.store.principals import delete_user

    async def work(session: AsyncSession) -> str:
        user = await _named(session, tenant, name)
        await delete_user(session, user)
        return user.id

    user_id = _run(work)
    typer.echo(f"Removed user {name} ({user_id}) from tenant {tenant}; its keys no longer work.")


@users_app.command("rotate-key")
def rotate_key(
    name: Annotated[str, typer.Argument(help="The user whose keys to replace.")],
    tenant: Tenant = "default",
    as_json: AsJson = False,
) -> None:
    """Revoke every key of a user and print a new one (shown only this once)."""
    from toolwire.store.principals import issue_key, revoke_keys

    async def work(session: AsyncSession) -> dict[str, Any]:
        user = await _named(session, tenant, name)
        revoked = await revoke_keys(session, user)
        issued = await issue_key(session, user)
        return {"id": user.id, "revoked": revoked, "key_id": issued.key_id, "api_key": issued.key}

    rotated = _run(work)
    if as_json:
        typer.echo(json.dumps(rotated))
        return
    typer.echo(f"Revoked {rotated['revoked']} key(s) of {name}; the new key, shown only now:")
    typer.echo(rotated["api_key"])
