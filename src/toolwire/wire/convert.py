"""Chat Completions <-> Responses for application-defined functions: requests, responses, streams.

Everything works on the wire dicts directly, so the gateway and route fallback can translate a
body without a round trip through the canonical transcript. The mapping follows the field table of
the wire-format reference: `tools[].function` <-> flat tools (`strict` absent on Chat becomes an
explicit `false`); `tool_calls[].id` <-> `function_call.call_id` (the `fc_...` item id is derived
from it); `role: "tool"` <-> `function_call_output`; a leading system message <-> `instructions`;
`finish_reason` <-> `status` and `incomplete_details`; usage field by field. Parallel calls stay
together: one assistant message on Chat, consecutive `function_call` items on Responses.

What has no counterpart is refused with a `ConversionError` naming the item and its position,
never dropped: hosted tools and their items, encrypted reasoning, images in tool results, and Chat
parameters Responses lacks. Plain reasoning items are skipped (Chat has no place for them), and
text that Responses places after a call moves in front of it in the one Chat message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolwire.messages import ToolCall
from toolwire.wire._convert_common import (
    ConversionError,
    chat_text,
    check_skippable,
    content_to_chat,
    content_to_responses,
    converting,
    finish_of_status,
    kind_of,
    refuse,
    responses_text,
    status_of_finish,
    usage_to_chat,
    usage_to_responses,
)
from toolwire.wire._convert_stream import ChatToResponsesStream, ResponsesToChatStream
from toolwire.wire._responses_shapes import (
    JSON,
    arguments_text,
    digest,
    function_call_item,
    response_object,
    tool_choice_to_chat,
    tool_choice_to_responses,
)

__all__ = [
    "ChatToResponsesStream",
    "ConversionError",
    "ResponsesToChatStream",
    "chat_request_to_responses",
    "chat_response_to_responses",
    "responses_request_to_chat",
    "responses_response_to_chat",
]

# Chat parameters Responses cannot reproduce, with the value that means "not used".
_CHAT_ONLY = {
    "n": 1,
    "stop": None,
    "seed": None,
    "logit_bias": None,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logprobs": False,
    "top_logprobs": None,
    "audio": None,
    "prediction": None,
    "web_search_options": None,
    "functions": None,
    "function_call": None,
}
# Responses parameters that rely on state or features Chat does not have.
_RESPONSES_ONLY = ("previous_response_id", "conversation", "background", "prompt")
_COPIED = ("parallel_tool_calls", "temperature", "top_p", "user", "stream")


# --- Chat -> Responses -------------------------------------------------------------------------


def _assistant_items(message: JSON, at: str) -> list[JSON]:
    if message.get("function_call"):
        raise refuse(
            f"{at}.function_call", "is the deprecated form of tool_calls, which this bridge does not read"
        )
    text, refusal = chat_text(message.get("content"), at)
    refusal += str(message.get("refusal") or "")
    parts: list[JSON] = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    parts += [{"type": "refusal", "refusal": refusal}] if refusal else []
    items = [{"type": "message", "role": "assistant", "content": parts}] if parts else []
    for j, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise refuse(f"{at}.tool_calls[{j}]", f"is a {kind_of(call)!r} call with no Responses equivalent")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise ConversionError(f"{at}.tool_calls[{j}] has no id; send the id the model gave.", param=at)
        canonical = ToolCall(
            id=call["id"],
            name=str(function.get("name") or ""),
            arguments=arguments_text(function.get("arguments")),
        )
        items.append(function_call_item(canonical))
    return items


def _message_to_items(message: Any, at: str) -> list[JSON]:
    role = message.get("role") if isinstance(message, dict) else None
    if role in ("system", "developer", "user"):
        return [
            {"type": "message", "role": role, "content": content_to_responses(message.get("content"), at)}
        ]
    if role == "assistant":
        return _assistant_items(message, at)
    if role == "tool":
        if not isinstance(message.get("tool_call_id"), str) or not message["tool_call_id"]:
            raise ConversionError(f"{at} is a tool message without tool_call_id; send it.", param=at)
        content = message.get("content")
        output: str | list[JSON] = content if isinstance(content, str) else []
        if not isinstance(content, str):
            text, _ = chat_text(content, at)  # tool content is text only, as on Chat
            output = [{"type": "input_text", "text": text}]
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": output}]
    raise refuse(at, f"has role {role!r}, which has no Responses equivalent")


def _tool_to_responses(tool: Any, i: int) -> JSON:
    function = tool.get("function") if isinstance(tool, dict) else None
    if kind_of(tool) != "function" or not isinstance(function, dict):
        raise refuse(f"tools[{i}]", f"is a {kind_of(tool)!r} tool with no Responses function form")
    flat: JSON = {"type": "function", "name": function.get("name")}
    if function.get("description"):
        flat["description"] = function["description"]
    flat["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    flat["strict"] = bool(function.get("strict"))  # absent on Chat means false; Responses needs it said
    return flat


def _format_to_responses(response_format: Any) -> JSON:
    if kind_of(response_format) == "json_schema":
        schema = response_format.get("json_schema") or {}
        return {"format": {"type": "json_schema", **schema}}
    return {"format": {"type": kind_of(response_format)}}


def chat_request_to_responses(body: Mapping[str, Any]) -> JSON:
    """Translate a `/chat/completions` request body into a `/responses` one.

    A leading system message becomes `instructions`; every other message becomes input items.
    `store` is sent as `false` unless the Chat request asked for storage, as Chat's default is.

    Raises:
        ConversionError: a message, content part, tool or parameter without a Responses form.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ConversionError("'messages' must be an array of messages.", param="messages")
    for key, unused in _CHAT_ONLY.items():
        if body.get(key) is not None and body.get(key) != unused:
            raise refuse(key, "has no Responses equivalent", quote=True)
    out: JSON = {"model": body.get("model")}
    first = messages[0] if messages else None
    lead = 1 if isinstance(first, dict) and first.get("role") == "system" else 0
    if lead:
        out["instructions"] = chat_text(first.get("content") if first else None, "messages[0]")[0]
    out["input"] = [
        item for i in range(lead, len(messages)) for item in _message_to_items(messages[i], f"messages[{i}]")
    ]
    if body.get("tools"):
        out["tools"] = [_tool_to_responses(tool, i) for i, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        with converting():
            out["tool_choice"] = tool_choice_to_responses(body["tool_choice"])
    out.update((key, body[key]) for key in _COPIED if body.get(key) is not None)
    out["store"] = bool(body.get("store"))
    if body.get("metadata"):
        out["metadata"] = body["metadata"]
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        out["max_output_tokens"] = max_tokens
    if body.get("response_format"):
        out["text"] = _format_to_responses(body["response_format"])
    if body.get("reasoning_effort"):
        out["reasoning"] = {"effort": body["reasoning_effort"]}
    return out


def chat_response_to_responses(body: Mapping[str, Any], *, id: str | None = None) -> JSON:
    """Translate a `chat.completion` body into a `response` body (choice 0).

    The message item comes first, then one `function_call` item per call: `call_id` is the Chat
    call id, the item id `fc_...` is derived from it.

    Raises:
        ConversionError: the body is not a chat completion, or a call is not a function call.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0].get("message"), dict):
        raise ConversionError("The body is not a chat completion with a message; send the error on as it is.")
    chat_id = str(body.get("id") or "")
    items = _assistant_items(choices[0]["message"], "choices[0].message")
    output = [
        {"id": f"msg_{digest(chat_id)}", "status": "completed", **item}
        if item["type"] == "message"
        else {**item, "status": "completed"}
        for item in items
    ]
    status, reason = status_of_finish(choices[0].get("finish_reason"))
    return response_object(
        id or f"resp_{digest(chat_id)}",
        str(body.get("model") or ""),
        status=status,
        output=output,
        usage=usage_to_responses(body.get("usage")),
        incomplete_reason=reason,
        created_at=body.get("created") if isinstance(body.get("created"), int) else None,
    )


# --- Responses -> Chat -------------------------------------------------------------------------


def _add_to_assistant(
    messages: list[JSON], *, text: str = "", refusal: str = "", call: JSON | None = None
) -> None:
    # Consecutive assistant items (message, function_call, function_call...) are one Chat message.
    last = messages[-1] if messages else None
    if not (isinstance(last, dict) and last.get("role") == "assistant"):
        last = {"role": "assistant", "content": None}
        messages.append(last)
    if text:
        last["content"] = (last["content"] or "") + text
    if refusal:
        last["refusal"] = (last.get("refusal") or "") + refusal
    if call:
        last.setdefault("tool_calls", []).append(call)


def _call_to_chat(item: JSON, at: str) -> JSON:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        raise ConversionError(f"{at} is a function_call without a call_id or name; send both.", param=at)
    function = {"name": name, "arguments": arguments_text(item.get("arguments"))}
    return {"id": call_id, "type": "function", "function": function}


def _output_to_chat(output: Any, at: str) -> str | list[JSON]:
    if isinstance(output, str):
        return output
    parts = content_to_chat(output, f"{at}.output")
    if isinstance(parts, list) and any(part["type"] != "text" for part in parts):
        raise refuse(f"{at}.output", "holds an image, and Chat tool results are text only")
    return parts


def _items_to_chat(items: list[Any], messages: list[JSON]) -> None:
    for i, item in enumerate(items):
        at = f"input[{i}]"
        kind = kind_of(item) or ("message" if isinstance(item, dict) and "role" in item else None)
        role = item.get("role") if isinstance(item, dict) else None
        if kind == "message" and role == "assistant":
            text, refusal = responses_text(item.get("content"), at)
            _add_to_assistant(messages, text=text, refusal=refusal)
        elif kind == "message" and role in ("system", "developer", "user"):
            messages.append({"role": role, "content": content_to_chat(item.get("content"), at)})
        elif kind == "function_call":
            _add_to_assistant(messages, call=_call_to_chat(item, at))
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not item["call_id"]:
                raise ConversionError(f"{at} is a function_call_output without a call_id; send it.", param=at)
            content = _output_to_chat(item.get("output"), at)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
        else:
            check_skippable(item, at)
    for message in messages:  # Chat needs content on an assistant message without calls
        if message["role"] == "assistant" and message["content"] is None and not message.get("tool_calls"):
            message["content"] = ""


def _tool_to_chat(tool: Any, i: int) -> JSON:
    if kind_of(tool) != "function":
        raise refuse(f"tools[{i}]", f"is a hosted {kind_of(tool)!r} tool with no Chat Completions equivalent")
    function: JSON = {"name": tool.get("name")}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def responses_request_to_chat(body: Mapping[str, Any]) -> JSON:
    """Translate a `/responses` request body into a `/chat/completions` one.

    `instructions` becomes a leading system message. A stream asks for usage in its last chunk.

    Raises:
        ConversionError: an item, content part, tool or parameter without a Chat form, or one that
            needs stored state (`previous_response_id`); the message names it and its position.
    """
    for key in _RESPONSES_ONLY:
        if body.get(key):
            raise refuse(key, "needs state or features that Chat Completions does not have", quote=True)
    messages: list[JSON] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise refuse("instructions", "is not a string, and Chat takes text only", quote=True)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        messages.append({"role": "user", "content": raw_input})
    elif isinstance(raw_input, list):
        _items_to_chat(raw_input, messages)
    else:
        raise ConversionError("'input' must be a string or an array of items.", param="input")
    out: JSON = {"model": body.get("model"), "messages": messages}
    if body.get("tools"):
        out["tools"] = [_tool_to_chat(tool, i) for i, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        with converting():
            out["tool_choice"] = tool_choice_to_chat(body["tool_choice"])
    out.update((key, body[key]) for key in _COPIED if body.get(key) is not None)
    if body.get("stream"):
        out["stream_options"] = {"include_usage": True}
    if body.get("max_output_tokens") is not None:
        out["max_completion_tokens"] = body["max_output_tokens"]
    text_format = (body.get("text") or {}).get("format")
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        schema = {key: value for key, value in text_format.items() if key != "type"}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif kind_of(text_format) == "json_object":
        out["response_format"] = {"type": "json_object"}
    if (body.get("reasoning") or {}).get("effort"):
        out["reasoning_effort"] = body["reasoning"]["effort"]
    return out


def responses_response_to_chat(body: Mapping[str, Any], *, id: str | None = None) -> JSON:
    """Translate a finished `response` body into a `chat.completion` body.

    Text parts join into `content`, refusals into `refusal`, `function_call` items into
    `tool_calls` with `id = call_id`. `finish_reason` is `tool_calls` when there are calls.

    Raises:
        ConversionError: the response is not finished (`failed`, `in_progress`...), or holds a
            hosted tool call or encrypted reasoning; the message names the item.
    """
    status = body.get("status", "completed")
    if status not in ("completed", "incomplete") or not isinstance(body.get("output"), list):
        raise ConversionError(
            f"A response with status {status!r} has no chat completion form; send its error instead.",
            param="status",
        )
    messages: list[JSON] = []
    for i, item in enumerate(body["output"]):
        at = f"output[{i}]"
        if kind_of(item) == "message":
            text, refusal = responses_text(item.get("content"), at)
            _add_to_assistant(messages, text=text, refusal=refusal)
        elif kind_of(item) == "function_call":
            _add_to_assistant(messages, call=_call_to_chat(item, at))
        else:
            check_skippable(item, at)
    message = messages[0] if messages else {"role": "assistant", "content": None}
    message.setdefault("refusal", None)
    has_calls = bool(message.get("tool_calls"))
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": finish_of_status(status, body.get("incomplete_details"), has_calls),
        "logprobs": None,
    }
    return {
        "id": id or f"chatcmpl-{digest(str(body.get('id') or ''))}",
        "object": "chat.completion",
        "created": body.get("created_at"),
        "model": body.get("model"),
        "choices": [choice],
        "usage": usage_to_chat(body.get("usage")),
    }
