"""Gate: the one place a proposed tool call is checked and executed.

```
ToolCall ─▶ allowlist ─▶ size ─▶ JSON ─▶ schema ─▶ CheckedCall        (check: nothing runs)
CheckedCall ─▶ execute under the tool's deadline ─▶ content ─▶ ToolResult  (execute)
```

Whatever a model proposes, the outcome is a `ToolResult`, never an exception: success carries the
tool's output, a failure a stable error code and a message the model can act on. The two halves are
public so a runner can check every call of a turn first, then schedule reads and writes differently.

Later stages slot in without changing these signatures: authorization (`forbidden`) and the
idempotency claim run at the start of `execute`, before the tool; redaction filters the content at
its end, before the ledger stores it and the model sees it.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_core import to_jsonable_python

from toolwire.context import Context
from toolwire.exceptions import ConfigError
from toolwire.gate.validate import (
    DEFAULT_MAX_ARGUMENT_BYTES,
    Rejection,
    parse_arguments,
    validate_arguments,
    validator_for,
)
from toolwire.messages import ToolCall, ToolResult
from toolwire.tools.base import Tool
from toolwire.tools.toolbox import Toolbox

__all__ = ["ERROR_CODES", "CheckedCall", "ErrorCode", "Gate", "error_result"]

logger = logging.getLogger(__name__)

ErrorCode = Literal[
    "unknown_tool",
    "invalid_json",
    "too_large",
    "too_many_calls",
    "invalid_arguments",
    "forbidden",
    "timeout",
    "upstream_error",
    "tool_error",
    "outcome_unknown",
]
"""A stable, machine-readable reason why a call did not succeed."""

ERROR_CODES: tuple[ErrorCode, ...] = (
    "unknown_tool",
    "invalid_json",
    "too_large",
    "too_many_calls",
    "invalid_arguments",
    "forbidden",
    "timeout",
    "upstream_error",
    "tool_error",
    "outcome_unknown",
)
"""Every code a ToolResult can carry. Only `timeout`, `upstream_error` and `tool_error` mean a tool ran."""

_MAX_ERROR_MESSAGE = 2000
_MAX_LISTED_NAMES = 50


def error_result(call: ToolCall, code: ErrorCode, message: str, details: Iterable[Any] = ()) -> ToolResult:
    """The result that answers `call` with an error the model can read and act on.

    Args:
        call: The call being answered.
        code: One of `ERROR_CODES`.
        message: One or two sentences telling the model what went wrong and what to do.
        details: Structured specifics (schema errors with their paths, an HTTP status...).

    Returns:
        A ToolResult whose content is `{"error": {"code", "message", "details"}}` as JSON.
    """
    payload = {"error": {"code": code, "message": message, "details": list(details)}}
    return ToolResult(
        call_id=call.id,
        name=call.name,
        content=json.dumps(payload, ensure_ascii=False, default=str),
        code=code,
    )


@dataclass(frozen=True, kw_only=True)
class CheckedCall:
    """A call that passed every check: an allowed tool and arguments that match its schema."""

    call: ToolCall
    """The call as the model proposed it."""
    tool: Tool
    """The allowed tool it names."""
    arguments: dict[str, Any]
    """The parsed, schema-valid arguments."""


class Gate:
    """Checks proposed calls against the toolbox and executes the ones that pass.

    Args:
        toolbox: The allowlist; only its tools can run.
        max_argument_bytes: Argument strings longer than this (UTF-8) are refused unparsed.
    """

    def __init__(self, toolbox: Toolbox, *, max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES) -> None:
        if max_argument_bytes < 2:
            raise ConfigError(f"max_argument_bytes is {max_argument_bytes}: allow at least 2 bytes ('{{}}').")
        self.toolbox = toolbox
        self.max_argument_bytes = max_argument_bytes

    async def run(self, call: ToolCall, context: Context) -> ToolResult:
        """Check `call` and, if it passes, execute it; always answers with a result."""
        checked = self.check(call)
        if isinstance(checked, ToolResult):
            return checked
        return await self.execute(checked, context)

    def check(self, call: ToolCall) -> CheckedCall | ToolResult:
        """Run every check that needs no execution; a ToolResult means the call was refused."""
        tool = self.toolbox.get(call.name)
        if tool is None:
            return error_result(call, "unknown_tool", self._unknown_tool_message(call.name))
        parsed = parse_arguments(call.arguments, max_bytes=self.max_argument_bytes)
        if isinstance(parsed, Rejection):
            return error_result(call, parsed.code, parsed.message, parsed.details)
        try:
            rejection = validate_arguments(validator_for(tool), parsed)
        except Exception:
            # Only a schema changed after registration gets here (Toolbox.add checks it).
            logger.exception("The argument schema of tool %r cannot be used", tool.name)
            return error_result(
                call, "tool_error", "This tool is misconfigured and cannot be called now; do not retry it."
            )
        if rejection is not None:
            return error_result(call, rejection.code, rejection.message, rejection.details)
        return CheckedCall(call=call, tool=tool, arguments=parsed)

    async def execute(self, checked: CheckedCall, context: Context) -> ToolResult:
        """Execute a checked call under its tool's deadline and turn the outcome into a result."""
        # Authorization and the idempotency claim go here, before anything runs.
        result = await self._invoke(checked, context)
        # Redaction goes here, before the result is stored or returned.
        return result

    async def _invoke(self, checked: CheckedCall, context: Context) -> ToolResult:
        tool, call = checked.tool, checked.call
        deadline = asyncio.timeout(tool.timeout)
        try:
            async with deadline:
                value = await tool.handler(checked.arguments, context)
            content = value if isinstance(value, str) else _encode(value)
        except Exception as exc:
            # A TimeoutError the tool raised itself (a socket timeout...) is a failure of the tool,
            # not our deadline: only an expired deadline is reported as `timeout`.
            if isinstance(exc, TimeoutError) and deadline.expired():
                logger.warning("Tool %r timed out after %ss (call %s)", tool.name, tool.timeout, call.id)
                return error_result(call, "timeout", _timeout_message(tool))
            logger.exception("Tool %r failed (call %s)", tool.name, call.id)
            return error_result(call, "tool_error", _failure_message(exc))
        return ToolResult(call_id=call.id, name=call.name, content=content)

    def _unknown_tool_message(self, name: str) -> str:
        names = self.toolbox.names
        shown = repr(name if len(name) <= 80 else name[:77] + "...")
        if not names:
            return f"There is no tool named {shown}, and no tools are available: answer without one."
        listed = ", ".join(names[:_MAX_LISTED_NAMES])
        if len(names) > _MAX_LISTED_NAMES:
            listed += f" (and {len(names) - _MAX_LISTED_NAMES} more)"
        close = difflib.get_close_matches(name[:100], names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"There is no tool named {shown}.{hint} Call one of: {listed}."


def _encode(value: Any) -> str:
    """A tool's return value as JSON; dataclasses, models and dates are converted, the rest str()-ed."""
    return json.dumps(value, ensure_ascii=False, default=lambda o: to_jsonable_python(o, fallback=str))


def _timeout_message(tool: Tool) -> str:
    message = f"The tool did not finish within {tool.timeout or 0:g} seconds and was stopped."
    if tool.effect == "write":
        message += " Whether it took effect is unknown: check before calling it again."
    return message


def _failure_message(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if len(text) > _MAX_ERROR_MESSAGE:
        text = text[: _MAX_ERROR_MESSAGE - 3] + "..."
    return f"The tool failed: {text}"
