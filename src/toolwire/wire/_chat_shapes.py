"""Chat Completions shapes both sides of the wire share: messages on the wire, text of content."""

from __future__ import annotations

from typing import Any

from toolwire.messages import AssistantMessage, Message, ToolResult

__all__ = ["FINISH_REASONS", "message_to_wire", "text_of"]

FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
"""Every `finish_reason` Chat Completions defines."""


def message_to_wire(message: Message) -> dict[str, Any]:
    """A canonical message as a Chat Completions `messages[]` entry."""
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


def text_of(content: Any) -> str | None:
    """Message content as one string: a string, or the text of a list of parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") in ("text", None)
        )
    raise TypeError("content")
