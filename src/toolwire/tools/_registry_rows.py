"""The function registry's rows: lookups by tenant and name, and conversions to connections and views.

A connection row's `auth` JSON holds the non-secret settings and, under `secrets_set`, the names
of the stored credentials; their values are only in the encrypted `secrets` column.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from toolwire.exceptions import UserError
from toolwire.store.tables_functions import ConnectionRow, FunctionRow
from toolwire.tools._http_check import Method, Problem
from toolwire.tools._registry_views import (
    ConnectionView,
    FunctionView,
    auth_config,
    auth_settings,
    request_url,
)
from toolwire.tools.auth import SECRET_KEYS
from toolwire.tools.http import Connection, DefinitionError, FunctionDefinition

__all__ = [
    "AlreadyExistsError",
    "ConnectionInUseError",
    "NotFoundError",
    "bound_functions",
    "connection_of",
    "connection_row",
    "connection_view",
    "definition_of",
    "find_connection",
    "find_function",
    "flush",
    "function_row",
    "function_view",
    "joined",
    "prefixed",
    "stored_auth",
    "validate_connection",
    "with_secrets",
]

_CONNECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SECRETS_SET = "secrets_set"
# A stand-in for stored credentials when a function is checked against its connection: the checks
# need to know which credentials are set, never their values, so saving needs no key.
_STORED = "[stored]"


class NotFoundError(UserError):
    """No connection or function of that name exists in the tenant."""


class AlreadyExistsError(UserError):
    """A connection or function of that name already exists in the tenant."""


class ConnectionInUseError(UserError):
    """A connection cannot be removed while functions are bound to it."""


def prefixed(prefix: str, problems: Iterable[Problem]) -> list[Problem]:
    """The problems with `prefix.` in front of each path."""
    return [(f"{prefix}.{path}", what) for path, what in problems]


async def flush(session: AsyncSession, kind: str, name: str) -> None:
    """Flush, turning a unique-name violation (a concurrent writer) into `AlreadyExistsError`."""
    try:
        await session.flush()
    except IntegrityError:
        raise AlreadyExistsError(
            f"A {kind} named {name!r} already exists; choose another name or replace it."
        ) from None


async def find_connection(session: AsyncSession, tenant_id: str, name: str) -> ConnectionRow | None:
    """The tenant's connection called `name`, or `None`."""
    return await session.scalar(
        select(ConnectionRow).where(ConnectionRow.tenant_id == tenant_id, ConnectionRow.name == name)
    )


async def connection_row(session: AsyncSession, tenant_id: str, name: str) -> ConnectionRow:
    """The tenant's connection called `name`, or `NotFoundError`."""
    row = await find_connection(session, tenant_id, name)
    if row is None:
        raise NotFoundError(
            f"There is no connection named {name!r}; check the name against the list of connections."
        )
    return row


async def find_function(session: AsyncSession, tenant_id: str, name: str) -> FunctionRow | None:
    """The tenant's function called `name`, or `None`."""
    return await session.scalar(
        select(FunctionRow).where(FunctionRow.tenant_id == tenant_id, FunctionRow.name == name)
    )


async def function_row(session: AsyncSession, tenant_id: str, name: str) -> FunctionRow:
    """The tenant's function called `name`, or `NotFoundError`."""
    row = await find_function(session, tenant_id, name)
    if row is None:
        raise NotFoundError(
            f"There is no function named {name!r}; check the name against the list of functions."
        )
    return row


async def bound_functions(session: AsyncSession, row: ConnectionRow) -> list[FunctionRow]:
    """The functions bound to a connection, by name."""
    query = select(FunctionRow).where(FunctionRow.connection_id == row.id).order_by(FunctionRow.name)
    return list((await session.scalars(query)).all())


def joined(tenant_id: str) -> Select[FunctionRow, ConnectionRow]:
    """Every function of the tenant with its connection, by name."""
    return (
        select(FunctionRow, ConnectionRow)
        .join(ConnectionRow, FunctionRow.connection_id == ConnectionRow.id)
        .where(FunctionRow.tenant_id == tenant_id)
        .order_by(FunctionRow.name)
    )


def definition_of(row: FunctionRow, connection: str) -> FunctionDefinition:
    """The stored definition, bound to the connection called `connection`."""
    return FunctionDefinition.from_json(
        name=row.name, description=row.description, definition=row.definition, connection=connection
    )


def connection_of(row: ConnectionRow, secrets: dict[str, str] | None) -> Connection:
    """The `Connection` of a row; with `secrets=None`, stand-ins for the stored credentials."""
    settings = dict(row.auth)
    names = settings.pop(_SECRETS_SET, [])
    values = secrets if secrets is not None else dict.fromkeys(names, _STORED)
    method: Method = row.method  # type: ignore[assignment]  # checked when it was saved
    return Connection(
        name=row.name,
        url=row.url,
        method=method,
        auth=auth_config(row.auth_type, settings, values),
        timeout=row.timeout,
    )


def with_secrets(connection: Connection, kept: Mapping[str, str]) -> Connection:
    """`connection` with only the credentials its auth type uses, stored ones (`kept`) filling gaps."""
    given = connection.auth.secrets
    secrets = {k: given.get(k) or kept.get(k, "") for k in SECRET_KEYS.get(connection.auth.type, ())}
    auth = dataclasses.replace(connection.auth, secrets={k: v for k, v in secrets.items() if v})
    return dataclasses.replace(connection, auth=auth)


def stored_auth(connection: Connection) -> dict[str, Any]:
    """What the `auth` column holds: the non-secret settings and the names of the credentials."""
    return {**auth_settings(connection.auth), _SECRETS_SET: sorted(connection.auth.secrets)}


def validate_connection(connection: Connection) -> None:
    """Raise `DefinitionError` naming every problem of a connection about to be saved."""
    problems = connection.problems()
    if connection.name.strip() and not _CONNECTION_NAME.fullmatch(connection.name):
        problems.insert(
            0, ("name", "use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit")
        )
    if problems:
        raise DefinitionError(problems)


def connection_view(row: ConnectionRow, functions: list[str]) -> ConnectionView:
    """The row as shown: settings, names of the stored credentials, bound functions."""
    settings = dict(row.auth)
    secrets_set = list(settings.pop(_SECRETS_SET, []))
    method: Method = row.method  # type: ignore[assignment]  # checked when it was saved
    return ConnectionView(
        name=row.name,
        url=row.url,
        method=method,
        auth={"type": row.auth_type, **settings},
        timeout=row.timeout,
        secrets_set=secrets_set,
        functions=functions,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def function_view(row: FunctionRow, connection: ConnectionRow) -> FunctionView:
    """The row as shown, with the method and URL template a call uses."""
    definition = definition_of(row, connection.name)
    method: Method = definition.method or connection.method  # type: ignore[assignment]
    return FunctionView(
        name=row.name,
        description=row.description,
        connection=connection.name,
        definition=definition.to_json(),
        method=method,
        url=request_url(connection.url, definition.path),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
