"""toolwire: let a language model act on a business system safely.

The model chooses a tool and fills in its arguments; toolwire checks the proposal, executes it
locally, exactly once, and feeds the result back. The names below are the public API; everything
else is reachable through its subpackage (`toolwire.models`, `toolwire.testing`, ...).
"""

from __future__ import annotations

from toolwire.context import Context
from toolwire.exceptions import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    RunError,
    StorageError,
    ToolDefinitionError,
    ToolwireError,
    UserError,
)
from toolwire.gate import Gate
from toolwire.messages import (
    AssistantMessage,
    CallTrace,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    UserMessage,
)
from toolwire.models.base import Model, RequestOptions, TextDelta
from toolwire.runner import CallFinished, CallProposed, RunComplete, RunEvent, Runner, RunResult
from toolwire.tools import Tool, Toolbox, tool

__all__ = [
    "AssistantMessage",
    "CallFinished",
    "CallProposed",
    "CallTrace",
    "ConfigError",
    "Context",
    "Gate",
    "Message",
    "Model",
    "ModelError",
    "ModelHTTPError",
    "RequestOptions",
    "RunComplete",
    "RunError",
    "RunEvent",
    "RunResult",
    "Runner",
    "StorageError",
    "SystemMessage",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "ToolwireError",
    "Turn",
    "Usage",
    "UserError",
    "UserMessage",
    "tool",
]

__version__ = "0.1.0"
