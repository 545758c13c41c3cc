"""The Model protocol: where turns come from, whatever the provider or route."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from toolwire.messages import Message, RequestOptions, TextDelta, ToolSpec, Turn, TurnComplete

__all__ = ["Model", "RequestOptions", "StreamEvent", "TextDelta", "TurnComplete"]


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
