"""The bookkeeping assistant put together: model from settings, tools, database, system prompt.

The CLI and the service both start here, so `toolwire chat` and `POST /v1/chat` run the same thing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from toolwire.context import Context
from toolwire.exceptions import ConfigError
from toolwire.models.base import Model
from toolwire.runner import Runner
from toolwire.settings import Settings
from toolwire.store import Database, default_database_url

__all__ = ["Assistant", "build_model", "open_assistant"]


def build_model(settings: Settings) -> Model:
    """The model the settings name: an OpenAI-compatible endpoint, or the embedded model.

    Raises:
        ConfigError: no endpoint is set and the embedded model is not installed.
    """
    if settings.base_url:
        from toolwire.models.openai import OpenAIModel

        if settings.route not in ("chat", "jsonplan", "responses", "auto"):
            raise ConfigError(
                f"Route {settings.route!r} is not known: use chat, responses, auto or jsonplan."
            )
        return OpenAIModel(
            settings.model,
            base_url=settings.base_url,
            api_key=settings.api_key,
            route=settings.route,  # type: ignore[arg-type]
        )
    try:
        from toolwire.models.local import LocalModel
    except ImportError:
        LocalModel = None
    if LocalModel is None or not LocalModel.available():
        raise ConfigError(
            "No model is configured: set TOOLWIRE_BASE_URL to an OpenAI-compatible endpoint "
            "(with TOOLWIRE_MODEL and TOOLWIRE_API_KEY), "
            "or run `make demo` once to install the embedded model."
        )
    return LocalModel(path=settings.local_model)


@dataclass(kw_only=True)
class Assistant:
    """A runner over the bookkeeping tools, with the database its tools use."""

    runner: Runner
    db: Database
    settings: Settings
    extra: dict[str, Any] = field(default_factory=dict)

    def context(self, **values: Any) -> Context:
        """A Context for one request, carrying the database to the tools."""
        extra = {"db": self.db, **self.extra, **values.pop("extra", {})}
        return Context(extra=extra, **values)


@asynccontextmanager
async def open_assistant(settings: Settings, *, model: Model | None = None) -> AsyncIterator[Assistant]:
    """Open the database (migrating it), build the model and the tools, and close them afterwards."""
    from toolwire.demo.bookkeeping import bookkeeping_toolbox, system_prompt

    db = await Database.open(settings.database_url or default_database_url())
    try:
        model = model or build_model(settings)
        try:
            runner = Runner(
                model, bookkeeping_toolbox(), system_prompt=lambda ctx: system_prompt(ctx.current_time())
            )
            yield Assistant(runner=runner, db=db, settings=settings)
        finally:
            await model.aclose()
    finally:
        await db.aclose()
