"""Tool: what can be called, with its schema, effect and deadline."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from toolwire.context import Context
from toolwire.exceptions import ToolDefinitionError
from toolwire.messages import ToolSpec

__all__ = ["ArgumentError", "Check", "Denial", "Effect", "Handler", "Tool", "validate_tool_name"]

Effect = Literal["read", "write"]
"""`read` tools may run concurrently; `write` tools run one at a time, in proposed order, once."""

Handler = Callable[[dict[str, Any], Context], Awaitable[Any]]
"""Runs a tool with arguments the Gate already validated, and the run's context."""


class ArgumentError(Exception):
    """An argument value the tool cannot take, found before it did anything: `invalid_arguments`.

    The JSON Schema can admit what the tool's own conversion refuses (`1e20` is an integer to JSON
    Schema, too large for Python's conversion of a float); the Gate answers it as the model's error.
    """

    code = "invalid_arguments"


@dataclass(frozen=True, kw_only=True)
class Denial:
    """Why a call is refused; the model reads `message`, so say what it can do instead."""

    message: str
    """One or two sentences for the model (and through it, the user)."""
    details: tuple[Any, ...] = ()
    """Structured specifics, such as the missing scopes."""


Check = Callable[[Mapping[str, Any], Context], "bool | Denial | Awaitable[bool | Denial]"]
"""A per-resource check in `Tool.requires`: `True` allows, `False` or a `Denial` refuses."""

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def validate_tool_name(name: str) -> str:
    """Return `name` if it follows OpenAI's rules for function names, else raise.

    Raises:
        ToolDefinitionError: the name has characters other than letters, digits, `_` and `-`,
            or more than 64 of them.
    """
    if not _NAME.match(name):
        raise ToolDefinitionError(
            f"Tool name {name!r} is not allowed: use 1 to 64 letters, digits, '_' or '-'."
        )
    return name


@dataclass(kw_only=True, eq=False)
class Tool:
    """A callable capability offered to a model.

    Build one with `@tool` for a Python function, or from an HTTP function definition.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema (draft 2020-12) of the arguments object; validated in full before execution."""
    handler: Handler
    effect: Effect = "read"
    timeout: float | None = 30.0
    """Deadline for one execution in seconds; `None` means no deadline."""
    strict: bool | None = None
    requires: tuple[str | Check, ...] = ()
    """Scopes a principal needs to call the tool, and per-resource checks run on the arguments."""
    retry_safe: bool = False
    """A write whose earlier attempt died may be run again (it deduplicates downstream)."""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_tool_name(self.name)
        if self.effect not in ("read", "write"):
            raise ToolDefinitionError(
                f"Tool {self.name!r} has effect {self.effect!r}: use 'read' or 'write'."
            )
        if self.parameters.get("type", "object") != "object":
            raise ToolDefinitionError(
                f"Tool {self.name!r} must take an object of arguments: set the schema's type to 'object'."
            )

    @property
    def spec(self) -> ToolSpec:
        """What a model is told about this tool."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            strict=self.strict,
            effect=self.effect,
        )

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, effect={self.effect!r})"
