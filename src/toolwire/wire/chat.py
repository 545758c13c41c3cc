"""Chat Completions on the wire, both sides, as plain dicts.

Client side: `build_request`, `parse_response` and `ChatStreamAssembler` turn the canonical
transcript into a request body and a response (or its stream chunks) back into a `Turn`.
Server side: `parse_request`, `render_response` and `render_stream` do the reverse, for the
gateway and the scripted test server. No SDK object model sits in between: measured, it costs
about three times a bare loop per round.

Calls are detected from `message.tool_calls`, never from `finish_reason` (OpenAI answers `stop`
for a named `tool_choice`). The module runs past 400 lines on purpose: both directions of one wire
format belong together, so a change to one side is read against the other in the same file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from toolwire.exceptions import ModelHTTPError, ModelResponseError, WireFormatError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    UserMessage,
)
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

_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


InvalidRequestError = WireFormatError
"""A Chat Completions request body that cannot be read; the gateway answers it with a 400."""


# --- client side -------------------------------------------------------------------------------


def _message_to_wire(message: Message) -> dict[str, Any]:
    if isinstance(message, ToolResult):
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if isinstance(message, AssistantMessage):
        if not message.tool_calls:
            return {"role": "assistant", "content": message.text or ""}
        # Resent unchanged: ids, names and argument strings exactly as the model gave them.
        return {
            "role": "assistant",
            "content": message.text,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


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
    body: dict[str, Any] = {"model": model, "messages": [_message_to_wire(m) for m in transcript]}
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


def _text_of(content: Any) -> str | None:
    """Message content as one string: a string, or the text of a list of parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") in ("text", None)
        )
    raise TypeError("content")


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
        text = _text_of(message.get("content")) or _text_of(message.get("refusal")) or None
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


# --- server side -------------------------------------------------------------------------------


def _content(message: dict[str, Any], at: str, *, required: bool = True) -> str | None:
    try:
        text = _text_of(message.get("content"))
    except TypeError:
        text = None
        required = True
    if text is None and required:
        raise InvalidRequestError(f"{at}.content must be a string or a list of text parts.", param=at)
    return text


def _parse_messages(messages: Any) -> list[Message]:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty array of messages.", param="messages")
    transcript: list[Message] = []
    names: dict[str, str] = {}  # call id -> tool name, to name each tool result
    legacy_id = ""
    for i, message in enumerate(messages):
        at = f"messages.[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            transcript.append(SystemMessage(content=_content(message, at) or ""))
        elif role == "user":
            transcript.append(UserMessage(content=_content(message, at) or ""))
        elif role == "assistant":
            calls = []
            for j, raw in enumerate(message.get("tool_calls") or ()):
                function = raw.get("function") if isinstance(raw, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise InvalidRequestError(
                        f"{at}.tool_calls.[{j}] must have a function with a name.", param=f"{at}.tool_calls"
                    )
                call = ToolCall(
                    id=str(raw.get("id") or ""),
                    name=function["name"],
                    arguments=arguments_text(function.get("arguments")),
                )
                names[call.id] = call.name
                calls.append(call)
            legacy = message.get("function_call")
            if isinstance(legacy, dict) and not calls:
                legacy_id = f"call_legacy_{i}"
                calls.append(
                    ToolCall(
                        id=legacy_id,
                        name=str(legacy.get("name") or ""),
                        arguments=arguments_text(legacy.get("arguments")),
                    )
                )
                names[legacy_id] = calls[0].name
            text = _content(message, at, required=False) or None
            transcript.append(AssistantMessage(text=text, tool_calls=tuple(calls)))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise InvalidRequestError(f"{at}.tool_call_id must be a string.", param=f"{at}.tool_call_id")
            content = _content(message, at) or ""
            transcript.append(ToolResult(call_id=call_id, name=names.get(call_id, ""), content=content))
        elif role == "function":
            content = _content(message, at) or ""
            name = str(message.get("name") or names.get(legacy_id, ""))
            transcript.append(ToolResult(call_id=legacy_id, name=name, content=content))
        else:
            raise InvalidRequestError(
                f"{at}.role must be one of 'system', 'developer', 'user', 'assistant' or 'tool'.",
                param=f"{at}.role",
            )
    return transcript


def _parse_tools(body: dict[str, Any]) -> list[ToolSpec]:
    raw_tools = body.get("tools")
    if raw_tools is None and isinstance(body.get("functions"), list):
        raw_tools = [{"type": "function", "function": f} for f in body["functions"]]
    if raw_tools is None:
        return []
    if not isinstance(raw_tools, list):
        raise InvalidRequestError("'tools' must be an array of function tools.", param="tools")
    specs = []
    for i, raw in enumerate(raw_tools):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or raw.get("type") != "function" or not isinstance(function, dict):
            raise InvalidRequestError(
                f"tools.[{i}] is not a function tool; only function tools are supported.",
                param=f"tools.[{i}]",
            )
        name = function.get("name")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(name, str) or not name or not isinstance(parameters, dict):
            raise InvalidRequestError(
                f"tools.[{i}].function needs a name and an object of parameters.",
                param=f"tools.[{i}].function",
            )
        strict = function.get("strict")
        specs.append(
            ToolSpec(
                name=name,
                description=str(function.get("description") or ""),
                parameters=parameters,
                strict=strict if isinstance(strict, bool) else None,
            )
        )
    return specs


def _parse_options(body: dict[str, Any]) -> RequestOptions:
    tool_choice = body.get("tool_choice")
    legacy = body.get("function_call")
    if tool_choice is None and legacy is not None:
        tool_choice = legacy if isinstance(legacy, str) else {"type": "function", "function": legacy}
    if tool_choice is not None and not isinstance(tool_choice, str | dict):
        raise InvalidRequestError("'tool_choice' must be a string or an object.", param="tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidRequestError("'parallel_tool_calls' must be a boolean.", param="parallel_tool_calls")
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, int | float):
        raise InvalidRequestError("'temperature' must be a number.", param="temperature")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and not isinstance(max_tokens, int):
        raise InvalidRequestError("'max_tokens' must be an integer.", param="max_tokens")
    return RequestOptions(
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        temperature=None if temperature is None else float(temperature),
        max_tokens=max_tokens,
    )


def parse_request(body: Any) -> tuple[list[Message], list[ToolSpec], RequestOptions, bool]:
    """Read a `/chat/completions` request body: (transcript, tools, options, stream).

    Deprecated `functions`, `function_call` and `role: "function"` messages are accepted and
    translated. The model name is left to the caller.

    Raises:
        InvalidRequestError: the body is not a readable request; the message names the field.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    transcript = _parse_messages(body.get("messages"))
    return transcript, _parse_tools(body), _parse_options(body), bool(body.get("stream"))


def _finish_reason(turn: Turn) -> str:
    if turn.finish_reason in _FINISH_REASONS:
        return turn.finish_reason
    return "tool_calls" if turn.message.tool_calls else "stop"


def _wire_usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


def render_response(turn: Turn, model: str, id: str) -> dict[str, Any]:
    """Render a turn as a non-streaming `chat.completion` body."""
    message = _message_to_wire(turn.message)
    message.setdefault("refusal", None)
    return {
        "id": id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(turn)}],
        "usage": _wire_usage(turn.usage),
    }


def _pieces(text: str, split: int | None) -> list[str]:
    if not split or len(text) <= split:
        return [text]
    return [text[i : i + split] for i in range(0, len(text), split)]


def render_stream(
    turn: Turn, model: str, id: str, *, split: int | None = 16, include_usage: bool = True
) -> Iterator[dict[str, Any]]:
    """Render a turn as `chat.completion.chunk` objects, the way OpenAI streams it.

    Text comes first, then each call: its first fragment carries `id`, `type` and `name` with empty
    arguments, later fragments only `index` and a piece of the arguments. Then the chunk with the
    `finish_reason`, then (if asked) the usage chunk. The caller encodes them and adds `[DONE]`.

    Args:
        turn: The turn to send.
        model: The model name echoed in every chunk.
        id: The completion id, the same on every chunk.
        split: The largest piece of text or arguments per chunk; `None` sends each whole.
        include_usage: Send the usage chunk (`stream_options.include_usage`).
    """
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.message.text or "", split):
        if piece:
            yield chunk({"content": piece})
    for index, call in enumerate(turn.message.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(call.arguments, split):
            if piece:
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _finish_reason(turn))
    if include_usage:
        yield {
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _wire_usage(turn.usage),
        }
