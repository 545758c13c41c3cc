"""`POST /v1/chat`: the chat API for applications.

The request names new messages, the application's `request_id` and optionally a stored
conversation of the same user; the answer is the shape of `toolwire chat --json` plus the
`conversation_id` to continue with. With `"stream": true` the answer is Server-Sent Events:

```
event: text.delta       data: {"text": "..."}
event: call.proposed    data: {"call_id", "name", "arguments", "round"}
event: call.finished    data: {"name", "arguments", "outcome", "result", "replayed", "call_id", "duration_ms"}
event: done             data: {"answer", "calls", "rounds", "route", "conversation_id"}
event: error            data: {"error": {"message", "type", "param", "code"}}   (instead of done)
```

A repeated `request_id` is answered from the stored outcome (header `Idempotent-Replayed: true`;
a stream then carries only the `done` event). How runs are claimed and stored is in
`toolwire.service.runs`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import JSONResponse, Response

from toolwire.models.base import TextDelta
from toolwire.results import call_json
from toolwire.runner import CallFinished, CallProposed, RunEvent
from toolwire.service.auth import Principal, require_principal
from toolwire.service.errors import ApiError, error_for
from toolwire.service.runs import Replay, RunHandle, claim_run, request_digest, to_messages
from toolwire.service.schemas import ChatRequest, ChatResponse, ErrorResponse
from toolwire.service.state import ServiceState, get_state

__all__ = ["router"]

_REPLAYED = {"Idempotent-Replayed": "true"}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "Malformed JSON, wrong types, unknown fields or a missing field.",
        401: "Missing, unknown or revoked API key.",
        404: "The conversation does not exist for this user.",
        409: "The request id or the conversation is being answered right now; retry shortly.",
        413: "The body is larger than the configured limit.",
        422: "The request id was used for a different request.",
        502: "The model endpoint failed.",
        503: "The database is unreachable, or the service is stopping.",
    }.items()
}

# In OpenAPI 3.1 the schema of an event stream describes each event, not the stream as a string.
_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {
            "type": "string",
            "enum": ["text.delta", "call.proposed", "call.finished", "done", "error"],
        },
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}

router = APIRouter(prefix="/v1", tags=["chat"])


@router.post(
    "/chat",
    summary="Ask the assistant; it may call tools before it answers",
    response_model=ChatResponse,
    responses={
        200: {
            "description": "The run's outcome, or with `stream: true` a Server-Sent Events stream.",
            "content": {"text/event-stream": {"schema": _SSE_EVENT}},
        },
        **_ERRORS,
    },
)
async def chat(
    body: ChatRequest,
    principal: Annotated[Principal, Depends(require_principal)],
    state: Annotated[ServiceState, Depends(get_state)],
) -> Response:
    """Run the tool loop for the caller, continuing `conversation_id` when given."""
    if state.draining:
        raise ApiError(503, "The service is shutting down; send the request again.", code="unavailable")
    manager = state.run_manager
    pairs = [(m.role, m.content) for m in body.messages]
    claim = await claim_run(
        state.db,
        principal,
        request_id=body.request_id,
        conversation_id=body.conversation_id,
        digest=request_digest(pairs, body.conversation_id),
        run_timeout=state.settings.run_timeout,
    )
    if isinstance(claim, Replay):
        state.metrics.runs.labels(outcome="replayed").inc()
        if body.stream:
            return _event_stream(_replayed(claim.outcome), state, headers=_REPLAYED)
        return JSONResponse(claim.outcome, headers=_REPLAYED)
    handle = manager.start(claim, principal, to_messages(pairs), stream=body.stream)
    if body.stream:
        return _event_stream(_live(handle), state)
    # Shielded: a client that goes away does not cancel the run; it finishes and is stored.
    return JSONResponse(await asyncio.shield(handle.task))


def _event_stream(
    events: AsyncIterator[ServerSentEvent], state: ServiceState, headers: dict[str, str] | None = None
) -> EventSourceResponse:
    # On shutdown, sse-starlette would end the stream at once; the grace period lets the run finish.
    return EventSourceResponse(
        events, headers=headers, sep="\n", shutdown_grace_period=state.settings.shutdown_timeout
    )


def _event(name: str, data: Any) -> ServerSentEvent:
    return ServerSentEvent(event=name, data=json.dumps(data, ensure_ascii=False), sep="\n")


def _encode(event: RunEvent) -> ServerSentEvent | None:
    if isinstance(event, TextDelta):
        return _event("text.delta", {"text": event.text})
    if isinstance(event, CallProposed):
        try:
            arguments: Any = json.loads(event.call.arguments) if event.call.arguments else {}
        except ValueError:
            arguments = event.call.arguments
        payload = {
            "call_id": event.call.id,
            "name": event.call.name,
            "arguments": arguments,
            "round": event.round,
        }
        return _event("call.proposed", payload)
    if isinstance(event, CallFinished):
        return _event("call.finished", call_json(event.trace))
    return None


async def _live(handle: RunHandle) -> AsyncIterator[ServerSentEvent]:
    async for event in handle.events():
        encoded = _encode(event)
        if encoded is not None:
            yield encoded
    # The events end when the task is done, so its outcome is there without waiting.
    task = handle.task
    failure = asyncio.CancelledError() if task.cancelled() else task.exception()
    if failure is not None:
        # The status line is long sent: the error travels as the stream's last event.
        yield _event("error", error_for(failure).body())
        return
    yield _event("done", task.result())


async def _replayed(outcome: dict[str, Any]) -> AsyncIterator[ServerSentEvent]:
    yield _event("done", outcome)
