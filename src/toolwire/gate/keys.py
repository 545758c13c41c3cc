"""Idempotency keys: what makes two writes "the same write", without touching a database.

Kept apart from the ledger so the Gate (and `import toolwire`) can compute keys without loading
SQLAlchemy; the ledger that stores them lives in `toolwire.gate.ledger`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolwire.exceptions import ToolDefinitionError
from toolwire.tools.base import Tool

__all__ = [
    "DONE",
    "IDEMPOTENCY_KEY",
    "IN_FLIGHT",
    "TRANSACTIONAL",
    "OutcomeUnknown",
    "canonical_json",
    "idempotency_key",
    "is_transactional",
    "transactional",
]

IN_FLIGHT = "in_flight"
"""A claimed write that has not stored its result yet."""
DONE = "done"
"""A write whose result is stored; the key replays it."""
IDEMPOTENCY_KEY = "idempotency_key"
"""The `Context.extra` key under which a write's handler finds its idempotency key."""
TRANSACTIONAL = "transactional"
"""The `Tool.metadata` key that marks a write whose effects all go through `Context.transaction`."""


def transactional(tool: Tool) -> Tool:
    """Mark a write tool whose every effect goes through `Context.transaction(db)`.

    The ledger then runs it in one transaction with its record: exactly once, even across crashes.
    Only mark tools that write nothing elsewhere (no HTTP call, no file, no second database): such
    effects would not roll back with the transaction.

    Example:
        ```python
        @transactional
        @tool(effect="write")
        async def create_item(ctx: Context, title: str) -> dict[str, int]:
            async with ctx.transaction(ctx.extra["db"]) as session:
                ...
        ```
    """
    if tool.effect != "write":
        raise ToolDefinitionError(f"Tool {tool.name!r} is a read: only write tools can be transactional.")
    tool.metadata[TRANSACTIONAL] = True
    return tool


def is_transactional(tool: Tool) -> bool:
    """Whether `tool` was marked with `transactional`."""
    return tool.metadata.get(TRANSACTIONAL) is True


def _normalized(value: Any) -> Any:
    # 12 and 12.0 are the same argument to a model and to the tool's schema: one key for both.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON: sorted keys, no spaces, integral floats as integers."""
    return json.dumps(_normalized(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(
    *, tenant_id: str, request_id: str, tool: str, arguments: Mapping[str, Any], occurrence: int
) -> str:
    """The key of one write: sha256 (hex) over the request and the call's identity.

    Args:
        tenant_id: The tenant; the same request id in two tenants is two requests.
        request_id: The application's request id, shared by retries of the request.
        tool: The tool's name.
        arguments: The validated arguments (canonicalized here).
        occurrence: 0 for the first identical call (same tool and arguments) in the request, 1 for
            the second: a user who books two equal coffees in one message gets two entries.
    """
    material = [tenant_id, request_id, tool, canonical_json(arguments), occurrence]
    text = json.dumps(material, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class OutcomeUnknown:
    """An earlier attempt of the same write claimed the key and died before storing its result."""

    key: str
    claimed_at: dt.datetime
    """When the dead attempt claimed the key."""
