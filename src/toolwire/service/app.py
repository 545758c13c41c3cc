"""`create_app(settings)`: the HTTP service, the same runtime as `toolwire chat` behind FastAPI.

One router per concern is mounted here: operation (`/healthz`, `/readyz`, `/metrics`), the chat
API (`/v1/chat`), and the admin API for users (`/admin/api/users`) and for the audit log
(`/admin/api/audit`). Another router joins with `app.include_router(...)`; its routes take the
caller from `require_principal` / `require_admin` (`toolwire.service.auth`), the database and the
assistant from `get_state` (`toolwire.service.state`), and raise `ApiError` for OpenAI-style error
bodies.

Startup opens the assistant (database migrated, model, tools). Shutdown first marks the service
draining (readiness fails, new chat requests get 503), waits up to `shutdown_timeout` for the runs
under way, cancels what is left cleanly, then closes the model and the database. The server
(`toolwire serve`) stops accepting connections before that and lets open ones finish.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolwire.assistant import build_model, open_assistant
from toolwire.models.base import Model
from toolwire.service import admin_audit, admin_functions, admin_users, chat_api, gateway, ops, pages
from toolwire.service.errors import ApiError, BodyTooLargeError, install_error_handlers
from toolwire.service.key_cache import KeyCache
from toolwire.service.ops import MeteredModel, Metrics, RequestContextMiddleware
from toolwire.service.runs import RunManager
from toolwire.service.state import ServiceState
from toolwire.settings import Settings

__all__ = ["BodyLimitMiddleware", "create_app"]

_DESCRIPTION = (
    "Let a language model act on your system safely: checked, local, exactly-once tool calls. "
    "Every `/v1` and `/admin/api` request needs `Authorization: Bearer <key>`; every error has "
    'the body `{"error": {"message", "type", "param", "code"}}`.'
)


class BodyLimitMiddleware:
    """Answer 413 to a request body larger than `limit` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.limit:
            # Refused before a byte of it is read.
            error = BodyTooLargeError(self.limit)
            await ApiError(413, str(error.detail), code="request_too_large").response()(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError(self.limit)
            return message

        await self.app(scope, limited, send)


def create_app(settings: Settings | None = None, *, model: Model | None = None) -> FastAPI:
    """The toolwire service as an ASGI app.

    Args:
        settings: The configuration; `Settings.from_env()` when `None`.
        model: The model to use instead of the one the settings name (tests pass a fake here).

    Returns:
        A FastAPI app; `app.state.toolwire` is its `ServiceState`.
    """
    settings = settings or Settings.from_env()
    metrics = Metrics.create()
    state = ServiceState(settings=settings, metrics=metrics, keys=KeyCache(settings.key_cache_seconds))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metered = MeteredModel(model or build_model(settings), metrics)
        async with open_assistant(settings, model=metered) as assistant:
            runs = RunManager(assistant, settings, metrics)
            state.assistant, state.runs, state.draining = assistant, runs, False
            try:
                yield
            finally:
                state.draining = True
                await runs.drain(settings.shutdown_timeout)
                state.assistant = state.runs = None

    from toolwire import __version__

    app = FastAPI(title="toolwire", version=__version__, description=_DESCRIPTION, lifespan=lifespan)
    app.state.toolwire = state
    install_error_handlers(app)
    app.include_router(ops.router)
    app.include_router(chat_api.router)
    app.include_router(gateway.router)
    app.include_router(admin_users.router)
    app.include_router(admin_functions.router)
    app.include_router(admin_audit.router)
    app.include_router(pages.router)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(RequestContextMiddleware, metrics=metrics)  # outermost: sees every answer
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The OpenAPI document, with validation failures documented as the 400s they are."""

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        fastapi_422 = "#/components/schemas/HTTPValidationError"
        for path_item in schema.get("paths", {}).values():
            for operation in path_item.values():
                responses = operation.get("responses", {})
                if fastapi_422 in json.dumps(responses.get("422", {})):
                    del responses["422"]
                    responses.setdefault(
                        "400",
                        {
                            "description": "Malformed JSON, wrong types or unknown fields.",
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
                            },
                        },
                    )
        components = schema.get("components", {}).get("schemas", {})
        text = json.dumps(schema.get("paths", {}))
        for name in ("HTTPValidationError", "ValidationError"):
            if f"#/components/schemas/{name}" not in text and name in components:
                del components[name]
        app.openapi_schema = schema
        return schema

    return build
