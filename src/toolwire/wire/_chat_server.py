"""Chat Completions, server side: read a request body, render a turn as a response or a stream.

Used by the gateway and the scripted test server; the client side is `toolwire.wire.chat`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from toolwire.exceptions import WireFormatError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    UserMessage,
)
from toolwire.wire._chat_shapes import FINISH_REASONS, message_to_wire, text_of
from toolwire.wire._common import arguments_text

__all__ = ["parse_request", "render_response", "render_stream"]


def _content(message: dict[str, Any], at: str, *, required: bool = True) -> str | None:
    try:
        text = text_of(message.get("content"))
    except TypeError:
        text = None
        required = True
    if text is None and required:
        raise WireFormatError(f"{at}.content must be a string or a list of text parts.", param=at)
    return text


def _parse_messages(messages: Any) -> list[Message]:
    if not isinstance(messages, list) or not messages:
        raise WireFormatError("'messages' must be a non-empty array of messages.", param="messages")
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
                    raise WireFormatError(
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
                raise WireFormatError(f"{at}.tool_call_id must be a string.", param=f"{at}.tool_call_id")
            content = _content(message, at) or ""
            transcript.append(ToolResult(call_id=call_id, name=names.get(call_id, ""), content=content))
        elif role == "function":
            content = _content(message, at) or ""
            name = str(message.get("name") or names.get(legacy_id, ""))
            transcript.append(ToolResult(call_id=legacy_id, name=name, content=content))
        else:
            raise WireFormatError(
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
        raise WireFormatError("'tools' must be an array of function tools.", param="tools")
    specs = []
    for i, raw in enumerate(raw_tools):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or raw.get("type") != "function" or not isinstance(function, dict):
            raise WireFormatError(
                f"tools.[{i}] is not a function tool; only function tools are supported.",
                param=f"tools.[{i}]",
            )
        name = function.get("name")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(name, str) or not name or not isinstance(parameters, dict):
            raise WireFormatError(
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
        raise WireFormatError("'tool_choice' must be a string or an object.", param="tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise WireFormatError("'parallel_tool_calls' must be a boolean.", param="parallel_tool_calls")
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, int | float):
        raise WireFormatError("'temperature' must be a number.", param="temperature")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and not isinstance(max_tokens, int):
        raise WireFormatError("'max_tokens' must be an integer.", param="max_tokens")
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
        WireFormatError: the body is not a readable request; the message names the field.
    """
    if not isinstance(body, dict):
        raise WireFormatError("The request body must be a JSON object.")
    transcript = _parse_messages(body.get("messages"))
    return transcript, _parse_tools(body), _parse_options(body), bool(body.get("stream"))


def _finish_reason(turn: Turn) -> str:
    if turn.finish_reason in FINISH_REASONS:
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
    message = message_to_wire(turn.message)
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
