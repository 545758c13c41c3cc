"""The per-run context the application hands to tools; the model never sees it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

__all__ = ["Context"]


def _new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


@dataclass(kw_only=True, frozen=True)
class Context:
    """Who is asking, and for which application request.

    The runtime injects it into every tool that declares a `Context` parameter; it is never part of
    a tool's JSON Schema, so a model cannot forge it.
    """

    user_id: str = "local"
    """The end user on whose behalf tools run."""
    tenant_id: str = "default"
    """The tenant the user belongs to; data never crosses tenants."""
    request_id: str = field(default_factory=_new_request_id)
    """The application's request id: retries of one request share it (it keys idempotency)."""
    scopes: frozenset[str] = frozenset()
    """What the principal may do, checked by the policy before execution."""
    locale: str = "en"
    """The user's language, for tools that format text."""
    timezone: tzinfo = UTC
    """The user's time zone; relative dates ("today") are resolved in it."""
    now: datetime | None = None
    """A fixed clock for tests and replays; `None` means the real time."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the application adds (a database session, a tenant config...)."""

    def current_time(self) -> datetime:
        """The time to resolve relative dates against, in the user's time zone."""
        moment = self.now if self.now is not None else datetime.now(UTC)
        return moment.astimezone(self.timezone)
