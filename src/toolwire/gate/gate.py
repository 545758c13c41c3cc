"""Gate: the one place a proposed tool call is checked and executed.

```
ToolCall ─▶ allowlist ─▶ size ─▶ JSON ─▶ schema ─▶ CheckedCall               (check: nothing runs)
CheckedCall ─▶ authorize ─▶ [write: ledger claim] ─▶ execute under the tool's deadline
            ─▶ redact ─▶ [write: ledger stores the result] ─▶ audit ─▶ ToolResult  (execute)
```

Whatever a model proposes, the outcome is a `ToolResult`, never an exception: success carries the
tool's output, a failure a stable error code and a message the model can act on. The two halves are
public so a runner can check every call of a turn first, then schedule reads and writes differently.

The policy (by default `ScopePolicy`: the tool's `requires` against the context's scopes) runs
before anything else in `execute`; a denied call is `forbidden` and nothing runs. With a `Ledger`,
a write runs at most once per idempotency key and a repeated key replays the stored result; with an
`AuditLog`, every call gets one record, refused ones included (`run`, or `refused` for a runner that
checks calls itself). Without them the Gate works as a plain library component, needing no database.
Every result is redacted before it is stored or returned.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic_core import to_jsonable_python

from toolwire.context import Context
from toolwire.exceptions import ConfigError
from toolwire.gate.keys import IDEMPOTENCY_KEY, OutcomeUnknown, canonical_json, idempotency_key
from toolwire.gate.policy import Denial, Policy, ScopePolicy
from toolwire.gate.redact import Redactor
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

if TYPE_CHECKING:
    # Only for annotations: the ledger and the audit log load SQLAlchemy, which a Gate without a
    # database (and `import toolwire`) should not pay for.
    from toolwire.gate.audit import AuditLog
    from toolwire.gate.ledger import Ledger

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
# Codes a tool's exception may carry in its `code` attribute (with `details`), instead of tool_error:
# an HTTP function's upstream failure or timeout, or an argument it could not place (nothing sent).
_RAISED_CODES: frozenset[str] = frozenset({"upstream_error", "timeout", "invalid_arguments"})
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

    @functools.cached_property
    def identity(self) -> tuple[str, str]:
        """The tool name and the canonical JSON of the arguments: equal for identical calls."""
        return self.tool.name, canonical_json(self.arguments)


class Gate:
    """Checks proposed calls against the toolbox and executes the ones that pass.

    Args:
        toolbox: The allowlist; only its tools can run.
        policy: Decides who may call what; `ScopePolicy()` (the tools' `requires`) by default.
        ledger: Makes writes exactly-once per idempotency key; without it a write runs each time.
        audit: Records every call; without it nothing is recorded.
        redactor: Secrets to remove from results, stored and returned, and from audited arguments.
        max_argument_bytes: Argument strings longer than this (UTF-8) are refused unparsed.
    """

    def __init__(
        self,
        toolbox: Toolbox,
        *,
        policy: Policy | None = None,
        ledger: Ledger | None = None,
        audit: AuditLog | None = None,
        redactor: Redactor | None = None,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    ) -> None:
        if max_argument_bytes < 2:
            raise ConfigError(f"max_argument_bytes is {max_argument_bytes}: allow at least 2 bytes ('{{}}').")
        self.toolbox = toolbox
        self.policy: Policy = policy if policy is not None else ScopePolicy()
        self.ledger = ledger
        self.audit = audit
        self.redactor = redactor if redactor is not None else Redactor()
        self.max_argument_bytes = max_argument_bytes

    async def run(self, call: ToolCall, context: Context, *, occurrence: int = 0) -> ToolResult:
        """Check `call` and, if it passes, execute it; always answers with a result.

        Args:
            call: The proposed call.
            context: Who asks, for which request.
            occurrence: How many identical calls (same tool and arguments) the request made before
                this one; it keeps two equal writes of one request apart in the ledger.
        """
        started = time.perf_counter()
        checked = self.check(call)
        if isinstance(checked, ToolResult):
            await self.refused(call, checked, context, duration_ms=(time.perf_counter() - started) * 1000)
            return checked
        return await self.execute(checked, context, occurrence=occurrence)

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

    async def execute(self, checked: CheckedCall, context: Context, *, occurrence: int = 0) -> ToolResult:
        """Authorize a checked call, then execute it (at most once per key, for a write with a ledger).

        Args:
            checked: A call that passed `check`.
            context: Who asks, for which request.
            occurrence: See `run`.

        Raises:
            StorageError: the ledger or the audit log cannot be written; the model gets no result.
        """
        started = time.perf_counter()
        tool, call = checked.tool, checked.call
        key: str | None = None
        denial = await self._authorize(checked, context)
        if denial is not None:
            result = error_result(call, "forbidden", denial.message, denial.details)
        elif tool.effect == "write":
            key = idempotency_key(
                tenant_id=context.tenant_id,
                request_id=context.request_id,
                tool=tool.name,
                arguments=checked.arguments,
                occurrence=occurrence,
            )
            # The tool sees its key too: an HTTP function sends it on as `Idempotency-Key`.
            keyed = replace(context, extra={**context.extra, IDEMPOTENCY_KEY: key})
            result = await self._execute_write(checked, keyed, key, occurrence)
        else:
            result = await self._invoke_redacted(checked, context)
        if self.audit is not None:
            await self.audit.record(
                call=call,
                context=context,
                result=result,
                arguments=self.redactor.redact_value(checked.arguments),
                duration_ms=(time.perf_counter() - started) * 1000,
                key=key,
            )
        return result

    async def _execute_write(
        self, checked: CheckedCall, context: Context, key: str, occurrence: int
    ) -> ToolResult:
        if self.ledger is None:
            return await self._invoke_redacted(checked, context)
        outcome = await self.ledger.execute(
            key=key,
            tool=checked.tool,
            call=checked.call,
            context=context,
            occurrence=occurrence,
            run=functools.partial(self._invoke_redacted, checked),
        )
        if isinstance(outcome, OutcomeUnknown):
            return error_result(checked.call, "outcome_unknown", _unknown_message(checked.tool, outcome))
        return outcome

    async def refused(
        self, call: ToolCall, result: ToolResult, context: Context, *, duration_ms: float = 0.0
    ) -> None:
        """Audit a call answered without execution (refused by `check`, or by a runner's limits).

        Raises:
            StorageError: the audit log cannot be written.
        """
        if self.audit is not None:
            await self.audit.record(
                call=call,
                context=context,
                result=result,
                arguments=self.redactor.redact(call.arguments),
                duration_ms=duration_ms,
            )

    async def _authorize(self, checked: CheckedCall, context: Context) -> Denial | None:
        try:
            return await self.policy.authorize(checked.tool, checked.arguments, context)
        except Exception:
            # A policy that cannot decide must not let the call through.
            logger.exception(
                "The policy failed on tool %r (call %s): denied", checked.tool.name, checked.call.id
            )
            name = checked.tool.name
            return Denial(
                message=f"Whether this user may call {name} cannot be decided now; do not retry it."
            )

    async def _invoke_redacted(self, checked: CheckedCall, context: Context) -> ToolResult:
        result = await self._invoke(checked, context)
        return replace(result, content=self.redactor.redact(result.content))

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
            code = getattr(exc, "code", None)
            if code in _RAISED_CODES:
                # An HTTP function's failure says itself what it was (status and body in details).
                logger.warning("Tool %r failed with %s (call %s): %s", tool.name, code, call.id, exc)
                return error_result(call, code, _failure_message(exc), getattr(exc, "details", ()))
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


def _unknown_message(tool: Tool, unknown: OutcomeUnknown) -> str:
    started = unknown.claimed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"An earlier attempt of this same {tool.name} call in this request started at {started} and "
        "never finished, so whether it took effect is unknown; it was not run again. Check the "
        "current state (or ask the user) before calling it again."
    )


def _failure_message(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if len(text) > _MAX_ERROR_MESSAGE:
        text = text[: _MAX_ERROR_MESSAGE - 3] + "..."
    return f"The tool failed: {text}"
