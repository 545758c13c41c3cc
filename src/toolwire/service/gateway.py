"""The OpenAI-compatible gateway: `POST /v1/chat/completions`, `POST /v1/responses`, `GET /v1/models`.

Point the official `openai` SDK, the OpenAI Agents SDK or any OpenAI-compatible UI at
`<server>/v1` with a toolwire API key. The `model` field chooses one of two modes:

- **An upstream model** (`settings.model`, and any in `settings.upstream_models`): the request is
  forwarded to `settings.base_url` on the route the settings choose (`auto` follows what the
  upstream serves), so a Responses client can use a Chat-only upstream and the other way round.
  The client's own tools pass through and their calls come back to the client; where the upstream
  refuses tools, toolwire asks for the JSON plan and still hands the client real `tool_calls` /
  `function_call` items.
- **`toolwire`** (also `toolwire/assistant`): the server runs its own tool loop with the tools of
  the caller's tenant and answers with the final message only. Text the model wrote in earlier
  rounds (before it called a tool) is part of that message, joined by a blank line, so a stream
  and a whole answer say the same. Sending `tools` in this mode is refused rather than mixed. A
  request repeated with the same `Idempotency-Key` header replays its writes instead of repeating
  them.

Both wires are read into the canonical transcript and rendered back from the returned turn, so
translation between them is the same code as pass-through. What the transcript cannot carry
(hosted tools, images, stored responses) is refused with a 400 naming the item. At the top level
of a body, unknown fields are refused as OpenAI refuses them; fields that only tune sampling or
bookkeeping are accepted and not forwarded; fields that would change the answer's shape (`n`,
`response_format`, `logprobs`...) are refused unless they ask for the default. Streams are
written by `toolwire.service.gateway_stream`.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, cast

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from toolwire.exceptions import ModelError, WireFormatError
from toolwire.messages import Message, ToolSpec, Turn
from toolwire.models.base import Model, RequestOptions, StreamEvent
from toolwire.service import models_api
from toolwire.service.auth import Principal, principal_of
from toolwire.service.errors import ApiError
from toolwire.service.gateway_stream import (
    Feed,
    chat_sse,
    finished,
    gateway_error,
    responses_sse,
    upstream_error,
)
from toolwire.service.models_api import AGENT_MODELS, Gateway, get_gateway
from toolwire.service.schemas import ErrorResponse
from toolwire.service.state import ServiceState, get_state
from toolwire.wire import chat, responses

__all__ = ["check_fields", "router"]

WireName = Literal["chat", "responses"]
_SANE_KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


# --- which fields a body may carry --------------------------------------------------------------


def _is(*defaults: Any) -> Callable[[Any], bool]:
    return lambda value: value in defaults


def _text_format(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and value.get("type") == "text")


_READ = {
    "chat": frozenset(
        {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "temperature", "max_tokens"}
        | {"max_completion_tokens", "stream", "stream_options", "functions", "function_call"}
    ),
    "responses": frozenset(
        {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature"}
        | {"max_output_tokens", "stream", "previous_response_id", "conversation"}
    ),
}
# Sampling knobs and bookkeeping: accepted, not forwarded; the answer keeps its shape without them.
_COMMON_UNUSED = {"user", "metadata", "store", "top_p", "service_tier", "safety_identifier"}
_COMMON_UNUSED |= {"prompt_cache_key", "prompt_cache_retention", "top_logprobs"}
_UNUSED = {
    "chat": frozenset(
        _COMMON_UNUSED
        | {"seed", "frequency_penalty", "presence_penalty", "logit_bias", "reasoning_effort", "verbosity"}
    ),
    "responses": frozenset(
        _COMMON_UNUSED | {"reasoning", "truncation", "include", "stream_options", "max_tool_calls"}
    ),
}
# Fields that change what comes back: only their default is accepted.
_DEFAULT_ONLY: dict[str, dict[str, Callable[[Any], bool]]] = {
    "chat": {
        "n": _is(None, 1),
        "stop": _is(None, [], ""),
        "logprobs": _is(None, False),
        "response_format": _text_format,
        "modalities": _is(None, ["text"]),
        "audio": _is(None),
        "prediction": _is(None),
        "web_search_options": _is(None),
    },
    "responses": {
        "background": _is(None, False),
        "prompt": _is(None),
        "text": lambda value: (
            value is None or (isinstance(value, dict) and _text_format(value.get("format")))
        ),
    },
}


def check_fields(body: Mapping[str, Any], wire: WireName) -> str:
    """Check a body's top-level fields for `wire`; return its `model`.

    Raises:
        ApiError: 400 for a missing or mistyped `model` or `stream`, an unknown field, or a field
            asking for something the gateway cannot give.
    """
    for key, value in body.items():
        if key in _READ[wire] or key in _UNUSED[wire]:
            continue
        default = _DEFAULT_ONLY[wire].get(key)
        if default is None:
            raise ApiError(
                400,
                f"Unrecognized request argument supplied: {key}; remove it (see the OpenAI API reference "
                "for the fields of this endpoint).",
                param=key,
                code="unknown_parameter",
            )
        if not default(value):
            raise ApiError(
                400,
                f"Unsupported parameter: {key!r} is not supported by this gateway; "
                "leave it out or send its default.",
                param=key,
                code="unsupported_parameter",
            )
    model = body.get("model")
    if model is None:
        raise ApiError(
            400,
            "You must provide a model parameter; GET /v1/models lists them.",
            param="model",
            code="missing_required_parameter",
        )
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' must be a non-empty string.", param="model", code="invalid_type")
    if not isinstance(body.get("stream", False), bool | None):
        raise ApiError(400, "'stream' must be a boolean.", param="stream", code="invalid_type")
    options = body.get("stream_options")
    if options is not None and (
        not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool)
    ):
        raise ApiError(
            400,
            "'stream_options' must be an object such as {\"include_usage\": true}.",
            param="stream_options",
            code="invalid_type",
        )
    if wire == "chat":
        _check_parts(body.get("messages"))
    return model


def _check_parts(messages: Any) -> None:
    # The transcript holds text: an image or audio part would otherwise be dropped without a word.
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "refusal"):
                raise ApiError(
                    400,
                    f"messages.[{i}].content.[{j}] is a {kind!r} part, which this gateway cannot carry; "
                    "send text parts only.",
                    param=f"messages.[{i}].content.[{j}]",
                    code="invalid_value",
                )


async def _read_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "The request body is missing; send a JSON object.", code="missing_body")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise ApiError(
            400, f"The request body is not valid JSON ({detail}); send a JSON object.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_type")
    return body


# --- routes ----------------------------------------------------------------------------------------

router = APIRouter(prefix="/v1", tags=["gateway"])
router.include_router(models_api.router)

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "Malformed JSON, wrong types, unknown fields, or items the gateway cannot carry.",
        401: "Missing, unknown or revoked API key.",
        404: "The model does not exist here.",
        413: "The body is larger than the configured limit.",
        502: "The upstream model endpoint failed.",
        503: "The service is starting or stopping.",
    }.items()
}


def _post_doc(wire: WireName) -> dict[str, Any]:
    field_name = "messages" if wire == "chat" else "input"
    schema = {"type": "object", "required": ["model", field_name], "additionalProperties": True}
    return {
        "openapi_extra": {
            "security": [{"HTTPBearer": []}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        },
        "responses": {
            200: {
                "description": "The answer, or with `stream: true` a Server-Sent Events stream.",
                "content": {"application/json": {}, "text/event-stream": {"schema": _SSE_EVENT}},
            },
            **_ERRORS,
        },
    }


# One Server-Sent Event as OpenAPI 3.1 describes a stream item: Chat streams carry only `data`
# (ending with `[DONE]`), Responses streams name each event too.
_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}


# These two routes take only the request: FastAPI's dependency resolution costs more than the rest of
# a pass-through in the gateway (benchmarks/service.py), so they authenticate by calling the same
# function `require_principal` does.
@router.post("/chat/completions", summary="OpenAI Chat Completions", **_post_doc("chat"))
async def chat_completions(request: Request) -> Response:
    """Answer a Chat Completions request from an upstream model or from the server's own tool loop."""
    return await _serve(request, "chat")


@router.post("/responses", summary="OpenAI Responses", **_post_doc("responses"))
async def create_response(request: Request) -> Response:
    """Answer a Responses request from an upstream model or from the server's own tool loop."""
    return await _serve(request, "responses")


async def _serve(request: Request, wire: WireName) -> Response:
    state = get_state(request)
    principal = await principal_of(request, state)
    body = await _read_body(request)
    name = check_fields(body, wire)
    try:
        parsed = chat.parse_request(body) if wire == "chat" else responses.parse_request(body)
    except WireFormatError as exc:
        raise gateway_error(exc) from None
    transcript, tools, options, stream = parsed
    gateway = get_gateway(state)
    if name in AGENT_MODELS:
        feed = await _start_run(request, principal, state, gateway, name, transcript, tools)
        if not stream:
            # `wait`, not `await`: a client that goes away does not cut the run off.
            await asyncio.wait({feed.task})
            if feed.task.cancelled():  # by the shutdown, after its grace period
                raise gateway_error(asyncio.CancelledError())
            return JSONResponse(_render(wire, await _outcome(feed.task), name))
    else:
        model = gateway.upstream(name)
        if not stream:
            return JSONResponse(
                _render(wire, await _outcome(model.request(transcript, tools, options)), name)
            )
        feed = Feed(_upstream_events(model, transcript, tools, options))
    return await _stream(feed, wire, name, include_usage=_include_usage(body))


async def _start_run(
    request: Request,
    principal: Principal,
    state: ServiceState,
    gateway: Gateway,
    name: str,
    transcript: list[Message],
    tools: list[ToolSpec],
) -> Feed:
    if tools:
        raise ApiError(
            400,
            f"The model {name!r} runs the server's own tools, so it takes no 'tools'; leave them out, "
            "or name an upstream model (GET /v1/models) to run your own.",
            param="tools",
            code="unsupported_parameter",
        )
    assistant = state.started
    runner = await assistant.runner_for(principal.tenant_id)
    values: dict[str, Any] = principal.context_values()
    key = request.headers.get("idempotency-key", "")
    if _SANE_KEY.match(key):
        # A retry under the same key replays the writes instead of repeating them. Scoped to the
        # user, so two users' keys never meet.
        values["request_id"] = f"gateway:{principal.user_id}:{key}"
    return gateway.run(runner, transcript, assistant.context(**values))


async def _upstream_events(
    model: Model, transcript: list[Message], tools: list[ToolSpec], options: RequestOptions
) -> AsyncIterator[StreamEvent]:
    stream = cast(AsyncGenerator[StreamEvent], model.stream(transcript, tools, options))
    try:
        async for event in stream:
            yield event
    except ModelError as exc:
        raise upstream_error(exc) from None
    finally:
        await stream.aclose()


async def _outcome(turn: Awaitable[Turn]) -> Turn:
    try:
        result = await turn
    except ModelError as exc:
        raise upstream_error(exc) from None
    except ApiError:
        raise
    except Exception as exc:
        raise gateway_error(exc) from None
    return result


def _render(wire: WireName, turn: Turn, name: str) -> dict[str, Any]:
    turn = finished(turn)
    if wire == "chat":
        return chat.render_response(turn, name, f"chatcmpl-{uuid.uuid4().hex}")
    return responses.render_response(turn, name, f"resp_{uuid.uuid4().hex}")


def _include_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


async def _stream(feed: Feed, wire: WireName, name: str, *, include_usage: bool) -> Response:
    try:
        # A failure before the first event still gets its own status, not a 200 with an error in it.
        await feed.ready()
    except BaseException as exc:
        feed.release()
        if not isinstance(exc, Exception):
            raise
        raise gateway_error(exc) from None
    if wire == "chat":
        events = chat_sse(feed, model=name, id=f"chatcmpl-{uuid.uuid4().hex}", include_usage=include_usage)
    else:
        events = responses_sse(feed, model=name, id=f"resp_{uuid.uuid4().hex}")
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)
