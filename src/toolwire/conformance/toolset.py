"""The conformance suite's built-in tools, and a record of everything they did.

Three tools, with strict schemas as seed 003 writes them:

- `get_delivery_status(order_id)`: a read, `order_id` matching `^ORDER-[0-9]{4}$`; the status is
  derived from the number, so a result can be checked against the call that asked for it.
- `create_note(text)`: a write, run through the Gate's idempotency ledger, for the repeated request.
- `cancel_order(order_id)`: offered to the model but never allowlisted, for the unknown function.

Every execution is recorded, so a row can prove that something did *not* run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from toolwire.context import Context
from toolwire.tools import Tool

__all__ = ["ORDER_PATTERN", "Toolset", "delivery_status"]

ORDER_PATTERN = "^ORDER-[0-9]{4}$"
"""The order id pattern of seed 003's strict function schema."""

_STATUSES = ("in transit", "delivered", "out for delivery", "awaiting pickup")


def delivery_status(order_id: str) -> str:
    """The status the suite's tool reports for an order: fixed per order number."""
    digits = "".join(c for c in order_id if c.isdigit()) or "0"
    return _STATUSES[int(digits) % len(_STATUSES)]


def _schema(name: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: value},
        "required": [name],
        "additionalProperties": False,
    }


@dataclass
class Toolset:
    """The built-in tools of one suite run, and their executions.

    Args:
        stagger: Seconds by which each concurrent status lookup finishes before the one proposed
            before it, so completion order is the reverse of proposal order; 0 runs them as fast
            as they go. Rows set it while they need it.
    """

    stagger: float = 0.0
    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Every execution, in start order: (tool name, arguments)."""
    completed: list[str] = field(default_factory=list)
    """The order ids of status lookups, in the order they finished."""
    _running: int = 0

    def allowed(self) -> list[Tool]:
        """The allowlisted tools: `get_delivery_status` and `create_note`."""
        return [self._status_tool(), self._note_tool()]

    def offered_only(self) -> Tool:
        """`cancel_order`: shown to the model, refused by the allowlist."""

        async def cancel_order(args: dict[str, Any], ctx: Context) -> dict[str, Any]:
            self.executed.append(("cancel_order", args))
            return {"order_id": args["order_id"], "cancelled": True}

        return Tool(
            name="cancel_order",
            description="Cancel one order that has not been delivered yet.",
            parameters=_schema("order_id", {"type": "string", "pattern": ORDER_PATTERN}),
            handler=cancel_order,
            effect="write",
            strict=True,
        )

    def runs(self, name: str, since: int = 0) -> list[dict[str, Any]]:
        """The arguments of each execution of `name`, from execution number `since` on."""
        return [args for tool, args in self.executed[since:] if tool == name]

    def _status_tool(self) -> Tool:
        async def get_delivery_status(args: dict[str, Any], ctx: Context) -> dict[str, Any]:
            self.executed.append(("get_delivery_status", args))
            position = self._running
            self._running += 1
            try:
                if self.stagger:
                    # The first call started waits longest: completion order reverses proposal order.
                    await asyncio.sleep(self.stagger * max(0, 4 - position))
            finally:
                self._running -= 1
            self.completed.append(args["order_id"])
            return {"order_id": args["order_id"], "status": delivery_status(args["order_id"])}

        return Tool(
            name="get_delivery_status",
            description="Return the current delivery status for one order.",
            parameters=_schema("order_id", {"type": "string", "pattern": ORDER_PATTERN}),
            handler=get_delivery_status,
            strict=True,
        )

    def _note_tool(self) -> Tool:
        async def create_note(args: dict[str, Any], ctx: Context) -> dict[str, Any]:
            self.executed.append(("create_note", args))
            number = len(self.runs("create_note"))
            return {"note_id": f"note-{number}", "text": args["text"]}

        return Tool(
            name="create_note",
            description="Save a short note. Each call stores one new note.",
            parameters=_schema("text", {"type": "string"}),
            handler=create_note,
            effect="write",
            strict=True,
        )
