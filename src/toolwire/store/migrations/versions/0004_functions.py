"""HTTP functions and their connections, credentials encrypted.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

__all__ = ["branch_labels", "depends_on", "down_revision", "downgrade", "revision", "upgrade"]

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.BigInteger:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _timestamp(name: str) -> sa.Column[object]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(), nullable=False
    )


def upgrade() -> None:
    """Create `connections` and `functions`."""
    op.create_table(
        "connections",
        sa.Column("id", _id(), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("auth_type", sa.String(length=32), nullable=False),
        sa.Column("auth", sa.JSON(), nullable=False),
        sa.Column("timeout", sa.Float(), nullable=False),
        sa.Column("secrets", sa.LargeBinary(), nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connections")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_connections_tenant_id_name")),
    )
    op.create_table(
        "functions",
        sa.Column("id", _id(), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("connection_id", _id(), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["connections.id"],
            name=op.f("fk_functions_connection_id_connections"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_functions")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_functions_tenant_id_name")),
    )
    op.create_index(op.f("ix_functions_connection_id"), "functions", ["connection_id"])


def downgrade() -> None:
    """Drop `functions` and `connections`."""
    op.drop_index(op.f("ix_functions_connection_id"), table_name="functions")
    op.drop_table("functions")
    op.drop_table("connections")
