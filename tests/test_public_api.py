"""The public surface is curated: pinned here so a change to it is a decision, not an accident."""

from __future__ import annotations

import dataclasses
import inspect

import toolwire
import toolwire.messages

PUBLIC = [
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


def test_all_is_sorted_and_pinned() -> None:
    assert toolwire.__all__ == sorted(toolwire.__all__)
    assert toolwire.__all__ == PUBLIC
    for name in toolwire.__all__:
        assert getattr(toolwire, name) is not None


def test_every_exception_has_the_one_root() -> None:
    for name in toolwire.__all__:
        obj = getattr(toolwire, name)
        if inspect.isclass(obj) and issubclass(obj, Exception):
            assert issubclass(obj, toolwire.ToolwireError), name


def test_message_dataclasses_are_keyword_only_and_documented() -> None:
    for name in toolwire.messages.__all__:
        obj = getattr(toolwire.messages, name)
        if dataclasses.is_dataclass(obj):
            params = inspect.signature(obj).parameters.values()
            assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), name
            assert obj.__doc__, name


def test_public_callables_have_docstrings() -> None:
    for name in toolwire.__all__:
        obj = getattr(toolwire, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), name
