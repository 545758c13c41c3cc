"""What reading Chat and Responses bodies has in common: usage counts and argument strings."""

from __future__ import annotations

import json
from typing import Any

from toolwire.messages import Usage

__all__ = ["arguments_text", "usage_from"]


def usage_from(raw: Any, input_key: str, output_key: str) -> Usage:
    """The usage of one request, from a wire `usage` object with the given token field names."""
    if not isinstance(raw, dict):
        return Usage(requests=1)
    try:
        return Usage(
            input_tokens=int(raw.get(input_key) or 0),
            output_tokens=int(raw.get(output_key) or 0),
            requests=1,
        )
    except (TypeError, ValueError):  # usage is informational: never fail a turn over it
        return Usage(requests=1)


def arguments_text(raw: Any) -> str:
    """Call arguments as the JSON string the canonical `ToolCall` keeps."""
    # Some servers send arguments as an object instead of a JSON string; keep the string contract.
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else json.dumps(raw)
