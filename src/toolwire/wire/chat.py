"""Chat Completions on the wire, both sides, as plain dicts.

Client side: `build_request`, `parse_response` and `ChatStreamAssembler` turn the canonical
transcript into a request body and a response (or its stream chunks) back into a `Turn`.
Server side (in `_chat_server`, re-exported here): `parse_request`, `render_response` and
`render_stream` do the reverse, for the gateway and the scripted test server. No SDK object model
sits in between: measured, it costs about three times a bare loop per round.

Calls are detected from `message.tool_calls`, never from `finish_reason` (OpenAI answers `stop`
for a named `tool_choice`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolwire.exceptions import ModelHTTPError, ModelResponseError, WireFormatError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    TextDelta,
    ToolCall,
    ToolSpec,
    Turn,
    Usage,
)
from toolwire.wire._chat_server import parse_request, render_response, render_stream
from toolwire.wire._chat_shapes import message_to_wire, text_of
from toolwire.wire._common import arguments_text, usage_from

__all__ = [
    "ChatStreamAssembler",
    "InvalidRequestError",
    "build_request",
    "parse_request",
    "parse_response",
    "render_response",
    "render_stream",
]

InvalidRequestError = WireFormatError
"""A Chat Completions request body that cannot be read; the gateway answers it with a 400."""


# --- client side -------------------------------------------------------------------------------


def _tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name}
    if spec.description:
        function["description"] = spec.description
    function["parameters"] = spec.parameters
    if spec.strict is not None:
        function["strict"] = spec.strict
    return {"type": "function", "function": function}


def build_request(
    model: str,
    transcript: Sequence[Message],
    tools: Sequence[ToolSpec],
    options: RequestOptions,
    stream: bool,
) -> dict[str, Any]:
    """Build a `/chat/completions` request body.

    Args:
        model: The model name sent upstream.
        transcript: The canonical transcript; tool results must already follow their assistant turn.
        tools: The tools offered; none means the model must answer in text, and no `tools` key is sent.
        options: `tool_choice` and `parallel_tool_calls` are sent only when set and tools are offered.
        stream: Ask for a stream, with usage in its last chunk.
    """
    body: dict[str, Any] = {"model": model, "messages": [message_to_wire(m) for m in transcript]}
    if tools:
        body["tools"] = [_tool_to_wire(spec) for spec in tools]
        if options.tool_choice is not None:
            body["tool_choice"] = options.tool_choice
        if options.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = options.parallel_tool_calls
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _generated_id(position: int, taken: set[str]) -> str:
    """A stable id for a call that came without one: its position, made unique within the turn."""
    candidate, n = f"call_{position}", 0
    while candidate in taken:
        n += 1
        candidate = f"call_{position}_{n}"
    return candidate


def _stream_error(error: Any) -> ModelHTTPError | ModelResponseError:
    message = error.get("message") if isinstance(error, dict) else None
    text = str(message or error)
    status = error.get("code") if isinstance(error, dict) else None
    if isinstance(status, int) and 400 <= status < 600:  # vLLM puts the HTTP status in `code`
        return ModelHTTPError(
            f"The model endpoint failed with HTTP {status}: {text}; check the endpoint's logs and retry.",
            status_code=status,
            body=json.dumps(error),
        )
    return ModelResponseError(f"The model endpoint reported an error: {text}; check its logs and retry.")


def parse_response(body: dict[str, Any]) -> Turn:
    """Read a non-streaming `chat.completion` body as a `Turn`.

    A message with neither text nor calls is a clean empty answer (`text=None`, no calls).

    Raises:
        ModelHTTPError: the body is an error object carrying an HTTP status.
        ModelResponseError: the body is an error object, or not a chat completion.
    """
    if isinstance(body, dict) and "error" in body and body["error"]:
        raise _stream_error(body["error"])
    try:
        choice = body["choices"][0]
        message = choice["message"]
        text = text_of(message.get("content")) or text_of(message.get("refusal")) or None
        raw_calls = message.get("tool_calls") or []
        taken = {c.get("id") for c in raw_calls if c.get("id")}
        calls = []
        for position, raw in enumerate(raw_calls):
            function = raw.get("function") or {}
            calls.append(
                ToolCall(
                    id=raw.get("id") or _generated_id(position, taken),
                    name=function.get("name") or "",
                    arguments=arguments_text(function.get("arguments")),
                )
            )
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelResponseError(
            "The model endpoint answered something that is not a chat completion; "
            "check that the base URL points at an OpenAI-compatible API."
        ) from exc
    return Turn(
        message=AssistantMessage(text=text, tool_calls=tuple(calls)),
        usage=usage_from(body.get("usage"), "prompt_tokens", "completion_tokens"),
        route="chat",
        finish_reason=finish,
    )


class _CallBuffer:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class ChatStreamAssembler:
    """Reassemble `chat.completion.chunk` objects into text deltas and one complete `Turn`.

    Tool-call fragments are keyed by (choice index, tool-call index); the first non-empty id and
    name win and argument pieces are concatenated. Only choice 0 becomes the turn. A call whose id
    never arrives gets the stable id `call_<position>`.
    """

    __slots__ = ("_calls", "_done", "_finish", "_last_index", "_text", "_usage")

    def __init__(self) -> None:
        self._calls: dict[tuple[int, int], _CallBuffer] = {}
        self._text: list[str] = []
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._done = False
        self._last_index: dict[int, int] = {}

    def done(self) -> None:
        """Record that the stream's terminator (`data: [DONE]`) arrived."""
        self._done = True

    def feed(self, chunk: dict[str, Any]) -> list[TextDelta]:
        """Take one decoded chunk; return the text it adds to choice 0.

        Raises:
            ModelHTTPError: the chunk is an error object carrying an HTTP status.
            ModelResponseError: the chunk is an error object or has an unreadable shape.
        """
        try:
            if "error" in chunk and chunk["error"]:
                raise _stream_error(chunk["error"])
            usage = chunk.get("usage")
            if usage:
                self._usage = usage_from(usage, "prompt_tokens", "completion_tokens")
            deltas: list[TextDelta] = []
            for choice in chunk.get("choices") or ():
                index = choice.get("index") or 0
                delta = choice.get("delta") or {}
                text = delta.get("content") or delta.get("refusal")
                if text and index == 0:
                    self._text.append(text)
                    deltas.append(TextDelta(text=text))
                fragments = delta.get("tool_calls")
                if fragments:
                    self._feed_calls(index, fragments)
                if choice.get("finish_reason") and index == 0:
                    self._finish = choice["finish_reason"]
            return deltas
        except (TypeError, AttributeError, ValueError) as exc:
            raise ModelResponseError(
                "The model endpoint sent a stream chunk that cannot be read; "
                "check that the base URL points at an OpenAI-compatible API."
            ) from exc

    def _feed_calls(self, choice: int, fragments: list[dict[str, Any]]) -> None:
        for fragment in fragments:
            fragment_id = fragment.get("id") or ""
            index = fragment.get("index")
            if index is None:
                # Servers that omit the (required) index: a new id starts a new call.
                last = self._last_index.get(choice, -1)
                known = any(b.id == fragment_id for b in self._calls.values())
                index = last + 1 if last < 0 or (fragment_id and not known) else last
            self._last_index[choice] = index
            buffer = self._calls.get((choice, index))
            if buffer is None:
                buffer = self._calls[(choice, index)] = _CallBuffer()
            if fragment_id and not buffer.id:
                buffer.id = fragment_id
            function = fragment.get("function")
            if function:
                name = function.get("name")
                if name and not buffer.name:
                    buffer.name = name
                piece = function.get("arguments")
                if piece:
                    buffer.arguments.append(arguments_text(piece))

    def finish(self) -> Turn:
        """Return the complete turn once the stream has ended.

        Raises:
            ModelResponseError: the stream ended without a `finish_reason` or `[DONE]`, so a
                half-received call is never run.
        """
        if not self._done and self._finish is None:
            raise ModelResponseError(
                "The model endpoint's stream was cut off before the turn was complete; retry the request."
            )
        buffers = [b for (choice, _), b in sorted(self._calls.items()) if choice == 0]
        taken = {b.id for b in buffers if b.id}
        calls = tuple(
            ToolCall(id=b.id or _generated_id(i, taken), name=b.name, arguments="".join(b.arguments))
            for i, b in enumerate(buffers)
        )
        return Turn(
            message=AssistantMessage(text="".join(self._text) or None, tool_calls=calls),
            usage=self._usage or Usage(requests=1),
            route="chat",
            finish_reason=self._finish,
        )
