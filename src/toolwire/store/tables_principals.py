"""Tables: users, their API keys, stored conversations and chat runs (the service).

A user belongs to one tenant; every key, conversation and run carries the tenant too, and every
query of the service filters on it. Keys are stored as a salted hash only (see
`toolwire.store.principals`). A run row makes `POST /v1/chat` idempotent: its `request_id` is unique
per tenant, and once the run is `done` the row holds the outcome that a repeated request gets back.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, UniqueConstraint, func
from sqlalchemy.orm import Mapped, mapped_column

from toolwire.store.tables import Base, UtcDateTime, utc_now

__all__ = ["ApiKey", "ChatRun", "Conversation", "User"]


class User(Base):
    """Someone (a person or an application) who calls the service with an API key."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    """`usr_` and 16 hex digits; the `user_id` of the runs' Context."""
    tenant_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    """Unique within the tenant; what the CLI and the admin API call the user by."""
    scopes: Mapped[list[str]] = mapped_column(JSON)
    """What the user may do: `admin` opens the admin API; the policy reads the rest."""
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )


class ApiKey(Base):
    """One API key of a user: its public id and the salted hash of its secret part."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    """The public part of the key (`tw_<id>_<secret>`), used to find the row."""
    user_id: Mapped[str] = mapped_column(String(32), ForeignKey("users.id", ondelete="CASCADE"), index=True)
    salt: Mapped[str] = mapped_column(String(32))
    digest: Mapped[str] = mapped_column(String(64))
    """HMAC-SHA256 of the secret part, keyed with the salt, in hex."""
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), default=None)
    """When the key stopped working; `None` while it works."""


class Conversation(Base):
    """One user's conversation with the assistant: the canonical transcript, as JSON."""

    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_tenant_user", "tenant_id", "user_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    """`conv_` and 24 hex digits."""
    tenant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(128))
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    """The messages, as `toolwire.store.transcripts.dump_transcript` writes them."""
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    updated_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )


class ChatRun(Base):
    """One application request to the chat API, claimed before it runs and holding its outcome after."""

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "request_id"),
        Index("ix_runs_conversation", "conversation_id", "state"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, init=False
    )
    tenant_id: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str] = mapped_column(String(128))
    """The application's request id; a repeat of it gets `outcome` instead of a second run."""
    user_id: Mapped[str] = mapped_column(String(128))
    request_hash: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the request's messages and conversation id: a reused request id must match it."""
    conversation_id: Mapped[str] = mapped_column(String(64))
    """The conversation the run continues or starts (the row exists once the run is done)."""
    state: Mapped[str] = mapped_column(String(16))
    """`running`, `done`, or `failed` (a failed run may be claimed again)."""
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    """Raised by every new claim, so a lost attempt cannot overwrite the outcome of a later one."""
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """The response body of a done run; the error of a failed one."""
    created_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    updated_at: Mapped[dt.datetime] = mapped_column(
        UtcDateTime(), default_factory=utc_now, server_default=func.current_timestamp()
    )
    """When the run was last claimed or finished; a `running` row older than the run timeout is lost."""
