"""The canonical transcript as JSON, for the conversation store: one pydantic TypeAdapter at the edge.

The messages stay dataclasses inside toolwire; only here are they turned into plain JSON values
(`role` tells the kinds apart) and back, validated on the way in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from toolwire.exceptions import StorageError
from toolwire.messages import AssistantMessage, Message, SystemMessage, ToolResult, UserMessage

__all__ = ["TRANSCRIPT_ADAPTER", "dump_transcript", "load_transcript"]

TRANSCRIPT_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(
    list[
        Annotated[
            SystemMessage | UserMessage | AssistantMessage | ToolResult,
            Field(discriminator="role"),
        ]
    ]
)
"""Validates and serializes a list of canonical messages, told apart by `role`."""


def dump_transcript(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as JSON-ready dicts, in order."""
    dumped: list[dict[str, Any]] = TRANSCRIPT_ADAPTER.dump_python(list(messages), mode="json")
    return dumped


def load_transcript(data: Any) -> tuple[Message, ...]:
    """Messages back from what `dump_transcript` wrote.

    Raises:
        StorageError: the stored value is not a transcript (written by something else, or damaged).
    """
    try:
        return tuple(TRANSCRIPT_ADAPTER.validate_python(data))
    except ValidationError as exc:
        raise StorageError(
            f"A stored conversation cannot be read ({exc.error_count()} error(s), first: "
            f"{exc.errors()[0]['msg']}); start a new conversation."
        ) from None
