"""The Model protocol: where turns come from, whatever the provider or route."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from toolwire.messages import Message, ToolSpec, Turn

__all__ = ["Model", "RequestOptions", "StreamEvent", "TextDelta", "TurnComplete"]


@dataclass(kw_only=True, frozen=True)
class RequestOptions:
    """Per-request settings passed through to the provider when set."""

    tool_choice: str | dict[str, Any] | None = None
    """`auto`, `none`, `required`, or a named function, in Chat's shape; adapters translate it."""
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(kw_only=True, frozen=True)
class TextDelta:
    """A piece of the turn's text, as it arrives."""

    text: str


@dataclass(kw_only=True, frozen=True)
class TurnComplete:
    """The end of a streamed turn: the whole turn, calls reassembled and complete."""

    turn: Turn


StreamEvent = TextDelta | TurnComplete
"""What `Model.stream` yields: text deltas, then exactly one `TurnComplete`."""


@runtime_checkable
class Model(Protocol):
    """A source of assistant turns.

    `tools` empty means no decision is needed: the model must answer in text. Implementations
    raise `ModelError` subclasses, never provider exceptions.
    """

    @property
    def name(self) -> str:
        """The model's name, for traces."""
        ...

    async def request(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        """Ask for one whole turn."""
        ...

    def stream(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        """Ask for one turn and yield its text as it arrives, then the complete turn."""
        ...

    async def aclose(self) -> None:
        """Release connections and other resources."""
        ...
