"""What one app instance holds while it serves: settings, metrics, and once started, the assistant.

Nothing here is shared state between processes: conversations, runs, users and keys live in the
database, so several `toolwire serve` processes can share one PostgreSQL database. Routers reach
this through the `get_state` dependency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

from toolwire.service.errors import ApiError
from toolwire.service.key_cache import KeyCache
from toolwire.settings import Settings

if TYPE_CHECKING:
    from toolwire.assistant import Assistant
    from toolwire.service.ops import Metrics
    from toolwire.service.runs import RunManager
    from toolwire.store import Database

__all__ = ["ServiceState", "get_state"]


@dataclass(kw_only=True)
class ServiceState:
    """The per-process parts of the service."""

    settings: Settings
    metrics: Metrics
    assistant: Assistant | None = None
    """Set while the app runs (between lifespan startup and shutdown)."""
    runs: RunManager | None = None
    """The chat runs in flight in this process."""
    draining: bool = False
    """True once shutdown began: readiness fails so no new traffic is routed here."""
    keys: KeyCache = field(default_factory=lambda: KeyCache(0.0))
    """Recently verified API keys (see `toolwire.service.auth`); emptied when this process changes keys."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def started(self) -> Assistant:
        """The assistant, or a 503 while the service is starting or stopping."""
        if self.assistant is None:
            raise ApiError(503, "The service is starting or stopping; retry in a moment.", code="unavailable")
        return self.assistant

    @property
    def db(self) -> Database:
        """The database of the running service."""
        return self.started.db

    @property
    def run_manager(self) -> RunManager:
        """The run manager of the running service."""
        if self.runs is None:
            raise ApiError(503, "The service is starting or stopping; retry in a moment.", code="unavailable")
        return self.runs


def get_state(request: Request) -> ServiceState:
    """The FastAPI dependency giving a router the state of its app."""
    state: ServiceState = request.app.state.toolwire
    return state
