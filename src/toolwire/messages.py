"""The canonical transcript: the one shape every part of toolwire speaks.

Wire adapters translate it to and from Chat Completions and Responses at the edge; nothing else
knows a wire format. Every type here is a keyword-only dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "AssistantMessage",
    "CallTrace",
    "Message",
    "RequestOptions",
    "Route",
    "SystemMessage",
    "TextDelta",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Turn",
    "TurnComplete",
    "Usage",
    "UserMessage",
]

Route = Literal["chat", "responses", "jsonplan", "local", "scripted"]
"""The route that produced a turn: a wire format, the JSON plan, the embedded model, or a fake."""


@dataclass(kw_only=True, frozen=True)
class ToolSpec:
    """What a model is told about a tool: its name, description and argument schema."""

    name: str
    """The tool's name, `^[a-zA-Z0-9_-]{1,64}$`."""
    description: str = ""
    """When to use the tool; the model decides from this."""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    """The JSON Schema (draft 2020-12) of the arguments object."""
    strict: bool | None = None
    """Ask the provider for schema-conformant arguments; the Gate validates either way."""
    effect: Literal["read", "write"] | None = None
    """What running the tool does, where the application knows it (its own tools and functions
    do); `None` for tools it only passes on, such as a gateway client's. Never sent on the wire."""


@dataclass(kw_only=True, frozen=True)
class ToolCall:
    """A call the model proposed. Untrusted: the Gate checks it before anything runs."""

    id: str
    """The correlation id: Chat's `tool_calls[].id`, Responses' `call_id`."""
    name: str
    """The tool name as the model wrote it."""
    arguments: str
    """The arguments exactly as sent: a JSON string that may be invalid."""


@dataclass(kw_only=True, frozen=True)
class SystemMessage:
    """Instructions to the model from the application."""

    content: str
    role: Literal["system"] = "system"


@dataclass(kw_only=True, frozen=True)
class UserMessage:
    """What the user said."""

    content: str
    role: Literal["user"] = "user"


@dataclass(kw_only=True, frozen=True)
class AssistantMessage:
    """One model turn: text, proposed tool calls, or both."""

    text: str | None = None
    """The text of the turn, if any."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls proposed in this turn, in the order the model gave them."""
    role: Literal["assistant"] = "assistant"


@dataclass(kw_only=True, frozen=True)
class ToolResult:
    """The answer to one proposed call; every call id gets exactly one."""

    call_id: str
    """The id of the call this answers; results are joined by it, never by position."""
    name: str
    """The tool name the call proposed (as the model wrote it)."""
    content: str
    """What the model sees: the tool's output, or the error with its code."""
    code: str | None = None
    """`None` on success, else a stable error code such as `invalid_arguments`."""
    replayed: bool = False
    """True when the content is a stored result of an earlier identical write."""
    role: Literal["tool"] = "tool"

    @property
    def is_error(self) -> bool:
        """Whether the call failed or was refused."""
        return self.code is not None


Message = SystemMessage | UserMessage | AssistantMessage | ToolResult
"""One entry of the canonical transcript."""


@dataclass(kw_only=True, frozen=True)
class Usage:
    """Tokens spent, summed over requests."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            requests=self.requests + other.requests,
        )


@dataclass(kw_only=True, frozen=True)
class Turn:
    """What one model request produced, whatever the route."""

    message: AssistantMessage
    """The assistant turn in canonical form."""
    usage: Usage = Usage()
    """Tokens of this request."""
    route: Route = "chat"
    """The route that produced it."""
    finish_reason: str | None = None
    """The provider's stop reason, informational only: calls are detected from `message.tool_calls`."""


@dataclass(kw_only=True, frozen=True)
class CallTrace:
    """One proposed call and what became of it, for the run's trace and the audit."""

    call_id: str
    name: str
    arguments: str
    """The raw argument string the model sent."""
    outcome: str
    """`ok` or the error code of the result."""
    result: str
    """The content the model saw."""
    duration_ms: float
    """Time spent in the Gate for this call, checks and execution together."""
    replayed: bool = False
    round: int = 1
    """The round of the run (1-based) in which the call was proposed."""


@dataclass(kw_only=True, frozen=True)
class TextDelta:
    """A piece of a turn's text, as it arrives."""

    text: str


@dataclass(kw_only=True, frozen=True)
class TurnComplete:
    """The end of a streamed turn: the whole turn, calls reassembled and complete."""

    turn: Turn


@dataclass(kw_only=True, frozen=True)
class RequestOptions:
    """Per-request settings passed through to the provider when set."""

    tool_choice: str | dict[str, Any] | None = None
    """`auto`, `none`, `required`, or a named function, in Chat's shape; adapters translate it."""
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    now: datetime | None = None
    """The application's clock for this request, in the user's time zone; the Runner sets it from
    `Context.current_time()`. Never sent on the wire: the embedded model writes its calendar from
    it (see `toolwire.models.local_calendar`)."""
