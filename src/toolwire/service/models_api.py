"""The models behind the gateway: the upstream models it forwards to, its own tool loop, `GET /v1/models`.

`Gateway` is made when the app starts and closed when it stops (this router's lifespan runs inside
the app's, so the assistant is open the whole time). It makes one `OpenAIModel` per upstream model
name on first use, on the route the settings choose, metered like the assistant's model; and it
runs the server's tool loop for the `toolwire` model in tasks that finish even when their client
goes away, waiting for them at shutdown as `RunManager` waits for chat runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI

from toolwire.context import Context
from toolwire.messages import AssistantMessage, Message, Turn
from toolwire.models.base import Model, StreamEvent, TextDelta, TurnComplete
from toolwire.models.openai import OpenAIModel
from toolwire.models.routes import ConfiguredRoute
from toolwire.runner import CallProposed, RunComplete, Runner, RunResult
from toolwire.service.auth import Principal, require_principal
from toolwire.service.errors import ApiError
from toolwire.service.gateway_stream import Feed
from toolwire.service.ops import MeteredModel, Metrics
from toolwire.service.schemas import ErrorResponse
from toolwire.service.state import ServiceState, get_state
from toolwire.settings import Settings

__all__ = ["AGENT_MODELS", "LOCAL_MODEL", "Gateway", "get_gateway", "router"]

logger = logging.getLogger("toolwire.service.gateway")

AGENT_MODELS = ("toolwire", "toolwire/assistant")
"""The model names that run the server's own tool loop."""
LOCAL_MODEL = "local"
"""With no upstream configured: the server's own model (the embedded one) for clients' own tools."""

_STATE_KEY = "gateway"
_ROUND_BREAK = "\n\n"
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing, unknown or revoked API key."},
    404: {"model": ErrorResponse, "description": "The model does not exist here."},
    503: {"model": ErrorResponse, "description": "The service is starting or stopping."},
}


@dataclass(eq=False)
class Gateway:
    """The upstream models of one app, and the tool-loop runs it started."""

    settings: Settings
    metrics: Metrics
    local: Model | None = None
    """The server's own model, offered as `local` when no upstream is configured."""
    _models: dict[str, Model] = field(default_factory=dict)
    _runs: set[asyncio.Task[Turn]] = field(default_factory=set)

    @property
    def upstream_names(self) -> tuple[str, ...]:
        """The upstream model names clients may ask for; `local` alone without a `base_url`."""
        if not self.settings.base_url:
            return (LOCAL_MODEL,) if self.local is not None else ()
        names = [self.settings.model, *self.settings.upstream_models.split(",")]
        return tuple(dict.fromkeys(n.strip() for n in names if n.strip()))

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model name the gateway answers to, the server's own first."""
        return (*AGENT_MODELS, *(n for n in self.upstream_names if n not in AGENT_MODELS))

    def upstream(self, name: str) -> Model:
        """The upstream model called `name`, made on first use.

        Raises:
            ApiError: 404 `model_not_found` for a name that is not configured.
        """
        model = self._models.get(name)
        if model is not None:
            return model
        if name == LOCAL_MODEL and self.local is not None and not self.settings.base_url:
            # Shared with the assistant, already metered: the embedded model is loaded once.
            return self.local
        if name not in self.upstream_names or self.settings.base_url is None:
            raise self.not_found(name)
        upstream = OpenAIModel(
            name,
            base_url=self.settings.base_url,
            api_key=self.settings.api_key,
            route=cast(ConfiguredRoute, self.settings.route),
        )
        model = self._models[name] = MeteredModel(upstream, self.metrics)
        return model

    def not_found(self, name: str) -> ApiError:
        """The 404 `model_not_found` for `name`, naming the models there are."""
        return ApiError(
            404,
            f"The model {name!r} does not exist here; use one of {', '.join(self.model_names)} "
            "(GET /v1/models lists them).",
            param="model",
            code="model_not_found",
        )

    def run(self, runner: Runner, transcript: list[Message], context: Context) -> Feed:
        """Start the tool loop on `transcript`; it runs to its end even if its client goes away."""
        feed = Feed(
            self._agent_events(runner, transcript, context), detached=True, timeout=self.settings.run_timeout
        )
        self._runs.add(feed.task)
        feed.task.add_done_callback(self._runs.discard)
        return feed

    async def _agent_events(
        self, runner: Runner, transcript: list[Message], context: Context
    ) -> AsyncIterator[StreamEvent]:
        metrics = self.metrics
        spoken: list[str] = []
        result: RunResult | None = None
        between_rounds = False
        metrics.runs_in_flight.inc()
        outcome = "failed"
        try:
            events = cast(AsyncGenerator[Any], runner.stream(transcript, context=context))
            try:
                async for event in events:
                    if isinstance(event, TextDelta) and event.text:
                        if between_rounds:
                            spoken.append(_ROUND_BREAK)
                            yield TextDelta(text=_ROUND_BREAK)
                            between_rounds = False
                        spoken.append(event.text)
                        yield event
                    elif isinstance(event, CallProposed):
                        between_rounds = bool(spoken)
                    elif isinstance(event, RunComplete):
                        result = event.result
            finally:
                await events.aclose()
            assert result is not None  # the loop ends with RunComplete or raises
            outcome = "done"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            # Logged here too: the client that asked may have gone and will not hear of it.
            logger.warning("A gateway run of the tool loop failed: %s", exc)
            raise
        finally:
            metrics.runs_in_flight.dec()
            metrics.runs.labels(outcome=outcome).inc()
        metrics.run_rounds.observe(result.rounds)
        metrics.record_calls(((c.name, c.outcome) for c in result.calls), runner.toolbox.names)
        message = AssistantMessage(text="".join(spoken) or None)
        yield TurnComplete(turn=Turn(message=message, usage=result.usage, finish_reason="stop"))

    async def aclose(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the tool loops under way, cancel the rest, close the models."""
        if self._runs:
            _, pending = await asyncio.wait(set(self._runs), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        for model in self._models.values():
            await model.aclose()
        self._models.clear()


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Runs inside the app's own lifespan: the assistant is open before and closed after it.
    state: ServiceState = app.state.toolwire
    local = state.assistant.runner.model if state.assistant is not None else None
    gateway = state.extra[_STATE_KEY] = Gateway(settings=state.settings, metrics=state.metrics, local=local)
    try:
        yield
    finally:
        del state.extra[_STATE_KEY]
        await gateway.aclose(state.settings.shutdown_timeout)


def get_gateway(state: ServiceState) -> Gateway:
    """The gateway of a running app, or a 503 while it starts or stops."""
    gateway = state.extra.get(_STATE_KEY)
    if not isinstance(gateway, Gateway) or state.draining:
        raise ApiError(503, "The service is starting or stopping; retry in a moment.", code="unavailable")
    return gateway


router = APIRouter(tags=["gateway"], lifespan=_lifespan)


def _model_json(name: str) -> dict[str, Any]:
    owner = "toolwire" if name in AGENT_MODELS else "upstream"
    return {"id": name, "object": "model", "created": 0, "owned_by": owner}


@router.get("/models", summary="The models the gateway answers to", responses=_ERRORS)
async def list_models(
    principal: Annotated[Principal, Depends(require_principal)],
    state: Annotated[ServiceState, Depends(get_state)],
) -> dict[str, Any]:
    """The server's own tool loop (`toolwire`) and the configured upstream models."""
    return {"object": "list", "data": [_model_json(n) for n in get_gateway(state).model_names]}


@router.get("/models/{model:path}", summary="One model the gateway answers to", responses=_ERRORS)
async def retrieve_model(
    model: str,
    principal: Annotated[Principal, Depends(require_principal)],
    state: Annotated[ServiceState, Depends(get_state)],
) -> dict[str, Any]:
    """The model called `model`, or 404 `model_not_found`."""
    gateway = get_gateway(state)
    if model not in gateway.model_names:
        raise gateway.not_found(model)
    return _model_json(model)
