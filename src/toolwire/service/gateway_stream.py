"""How the gateway produces an answer and streams it: a feed of model events, written on either wire.

A `Feed` runs a turn's events (`TextDelta`..., then one `TurnComplete`) in a task of its own and
hands them to one response. The gateway waits for the first event before it answers, so a failure
that comes before any content still gets its proper HTTP status; after that, `chat_sse` and
`responses_sse` write each text delta the moment it arrives, then the calls, the finish and the
usage. A failure after the 200 travels as the wire's error form: a `data: {"error": ...}` chunk
and no `[DONE]` on Chat, `error` then `response.failed` on Responses.

A feed of the upstream model stops when its client goes away (nothing was done that needs
finishing); a feed of the server's own tool loop is `detached` and runs to its end, so a write
that started is completed and recorded rather than cut off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

from toolwire.exceptions import (
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    RouteUnsupportedError,
    ToolsUnsupportedError,
    WireFormatError,
)
from toolwire.messages import TextDelta, Turn, TurnComplete
from toolwire.models.base import StreamEvent
from toolwire.models.routes import error_fields
from toolwire.service.errors import ApiError, error_for
from toolwire.wire.responses import ResponsesEventWriter, usage_json
from toolwire.wire.sse import encode_event

__all__ = ["Feed", "chat_sse", "finished", "gateway_error", "responses_sse", "upstream_error"]

logger = logging.getLogger("toolwire.service.gateway")

_END = object()
# Upstream statuses that speak of toolwire's own credentials or proxy, not of the client's request.
_NOT_THE_CLIENTS = frozenset({401, 403, 407})
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def upstream_error(exc: ModelError) -> ApiError:
    """The answer to an upstream failure: its own 4xx when the request was at fault, else 502.

    The upstream's address and toolwire's configuration stay in the log; the client learns what
    failed and what to do.
    """
    if (
        isinstance(exc, ModelHTTPError)
        and not isinstance(exc, RouteUnsupportedError | ToolsUnsupportedError)
        and 400 <= exc.status_code < 500
        and exc.status_code not in _NOT_THE_CLIENTS
    ):
        message, code, param = error_fields(exc.body)
        return ApiError(
            exc.status_code,
            f"The upstream model refused the request: {message}",
            param=param if isinstance(param, str) else None,
            code=code if isinstance(code, str) else None,
        )
    logger.warning("Upstream model failed: %s", exc)
    if isinstance(exc, ModelHTTPError):
        what = f"answered HTTP {exc.status_code}"
    elif isinstance(exc, ModelConnectionError):
        what = "could not be reached or broke off"
    elif isinstance(exc, ModelResponseError):
        what = "answered something that is not a model turn"
    else:
        what = "failed"
    return ApiError(
        502,
        f"The model endpoint behind this gateway {what}; retry, and report the x-request-id if it persists.",
        code="upstream_error",
    )


def gateway_error(exc: BaseException) -> ApiError:
    """The API error answering an exception raised while the gateway served a request."""
    if isinstance(exc, WireFormatError):
        return ApiError(400, str(exc), param=exc.param, code="invalid_value")
    if isinstance(exc, RecursionError):
        return ApiError(400, "The request nests too deeply to be read; flatten it.", code="invalid_value")
    if isinstance(exc, ModelError):
        return upstream_error(exc)
    error = error_for(exc)
    if error.status >= 500 and not isinstance(exc, ApiError | asyncio.CancelledError):
        logger.error("Gateway request failed", exc_info=exc)
    return error


def finished(turn: Turn) -> Turn:
    """The turn as the gateway sends it: `tool_calls` when it has calls, else `stop` or why it stopped."""
    if turn.message.tool_calls:
        reason = "tool_calls"
    else:
        reason = turn.finish_reason if turn.finish_reason in _INCOMPLETE else "stop"
    if reason == turn.finish_reason:
        return turn
    return Turn(message=turn.message, usage=turn.usage, route=turn.route, finish_reason=reason)


class Feed:
    """A turn's events, produced by a task of its own and read by one response.

    Args:
        events: `TextDelta`s, then one `TurnComplete`.
        detached: Keep producing when the reader goes away (the server's own tool loop).
        timeout: Seconds the whole production may take.
    """

    def __init__(
        self, events: AsyncIterator[StreamEvent], *, detached: bool = False, timeout: float | None = None
    ) -> None:
        self.detached = detached
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._head: object | None = None
        self.task: asyncio.Task[Turn] = asyncio.create_task(self._produce(events, timeout))
        """Its result is the complete turn; its exception is the failure."""
        # A callback, not a `finally`: it also runs for a task cancelled before it started.
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Turn]) -> None:
        self._queue.put_nowait(_END)
        if not task.cancelled():
            task.exception()  # retrieved: a reader that went away no longer asks for it

    async def _produce(self, events: AsyncIterator[StreamEvent], timeout: float | None) -> Turn:
        turn: Turn | None = None
        # Closed on every way out: a cancelled feed closes the model's stream (and its connection) at once.
        stream = cast(AsyncGenerator[StreamEvent], events)
        try:
            async with asyncio.timeout(timeout):
                async for event in stream:
                    if isinstance(event, TurnComplete):
                        turn = event.turn
                    self._queue.put_nowait(event)
        finally:
            await stream.aclose()
        if turn is None:
            raise ModelResponseError("The model's stream ended without a complete turn; retry the request.")
        return turn

    async def ready(self) -> None:
        """Wait for the first event; raise the failure if production failed before any."""
        if self._head is None:
            self._head = await self._queue.get()
            if self._head is _END:
                self._raise()

    async def next(self) -> StreamEvent | None:
        """The next event; `None` once production ended after its `TurnComplete`.

        Raises:
            Exception: whatever made production fail.
        """
        if self._head is not None:
            item, self._head = self._head, None
        else:
            item = await self._queue.get()
        if item is _END:
            self._raise()
            return None
        return cast(StreamEvent, item)

    def _raise(self) -> None:
        if self.task.cancelled():
            # Only a stopping service cancels a feed that still has its reader: say so, as an error.
            raise error_for(asyncio.CancelledError())
        failure = self.task.exception()
        if failure is not None:
            raise failure

    def release(self) -> None:
        """The reader is done: stop production unless the feed is detached."""
        if not self.detached and not self.task.done():
            self.task.cancel()


def _unsent(text: str | None, sent: str) -> str:
    # Text a model only delivered with its complete turn (a held-back reply) still goes out.
    return text[len(sent) :] if text and text.startswith(sent) else ""


def _data(payload: Any, event: str | None = None) -> str:
    return encode_event(json.dumps(payload, ensure_ascii=False), event=event)


async def chat_sse(feed: Feed, *, model: str, id: str, include_usage: bool) -> AsyncIterator[str]:
    """The feed as `chat.completion.chunk` lines, then `data: [DONE]` (or an error chunk instead).

    Args:
        feed: The turn's events; released when the stream ends or its client goes away.
        model: The model name echoed in every chunk.
        id: The completion id, the same on every chunk.
        include_usage: Send the usage chunk before `[DONE]` (`stream_options.include_usage`).
    """
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data(
            {
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [choice],
            }
        )

    sent: list[str] = []
    try:
        yield chunk({"role": "assistant", "content": ""})
        while (event := await feed.next()) is not None:
            if isinstance(event, TextDelta):
                if event.text:
                    sent.append(event.text)
                    yield chunk({"content": event.text})
                continue
            turn = finished(event.turn)
            if rest := _unsent(turn.message.text, "".join(sent)):
                yield chunk({"content": rest})
            for index, call in enumerate(turn.message.tool_calls):
                head = {"index": index, "id": call.id, "type": "function"}
                yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
                if call.arguments:
                    yield chunk({"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]})
            yield chunk({}, turn.finish_reason)
            if include_usage:
                usage = {
                    "prompt_tokens": turn.usage.input_tokens,
                    "completion_tokens": turn.usage.output_tokens,
                    "total_tokens": turn.usage.total_tokens,
                }
                yield _data(
                    {
                        "id": id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            yield "data: [DONE]\n\n"
            return
    except Exception as exc:
        # The status line is long sent: the error is the stream's last chunk, and no [DONE] follows.
        yield _data(gateway_error(exc).body())
    finally:
        feed.release()


async def responses_sse(feed: Feed, *, model: str, id: str) -> AsyncIterator[str]:
    """The feed as Responses events (`event: <type>` and `data:`), ending in `response.completed`.

    A failure ends the stream with `error` and `response.failed` instead.

    Args:
        feed: The turn's events; released when the stream ends or its client goes away.
        model: The model name echoed in the response snapshots.
        id: The response id.
    """
    writer = ResponsesEventWriter(id=id, model=model)
    sent: list[str] = []
    try:
        for started in writer.start():
            yield _data(started, started["type"])
        while (event := await feed.next()) is not None:
            if isinstance(event, TextDelta):
                if event.text:
                    sent.append(event.text)
                    for written in writer.text(event.text):
                        yield _data(written, written["type"])
                continue
            turn = finished(event.turn)
            events = writer.text(rest) if (rest := _unsent(turn.message.text, "".join(sent))) else []
            for key, call in enumerate(turn.message.tool_calls):
                events += writer.open_call(key, call_id=call.id, name=call.name)
                events += writer.arguments(key, call.arguments) if call.arguments else []
                events += writer.close_call(key)
            reason = _INCOMPLETE.get(turn.finish_reason or "")
            events += writer.complete(usage=usage_json(turn.usage), incomplete_reason=reason)
            for written in events:
                yield _data(written, written["type"])
            return
    except Exception as exc:
        error = gateway_error(exc)
        for written in writer.fail(code=error.code or error.type, message=error.message):
            yield _data(written, written["type"])
    finally:
        feed.release()
