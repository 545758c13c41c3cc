"""Authorization: may this principal call this tool with these arguments? Decided before execution.

A valid schema is never permission. A tool declares what it needs in `Tool.requires`: scope strings
(`"bookkeeping:write"`), checked against `Context.scopes`, and per-resource checks, callables that
see the validated arguments and the context (`lambda args, ctx: args["owner"] == ctx.user_id`).
Every scope must be held and every check must pass; anything else is a `Denial`, which the Gate
turns into a `forbidden` result for the model, with nothing executed.

The decision fails closed: a check that raises, or returns anything but `True` or a `Denial`
(a forgotten `return` gives `None`), denies the call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from toolwire.context import Context
from toolwire.tools.base import Check, Denial, Tool

__all__ = ["Check", "Denial", "Policy", "ScopePolicy", "missing_scopes"]

logger = logging.getLogger(__name__)


@runtime_checkable
class Policy(Protocol):
    """Decides whether the principal in a context may call a tool with given arguments."""

    async def authorize(self, tool: Tool, arguments: Mapping[str, Any], context: Context) -> Denial | None:
        """Return `None` to allow the call, or a `Denial` saying why not.

        Args:
            tool: The allowed tool the call names.
            arguments: The parsed, schema-valid arguments.
            context: Who is asking (user, tenant, scopes), for which request.
        """
        ...


def missing_scopes(tool: Tool, scopes: frozenset[str]) -> tuple[str, ...]:
    """The scope strings in `tool.requires` that `scopes` lacks, in declaration order."""
    return tuple(r for r in tool.requires if isinstance(r, str) and r not in scopes)


class ScopePolicy:
    """The default policy: the tool's scopes, then its per-resource checks.

    A tool without requirements may be called by anyone who can reach the model; give every tool
    with consequences a scope.

    Example:
        ```python
        @tool(effect="write", requires=["bookkeeping:write"])
        async def create_item(...): ...


        def own_items_only(args, ctx):
            return args["user"] == ctx.user_id


        delete_item.requires = ("bookkeeping:write", own_items_only)
        ```
    """

    async def authorize(self, tool: Tool, arguments: Mapping[str, Any], context: Context) -> Denial | None:
        """Refuse when a required scope is missing or a check does not pass."""
        missing = missing_scopes(tool, context.scopes)
        if missing:
            listed = ", ".join(repr(scope) for scope in missing)
            return Denial(
                message=(
                    f"This user may not call {tool.name}: it needs the permission {listed}. "
                    "Tell the user it is not allowed; do not call it again."
                ),
                details=({"missing_scopes": list(missing)},),
            )
        for requirement in tool.requires:
            if isinstance(requirement, str):
                continue
            denial = await _run_check(requirement, tool, arguments, context)
            if denial is not None:
                return denial
        return None


async def _run_check(check: Any, tool: Tool, arguments: Mapping[str, Any], context: Context) -> Denial | None:
    refused = Denial(
        message=(
            f"This user may not call {tool.name} with these arguments. "
            "Tell the user it is not allowed; do not call it again."
        )
    )
    if not callable(check):
        logger.error("Tool %r requires %r, which is neither a scope nor a check: denied", tool.name, check)
        return refused
    try:
        verdict = check(arguments, context)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception:
        logger.exception("An authorization check of tool %r failed: denied", tool.name)
        return Denial(
            message=f"Whether this user may call {tool.name} cannot be decided now; do not retry it."
        )
    if verdict is True:
        return None
    if isinstance(verdict, Denial):
        return verdict
    if verdict is not False:
        logger.error(
            "An authorization check of tool %r returned %r instead of True, False or a Denial: denied",
            tool.name,
            verdict,
        )
    return refused
