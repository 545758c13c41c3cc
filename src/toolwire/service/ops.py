"""Operation: health and readiness, Prometheus metrics, request ids and structured JSON logs.

- `GET /healthz` answers 200 while the process serves; `GET /readyz` answers 200 only when the
  database answers too (and 503 while the service starts or drains), for load balancers.
- `GET /metrics` is the Prometheus text format of a registry of this app alone (two apps in one
  process never share counters): HTTP requests, tool calls by outcome, model latency, rounds per run.
- `RequestContextMiddleware` gives every request an id (the client's `X-Request-Id` when it is
  sane, else a new one), echoes it in the response, puts it on every log line written while the
  request is served, logs one access line, counts the request, and answers an unexpected exception
  with a 500 error body instead of a traceback.
- `configure_logging` sends every log record to stderr as one JSON object, with API keys, bearer
  tokens and the configured secrets masked.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from sqlalchemy import text
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolwire.gate.redact import Redactor
from toolwire.messages import Message as TranscriptMessage
from toolwire.messages import ToolSpec, Turn
from toolwire.models.base import Model, RequestOptions, StreamEvent, TurnComplete
from toolwire.service.errors import error_for
from toolwire.service.state import ServiceState, get_state

__all__ = [
    "REQUEST_ID_HEADER",
    "JsonFormatter",
    "MeteredModel",
    "Metrics",
    "RequestContextMiddleware",
    "configure_logging",
    "current_request_id",
    "router",
]

REQUEST_ID_HEADER = "x-request-id"
"""The header carrying the request id, both ways."""

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("toolwire_request_id", default=None)
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_KEY_TEXT = re.compile(r"\b(tw_[0-9a-f]{16})_[A-Za-z0-9_-]{20,}")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_READY_TIMEOUT = 3.0
_ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
logger = logging.getLogger("toolwire.service")


def current_request_id() -> str | None:
    """The id of the HTTP request being served by this task, if any."""
    return _request_id.get()


@dataclass(kw_only=True, frozen=True)
class Metrics:
    """The Prometheus metrics of one app, in a registry of their own."""

    registry: CollectorRegistry
    http_requests: Counter
    http_duration: Histogram
    tool_calls: Counter
    model_latency: Histogram
    run_rounds: Histogram
    runs: Counter
    runs_in_flight: Gauge

    @classmethod
    def create(cls) -> Metrics:
        """New metrics in a new registry."""
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            http_requests=Counter(
                "toolwire_http_requests",
                "HTTP requests answered, by method, route template and status.",
                ["method", "route", "status"],
                registry=registry,
            ),
            http_duration=Histogram(
                "toolwire_http_request_duration_seconds",
                "Time to answer an HTTP request (to the last byte of a stream).",
                ["method", "route"],
                registry=registry,
            ),
            tool_calls=Counter(
                "toolwire_tool_calls",
                "Tool calls answered, by tool and outcome (ok or the error code).",
                ["tool", "outcome"],
                registry=registry,
            ),
            model_latency=Histogram(
                "toolwire_model_request_duration_seconds",
                "Time of one model request, to the complete turn.",
                ["model", "outcome"],
                registry=registry,
            ),
            run_rounds=Histogram(
                "toolwire_run_rounds",
                "Model requests per finished run.",
                buckets=_ROUND_BUCKETS,
                registry=registry,
            ),
            runs=Counter(
                "toolwire_runs",
                "Chat runs by outcome: done, failed, cancelled, replayed.",
                ["outcome"],
                registry=registry,
            ),
            runs_in_flight=Gauge("toolwire_runs_in_flight", "Chat runs under way.", registry=registry),
        )

    def record_calls(self, calls: Iterable[tuple[str, str]], known_tools: Sequence[str]) -> None:
        """Count answered calls; a name outside the toolbox counts as `unknown` (labels stay bounded)."""
        known = set(known_tools)
        for name, outcome in calls:
            self.tool_calls.labels(tool=name if name in known else "unknown", outcome=outcome).inc()


class MeteredModel:
    """A model that records the latency of each request in `Metrics.model_latency`."""

    def __init__(self, model: Model, metrics: Metrics) -> None:
        self.inner = model
        self._histogram = metrics.model_latency

    @property
    def name(self) -> str:
        return self.inner.name

    async def request(
        self, transcript: Sequence[TranscriptMessage], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        started, outcome = time.perf_counter(), "error"
        try:
            turn = await self.inner.request(transcript, tools, options)
            outcome = "ok"
            return turn
        finally:
            self._observe(started, outcome)

    async def stream(
        self, transcript: Sequence[TranscriptMessage], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        started, outcome = time.perf_counter(), "error"
        try:
            async for event in self.inner.stream(transcript, tools, options):
                if isinstance(event, TurnComplete):
                    outcome = "ok"
                    self._observe(started, outcome)
                yield event
        finally:
            if outcome != "ok":
                self._observe(started, outcome)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _observe(self, started: float, outcome: str) -> None:
        self._histogram.labels(model=self.inner.name, outcome=outcome).observe(time.perf_counter() - started)


# --- logging --------------------------------------------------------------------------------------

# Record attributes that are not extra fields; uvicorn's `color_message` repeats the message in ANSI.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request id, extra fields, exception.

    API keys (`tw_...`), bearer tokens and the given secrets are masked in the whole line.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._redactor = Redactor([s for s in secrets if s])

    def format(self, record: logging.LogRecord) -> str:
        moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
        payload: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = _request_id.get()
        if request_id is not None:
            payload["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        line = json.dumps(payload, ensure_ascii=False, default=str)
        return self.scrub(line)

    def scrub(self, line: str) -> str:
        """The line with keys, bearer tokens and the configured secrets masked."""
        line = _KEY_TEXT.sub(r"\1_[redacted]", line)
        line = _BEARER.sub(r"\1 [redacted]", line)
        return self._redactor.redact(line)


def configure_logging(level: str = "info", *, secrets: Iterable[str] = ()) -> None:
    """Send every log record (toolwire's, uvicorn's, the libraries') to stderr as JSON lines.

    Args:
        level: The lowest level written, such as `info`.
        secrets: Values to mask wherever they appear (the model API key...).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
    # The middleware writes the access log, with the request id and the caller.
    logging.getLogger("uvicorn.access").disabled = True
    # Alembic announces its dialect on every start; only its warnings matter in a service log.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # httpx2 logs the full URL of every outgoing request, and a connection may carry its API key in
    # the query string: such a line would put the credential in the log.
    logging.getLogger("httpx2").setLevel(logging.WARNING)


# --- the request middleware ---------------------------------------------------------------------


class RequestContextMiddleware:
    """Request id, access log, HTTP metrics, and a 500 error body for anything unexpected."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, REQUEST_ID_HEADER.encode())
        request_id = given if given and _SANE_ID.match(given) else f"req_{uuid.uuid4().hex}"
        token = _request_id.set(request_id)
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                header = (REQUEST_ID_HEADER.encode(), request_id.encode())
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            logger.exception("Unhandled error while serving %s %s", scope["method"], scope["path"])
            if not response_started:
                # `send_with_id` records the status of this answer for the log and the metrics.
                await error_for(exc).response()(scope, receive, send_with_id)
        finally:
            self._finish(scope, status, time.perf_counter() - started)
            _request_id.reset(token)

    def _finish(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope["method"]
        self.metrics.http_requests.labels(method=method, route=template, status=str(status)).inc()
        self.metrics.http_duration.labels(method=method, route=template).observe(seconds)
        principal = (scope.get("state") or {}).get("principal")
        extra: dict[str, Any] = {
            "method": method,
            "path": scope["path"],
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
        }
        if principal is not None:
            extra["user_id"] = principal.user_id
            extra["tenant_id"] = principal.tenant_id
        logger.info("%s %s %s", method, scope["path"], status, extra=extra)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


# --- routes ---------------------------------------------------------------------------------------

router = APIRouter(tags=["operation"])


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> dict[str, str]:
    """Always 200 while the process can answer."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the database answers",
    responses={503: {"description": "Starting, draining, or the database is unreachable."}},
)
async def readyz(state: Annotated[ServiceState, Depends(get_state)]) -> Response:
    """200 when the service is started, not draining, and its database answers within 3 seconds."""
    if state.assistant is None or state.draining:
        return JSONResponse({"status": "unavailable", "reason": "starting or stopping"}, status_code=503)
    try:
        async with asyncio.timeout(_READY_TIMEOUT), state.assistant.db.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        reason = str(exc) if not isinstance(exc, TimeoutError) else "the database did not answer in time"
        logger.warning("Readiness check failed: %s", reason)
        return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(state: Annotated[ServiceState, Depends(get_state)]) -> Response:
    """The metrics of this process in the Prometheus text format."""
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
