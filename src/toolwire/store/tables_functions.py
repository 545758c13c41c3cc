"""Tables: HTTP functions and their connections, credentials encrypted.

A connection row keeps what is not secret in plain columns (URL, method, auth type, and the auth
settings such as a header name or a client id as JSON) and the credential values only as one
Fernet token in `secrets` (see `toolwire.store.secrets`), so a database dump shows no password. A
function row keeps its seed-001 JSON definition and points at exactly one connection of the same
tenant; the foreign key refuses to delete a connection that functions still use.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from toolwire.store.tables import Base, UtcDateTime, utc_now

__all__ = ["ConnectionRow", "FunctionRow"]


class ConnectionRow(Base):
    """One API connection of a tenant: where and how its functions call the API."""

    __tablename__ = "connections"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, init=False
    )
    """Assigned by the database; SQLite needs INTEGER for its rowid alias."""
    tenant_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    """Unique within the tenant; what function definitions name."""
    url: Mapped[str] = mapped_column(Text)
    method: Mapped[str] = mapped_column(String(8))
    """GET, POST, PUT or PATCH."""
    auth_type: Mapped[str] = mapped_column(String(32))
    """One of `toolwire.tools.auth.AuthType`."""
    auth: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The non-secret auth settings (`header_name`, `username`, `client_id`, `scopes`...)."""
    timeout: Mapped[float] = mapped_column(Float)
    """Seconds for connecting and for each read of one attempt."""
    secrets: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    """The credential values as one Fernet token; `None` when the auth type needs none."""
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    updated_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )


class FunctionRow(Base):
    """One HTTP function of a tenant: its seed-001 definition, bound to one connection."""

    __tablename__ = "functions"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, init=False
    )
    tenant_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    """Unique within the tenant; the tool name the model sees."""
    description: Mapped[str] = mapped_column(Text)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    """`strict`, `parameters`, `http_request_body`, and the optional `method` and `path`."""
    connection_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("connections.id", ondelete="RESTRICT"),
        index=True,
    )
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    updated_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
