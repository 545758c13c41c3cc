"""The shapes both halves of the Responses wire share: items, tools, tool_choice, usage, ids.

Kept apart from `toolwire.wire.responses` (which re-exports the public names) so that the client
half, the server half and the Chat bridge build every item the same way.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from toolwire.exceptions import WireFormatError
from toolwire.messages import ToolCall, ToolSpec, Usage
from toolwire.wire._common import arguments_text

__all__ = [
    "JSON",
    "TEXT_PARTS",
    "arguments_text",
    "call_item_id",
    "digest",
    "function_call_item",
    "function_tool",
    "message_item",
    "part_text",
    "response_object",
    "tool_choice_to_chat",
    "tool_choice_to_responses",
    "usage_json",
]

JSON = dict[str, Any]
"""A decoded JSON object, as the wire adapters pass them around."""

TEXT_PARTS = ("output_text", "input_text", "text")
"""Part types whose `text` is plain text."""


def digest(value: str) -> str:
    """A short stable hash, for ids derived from other ids."""
    return hashlib.sha256(value.encode()).hexdigest()[:24]


def call_item_id(call_id: str) -> str:
    """The `fc_...` item id of a function call, derived from its call id so every replay is stable."""
    return f"fc_{digest(call_id)}"


def function_tool(spec: ToolSpec) -> JSON:
    """A flat Responses function tool; `strict` is always explicit (unset becomes `false`)."""
    tool: JSON = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = spec.parameters
    tool["strict"] = bool(spec.strict)
    return tool


def function_call_item(call: ToolCall, *, status: str | None = None) -> JSON:
    """A `function_call` item: `call_id` is the call's id, the item `id` is derived from it."""
    item: JSON = {
        "type": "function_call",
        "id": call_item_id(call.id),
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }
    if status is not None:
        item["status"] = status
    return item


def _function_name(entry: Any, at: str) -> str:
    name = entry.get("name") or (entry.get("function") or {}).get("name") if isinstance(entry, dict) else None
    if not isinstance(name, str) or not name:
        raise WireFormatError(f"{at} must name a function, as {{'type': 'function', 'name': ...}}.", param=at)
    return name


def _allowed(choice: JSON, at: str, *, nested: bool) -> tuple[str, list[str]]:
    inner = choice.get("allowed_tools") if nested else choice
    if not isinstance(inner, dict):
        raise WireFormatError(f"{at}.allowed_tools must be an object with 'mode' and 'tools'.", param=at)
    names = []
    for i, entry in enumerate(inner.get("tools") or ()):
        if not isinstance(entry, dict) or entry.get("type") != "function":
            kind = entry.get("type") if isinstance(entry, dict) else entry
            raise WireFormatError(
                f"{at} allows a {kind!r} tool, which has no Chat Completions form; allow functions only.",
                param=f"{at}.tools[{i}]",
            )
        names.append(_function_name(entry, f"{at}.tools[{i}]"))
    return str(inner.get("mode") or "auto"), names


def tool_choice_to_responses(choice: str | Mapping[str, Any]) -> str | JSON:
    """Translate a Chat `tool_choice` into Responses' flat shape.

    Raises:
        WireFormatError: the choice names something other than a function.
    """
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "name": _function_name(dict(choice), "tool_choice")}
    if kind == "allowed_tools":
        mode, names = _allowed(dict(choice), "tool_choice", nested="allowed_tools" in choice)
        return {
            "type": "allowed_tools",
            "mode": mode,
            "tools": [{"type": "function", "name": n} for n in names],
        }
    raise WireFormatError(
        f"tool_choice of type {kind!r} cannot be translated; use 'auto', 'none', 'required' or a function.",
        param="tool_choice",
    )


def tool_choice_to_chat(choice: str | Mapping[str, Any]) -> str | JSON:
    """Translate a Responses `tool_choice` into Chat's nested shape (the canonical one).

    Raises:
        WireFormatError: the choice names a hosted tool, which Chat Completions cannot express.
    """
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _function_name(dict(choice), "tool_choice")}}
    if kind == "allowed_tools":
        mode, names = _allowed(dict(choice), "tool_choice", nested="allowed_tools" in choice)
        functions = [{"type": "function", "function": {"name": n}} for n in names]
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": functions}}
    raise WireFormatError(
        f"tool_choice of type {kind!r} names a hosted tool that has no Chat Completions form; "
        "use 'auto', 'none', 'required' or a function.",
        param="tool_choice",
    )


def usage_json(usage: Usage) -> JSON:
    """Responses' `usage` object for a canonical `Usage`."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    id: str,
    model: str,
    *,
    status: str,
    output: list[JSON],
    usage: JSON | None = None,
    incomplete_reason: str | None = None,
    error: JSON | None = None,
    created_at: int | None = None,
) -> JSON:
    """A `response` object with the fields clients read; the request echoes get neutral values."""
    return {
        "id": id,
        "object": "response",
        "created_at": int(time.time()) if created_at is None else created_at,
        "status": status,
        "model": model,
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "instructions": None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def message_item(item_id: str, text: str, *, status: str = "completed") -> JSON:
    """A finished assistant `message` item with one `output_text` part."""
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def part_text(part: Any) -> str:
    """The text of an `output_text`/`input_text` part or a refusal; empty for anything else."""
    if not isinstance(part, dict):
        return ""
    if part.get("type") == "refusal":
        return str(part.get("refusal") or "")
    return str(part.get("text") or "") if part.get("type") in TEXT_PARTS else ""
