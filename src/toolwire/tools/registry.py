"""The function registry: HTTP functions and their connections, stored per tenant.

Everything is checked as it is saved: a connection with `Connection.validate`, a function with
`FunctionDefinition.validate` against its connection, and a changed connection against every
function bound to it, so a stored function can always be offered to a model. Problems are raised
together as one `DefinitionError` naming the JSON path of each.

Credential values go in, and come out only inside `Connection`s built for a call (`resolve`,
`load_tools`): every view the registry returns names the stored credentials (`secrets_set`) and
never shows their values. Saving a connection again without a credential keeps the stored one, so
a URL can be changed without typing the password again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import httpx2
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from toolwire.context import Context
from toolwire.store.db import Database
from toolwire.store.secrets import SecretBox
from toolwire.store.tables import utc_now
from toolwire.store.tables_functions import ConnectionRow, FunctionRow
from toolwire.tools import _registry_rows as rows
from toolwire.tools._http_check import Problem
from toolwire.tools._registry_connections import ConnectionStore
from toolwire.tools._registry_rows import AlreadyExistsError, ConnectionInUseError, NotFoundError
from toolwire.tools._registry_run import run_test
from toolwire.tools._registry_views import (
    ConnectionView,
    FunctionTestResult,
    FunctionView,
    function_from_json,
)
from toolwire.tools.auth import connection_auth
from toolwire.tools.base import Tool
from toolwire.tools.http import Connection, DefinitionError, FunctionDefinition, http_tool
from toolwire.tools.openapi import import_openapi

__all__ = [
    "AlreadyExistsError",
    "ConnectionInUseError",
    "ConnectionView",
    "FunctionRegistry",
    "FunctionTestResult",
    "FunctionView",
    "NotFoundError",
    "function_from_json",
]

logger = logging.getLogger(__name__)


class _TenantBound:
    """A stored function's handler that runs only for the tenant the function belongs to."""

    def __init__(self, handler: Any, tenant_id: str) -> None:
        self.handler = handler
        self.tenant_id = tenant_id

    async def __call__(self, arguments: dict[str, Any], context: Context) -> Any:
        if context.tenant_id != self.tenant_id:
            raise PermissionError("This function belongs to another tenant and cannot run here.")
        return await self.handler(arguments, context)


class FunctionRegistry(ConnectionStore):
    """Stores connections and HTTP functions per tenant, and builds the tools of a tenant.

    Args:
        db: The database (migrated).
        secrets: Encrypts credentials before they are stored and decrypts them for a call.
        reserved: Tool names a stored function may not take (the built-in tools').

    The connection methods (`add_connection`, `update_connection`, `get_connection`,
    `list_connections`, `remove_connection`) come from `ConnectionStore`.

    Example:
        ```python
        registry = FunctionRegistry(db, SecretBox.from_env())
        await registry.add_connection("acme", connection)
        await registry.add_function("acme", definition)
        tools = await registry.load_tools("acme", client)
        ```
    """

    def __init__(self, db: Database, secrets: SecretBox, *, reserved: Collection[str] = ()) -> None:
        super().__init__(db, secrets)
        self.reserved = frozenset(reserved)

    # --- functions ---------------------------------------------------------------------------

    async def add_function(
        self, tenant_id: str, definition: FunctionDefinition, *, replace: bool = False
    ) -> FunctionView:
        """Store a new function; with `replace`, an existing one of that name is replaced.

        Raises:
            DefinitionError: the definition has problems (its connection missing among them).
            AlreadyExistsError: the name is taken and `replace` is false.
        """
        [view] = await self.add_functions(tenant_id, [definition], replace=replace)
        return view

    async def add_functions(
        self, tenant_id: str, definitions: Iterable[FunctionDefinition], *, replace: bool = False
    ) -> list[FunctionView]:
        """Store several functions in one transaction: all of them, or none.

        Raises:
            DefinitionError: a definition has problems; with several, each path starts with its name.
            AlreadyExistsError: a name is taken and `replace` is false.
        """
        definitions = list(definitions)
        views = []
        async with self.db.transaction(write=True) as session:
            for definition in definitions:
                connection = await self._checked(session, tenant_id, definition, many=len(definitions) > 1)
                row = await rows.find_function(session, tenant_id, definition.name)
                if row is not None and not replace:
                    raise AlreadyExistsError(
                        f"A function named {definition.name!r} already exists; "
                        "choose another name or replace it."
                    )
                if row is None:
                    row = FunctionRow(
                        tenant_id=tenant_id,
                        name=definition.name,
                        description=definition.description,
                        definition=definition.to_json(),
                        connection_id=connection.id,
                    )
                    session.add(row)
                else:
                    _set_function(row, definition, connection)
                await rows.flush(session, "function", definition.name)
                views.append(rows.function_view(row, connection))
        return views

    async def import_openapi(
        self, tenant_id: str, document: Mapping[str, Any], *, connection: str, replace: bool = False
    ) -> tuple[list[FunctionView], list[tuple[str, str]]]:
        """Store one function per operation of an OpenAPI 3 document, all bound to `connection`.

        Returns:
            The stored functions, and each operation left out with the reason (`(where, why)`).

        Raises:
            NotFoundError: there is no connection called `connection`.
            OpenAPIError: the document is not OpenAPI 3, or has no paths.
            AlreadyExistsError: a function name is taken and `replace` is false; nothing is stored.
        """
        async with self.db.transaction() as session:
            target = rows.connection_of(await rows.connection_row(session, tenant_id, connection), None)
        imported = import_openapi(document, connection=target)
        taken = [f for f in imported.functions if f.name in self.reserved]
        skipped = imported.skipped + [(f.name, "the name of a built-in tool") for f in taken]
        wanted = [f for f in imported.functions if f not in taken]
        return await self.add_functions(tenant_id, wanted, replace=replace), skipped

    async def update_function(
        self, tenant_id: str, name: str, definition: FunctionDefinition
    ) -> FunctionView:
        """Replace the function called `name` (renaming it when `definition.name` differs).

        Raises:
            NotFoundError: there is none of that name.
            AlreadyExistsError: the new name is taken by another function.
            DefinitionError: the definition has problems.
        """
        async with self.db.transaction(write=True) as session:
            row = await rows.function_row(session, tenant_id, name)
            if definition.name != name and await rows.find_function(session, tenant_id, definition.name):
                raise AlreadyExistsError(
                    f"A function named {definition.name!r} already exists; choose another name."
                )
            connection = await self._checked(session, tenant_id, definition)
            _set_function(row, definition, connection)
            await rows.flush(session, "function", definition.name)
            return rows.function_view(row, connection)

    async def get_function(self, tenant_id: str, name: str) -> FunctionView:
        """The function called `name`.

        Raises:
            NotFoundError: there is none.
        """
        async with self.db.transaction() as session:
            row = await rows.function_row(session, tenant_id, name)
            return rows.function_view(row, await session.get_one(ConnectionRow, row.connection_id))

    async def get_definition(self, tenant_id: str, name: str) -> FunctionDefinition:
        """The stored definition of the function called `name`, to edit it.

        Raises:
            NotFoundError: there is none.
        """
        async with self.db.transaction() as session:
            row = await rows.function_row(session, tenant_id, name)
            connection = await session.get_one(ConnectionRow, row.connection_id)
            return rows.definition_of(row, connection.name)

    async def list_functions(self, tenant_id: str) -> list[FunctionView]:
        """Every function of the tenant, by name."""
        async with self.db.transaction() as session:
            found = (await session.execute(rows.joined(tenant_id))).all()
        return [rows.function_view(function, connection) for function, connection in found]

    async def remove_function(self, tenant_id: str, name: str) -> None:
        """Delete the function called `name`.

        Raises:
            NotFoundError: there is none.
        """
        async with self.db.transaction(write=True) as session:
            await session.delete(await rows.function_row(session, tenant_id, name))

    # --- use -----------------------------------------------------------------------------------

    async def resolve(self, tenant_id: str, name: str) -> tuple[FunctionDefinition, Connection]:
        """The function called `name` and its connection with the credentials decrypted, for a call.

        Raises:
            NotFoundError: there is none.
            SecretKeyError: the credentials cannot be decrypted with the configured key.
        """
        async with self.db.transaction() as session:
            row = await rows.function_row(session, tenant_id, name)
            connection = await session.get_one(ConnectionRow, row.connection_id)
        secrets = self.secrets.decrypt(connection.secrets)
        return rows.definition_of(row, connection.name), rows.connection_of(connection, secrets)

    async def load_tools(self, tenant_id: str, client: httpx2.AsyncClient) -> list[Tool]:
        """Every function of the tenant as a Tool for the assistant, calling out through `client`.

        The functions of one connection share one auth flow, so an OAuth2 token is shared too. A
        stored function that no longer passes its checks is left out with a warning in the log.
        The tools run only for a `Context` of this tenant.

        Raises:
            SecretKeyError: the credentials cannot be decrypted with the configured key.
        """
        async with self.db.transaction() as session:
            found = (await session.execute(rows.joined(tenant_id))).all()
        connections: dict[int, Connection] = {}
        auths = {}
        tools = []
        for function, row in found:
            if row.id not in connections:
                connection = rows.connection_of(row, self.secrets.decrypt(row.secrets))
                connections[row.id] = connection
                auths[row.id] = connection_auth(connection.auth, timeout=connection.timeout)
            definition = rows.definition_of(function, row.name)
            try:
                tool = http_tool(definition, connections[row.id], client=client, auth=auths[row.id])
            except DefinitionError as exc:
                logger.warning("Stored function %r is left out: %s", function.name, exc)
                continue
            tools.append(dataclasses.replace(tool, handler=_TenantBound(tool.handler, tenant_id)))
        return tools

    async def version(self, tenant_id: str) -> tuple[Any, ...]:
        """A value that changes whenever the tenant's functions or connections change."""
        async with self.db.transaction() as session:
            functions = await session.execute(
                select(func.count(), func.max(FunctionRow.updated_at)).where(
                    FunctionRow.tenant_id == tenant_id
                )
            )
            connections = await session.execute(
                select(func.count(), func.max(ConnectionRow.updated_at)).where(
                    ConnectionRow.tenant_id == tenant_id
                )
            )
            return (*functions.one(), *connections.one())

    async def test_function(
        self,
        tenant_id: str,
        name: str,
        arguments: Mapping[str, Any],
        *,
        max_response_bytes: int | None = None,
    ) -> FunctionTestResult:
        """Execute the function once with `arguments`, recording the request sent and the answer.

        The arguments are checked against the function's schema first; invalid ones are reported
        as `invalid_arguments` and nothing is sent. Credentials are masked in what is returned.

        Raises:
            NotFoundError: there is no function called `name`.
            SecretKeyError: the credentials cannot be decrypted with the configured key.
        """
        definition, connection = await self.resolve(tenant_id, name)
        context = Context(tenant_id=tenant_id)
        return await run_test(definition, connection, dict(arguments), context, max_response_bytes)

    # --- internals -------------------------------------------------------------------------------

    async def _checked(
        self, session: AsyncSession, tenant_id: str, definition: FunctionDefinition, *, many: bool = False
    ) -> ConnectionRow:
        """The connection row of a definition, after checking the definition against it."""
        problems: list[Problem] = []
        if definition.name in self.reserved:
            problems.append(
                ("name", f"{definition.name} is the name of a built-in tool; choose another name")
            )
        row = await rows.find_connection(session, tenant_id, definition.connection)
        if row is None:
            problems.append(
                ("connection", f"there is no connection named {definition.connection!r}; create it first")
            )
        else:
            try:
                definition.validate(rows.connection_of(row, None))
            except DefinitionError as exc:
                problems += exc.problems
        if problems:
            # Several definitions at once (an import): say which one each problem belongs to.
            raise DefinitionError(rows.prefixed(definition.name, problems) if many else problems)
        assert row is not None
        return row


def _set_function(row: FunctionRow, definition: FunctionDefinition, connection: ConnectionRow) -> None:
    row.name = definition.name
    row.description = definition.description
    row.definition = definition.to_json()
    row.connection_id = connection.id
    row.updated_at = utc_now()
