"""The connection half of the function registry: connections per tenant, credentials kept encrypted.

`FunctionRegistry` (in `toolwire.tools.registry`) builds on this class; it is kept apart only to
keep each module short.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from toolwire.store.db import Database
from toolwire.store.secrets import SecretBox
from toolwire.store.tables import utc_now
from toolwire.store.tables_functions import ConnectionRow
from toolwire.tools import _registry_rows as rows
from toolwire.tools._http_check import Problem
from toolwire.tools._registry_rows import AlreadyExistsError, ConnectionInUseError
from toolwire.tools._registry_views import ConnectionView
from toolwire.tools.auth import SECRET_KEYS
from toolwire.tools.http import Connection, DefinitionError

__all__ = ["ConnectionStore"]


class ConnectionStore:
    """Stores connections per tenant; credentials are encrypted with `secrets` before they are saved.

    Args:
        db: The database (migrated).
        secrets: Encrypts credentials before they are stored and decrypts them for a call.
    """

    def __init__(self, db: Database, secrets: SecretBox) -> None:
        self.db = db
        self.secrets = secrets

    async def add_connection(
        self, tenant_id: str, connection: Connection, *, replace: bool = False
    ) -> ConnectionView:
        """Store a new connection; with `replace`, an existing one of that name is updated instead.

        Raises:
            DefinitionError: the connection (or, when replacing, a function bound to it) has problems.
            AlreadyExistsError: the name is taken and `replace` is false.
        """
        async with self.db.transaction(write=True) as session:
            row = await rows.find_connection(session, tenant_id, connection.name)
            if row is not None and not replace:
                raise AlreadyExistsError(
                    f"A connection named {connection.name!r} already exists; "
                    "choose another name or replace it."
                )
            if row is not None:
                return await self._apply_connection(session, row, connection)
            connection = rows.with_secrets(connection, {})
            rows.validate_connection(connection)
            row = ConnectionRow(
                tenant_id=tenant_id,
                name=connection.name,
                url=connection.url,
                method=connection.method,
                auth_type=connection.auth.type,
                auth=rows.stored_auth(connection),
                timeout=connection.timeout,
                secrets=self.secrets.encrypt(connection.auth.secrets),
            )
            session.add(row)
            await rows.flush(session, "connection", connection.name)
            return rows.connection_view(row, [])

    async def update_connection(self, tenant_id: str, name: str, connection: Connection) -> ConnectionView:
        """Replace a connection's settings (and its name); credentials not given are kept.

        Raises:
            NotFoundError: no connection is called `name`.
            AlreadyExistsError: the new name is taken by another connection.
            DefinitionError: the connection, or a function bound to it, has problems with the change.
        """
        async with self.db.transaction(write=True) as session:
            row = await rows.connection_row(session, tenant_id, name)
            if connection.name != name and await rows.find_connection(session, tenant_id, connection.name):
                raise AlreadyExistsError(
                    f"A connection named {connection.name!r} already exists; choose another name."
                )
            return await self._apply_connection(session, row, connection)

    async def get_connection(self, tenant_id: str, name: str) -> ConnectionView:
        """The connection called `name`, without its credential values.

        Raises:
            NotFoundError: there is none.
        """
        async with self.db.transaction() as session:
            row = await rows.connection_row(session, tenant_id, name)
            bound = await rows.bound_functions(session, row)
            return rows.connection_view(row, [function.name for function in bound])

    async def list_connections(self, tenant_id: str) -> list[ConnectionView]:
        """Every connection of the tenant, by name, without credential values."""
        async with self.db.transaction() as session:
            found = await session.scalars(
                select(ConnectionRow).where(ConnectionRow.tenant_id == tenant_id).order_by(ConnectionRow.name)
            )
            connections = list(found.all())
            bound = (await session.execute(rows.joined(tenant_id))).all()
        names: dict[int, list[str]] = {}
        for function, connection in bound:
            names.setdefault(connection.id, []).append(function.name)
        return [rows.connection_view(row, names.get(row.id, [])) for row in connections]

    async def remove_connection(self, tenant_id: str, name: str) -> None:
        """Delete a connection that no function uses.

        Raises:
            NotFoundError: there is none of that name.
            ConnectionInUseError: functions are bound to it.
        """
        async with self.db.transaction(write=True) as session:
            row = await rows.connection_row(session, tenant_id, name)
            if bound := await rows.bound_functions(session, row):
                raise ConnectionInUseError(
                    f"Connection {name!r} is used by {', '.join(f.name for f in bound)}; remove those "
                    "functions or bind them to another connection first."
                )
            await session.delete(row)

    async def _apply_connection(
        self, session: AsyncSession, row: ConnectionRow, connection: Connection
    ) -> ConnectionView:
        """Update `row` to `connection`, keeping stored credentials that are not given again."""
        needed = SECRET_KEYS.get(connection.auth.type, ())
        missing = [key for key in needed if not connection.auth.secrets.get(key)]
        kept: dict[str, str] = {}
        if missing and row.auth_type == connection.auth.type and row.secrets is not None:
            kept = self.secrets.decrypt(row.secrets)
        connection = rows.with_secrets(connection, kept)
        rows.validate_connection(connection)
        bound = await rows.bound_functions(session, row)
        problems: list[Problem] = []
        for function in bound:
            try:
                rows.definition_of(function, connection.name).validate(connection)
            except DefinitionError as exc:
                problems += rows.prefixed(f"functions.{function.name}", exc.problems)
        if problems:
            raise DefinitionError(problems)
        row.name, row.url, row.method = connection.name, connection.url, connection.method
        row.auth_type, row.auth = connection.auth.type, rows.stored_auth(connection)
        row.timeout = connection.timeout
        row.secrets = self.secrets.encrypt(connection.auth.secrets)
        row.updated_at = utc_now()
        await rows.flush(session, "connection", connection.name)
        return rows.connection_view(row, [function.name for function in bound])
