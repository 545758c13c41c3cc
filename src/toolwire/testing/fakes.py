"""In-process fake models: script what the model says, then run the real Runner and Gate."""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolwire.exceptions import ToolwireError
from toolwire.messages import AssistantMessage, Message, ToolCall, ToolSpec, Turn, Usage
from toolwire.models.base import RequestOptions, StreamEvent, TextDelta, TurnComplete

__all__ = [
    "FunctionModel",
    "ModelRequest",
    "ScriptedModel",
    "UnconsumedModelSteps",
    "UnexpectedModelCall",
    "call",
    "reply",
]

_ids = itertools.count(1)


def call(name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None) -> ToolCall:
    """A proposed tool call for a script; `arguments` may be a dict or a raw (even invalid) string."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id=id or f"call_{next(_ids)}", name=name, arguments=raw)


def reply(text: str | None = None, *calls: ToolCall) -> AssistantMessage:
    """An assistant turn for a script: text, calls, or both."""
    return AssistantMessage(text=text, tool_calls=tuple(calls))


class UnexpectedModelCall(ToolwireError):
    """The code under test asked the fake model for more turns than the script has."""


class UnconsumedModelSteps(ToolwireError):
    """The script still had turns when the test expected it to be used up."""


@dataclass(kw_only=True, frozen=True)
class ModelRequest:
    """What the fake model was asked: the transcript, the tools offered, and the options."""

    transcript: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    options: RequestOptions
    stream: bool


Step = AssistantMessage | str | Turn


def _as_turn(step: Step, route: str) -> Turn:
    if isinstance(step, Turn):
        return step
    message = AssistantMessage(text=step) if isinstance(step, str) else step
    return Turn(message=message, usage=Usage(input_tokens=10, output_tokens=5, requests=1), route="scripted")


class _FakeBase:
    """The Model protocol around a `_next_turn` that subclasses provide."""

    route = "scripted"

    def __init__(self, *, name: str = "scripted", chunk_size: int = 4) -> None:
        self._name = name
        self._chunk_size = chunk_size
        self.requests: list[ModelRequest] = []
        """Every request made to the model, in order."""

    @property
    def name(self) -> str:
        return self._name

    async def _next_turn(self, request: ModelRequest) -> Turn:
        raise NotImplementedError

    async def request(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        req = ModelRequest(transcript=tuple(transcript), tools=tuple(tools), options=options, stream=False)
        self.requests.append(req)
        return await self._next_turn(req)

    async def stream(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        req = ModelRequest(transcript=tuple(transcript), tools=tuple(tools), options=options, stream=True)
        self.requests.append(req)
        turn = await self._next_turn(req)
        text = turn.message.text or ""
        for start in range(0, len(text), self._chunk_size):
            yield TextDelta(text=text[start : start + self._chunk_size])
        yield TurnComplete(turn=turn)

    async def aclose(self) -> None:
        return None


class ScriptedModel(_FakeBase):
    """A model that answers from a queue of turns, one per request.

    Example:
        ```python
        model = ScriptedModel([reply(None, call("get_summary", {"month": "2026-11"})), "You spent 42."])
        ```
    """

    def __init__(self, steps: Sequence[Step] = (), *, name: str = "scripted", chunk_size: int = 4) -> None:
        super().__init__(name=name, chunk_size=chunk_size)
        self._steps: list[Step] = list(steps)

    def enqueue(self, *steps: Step) -> ScriptedModel:
        """Append turns to the script; returns the model for chaining."""
        self._steps.extend(steps)
        return self

    @property
    def remaining(self) -> int:
        """How many scripted turns are left."""
        return len(self._steps)

    def assert_complete(self) -> None:
        """Raise if the script still has turns left."""
        if self._steps:
            raise UnconsumedModelSteps(f"{len(self._steps)} scripted turn(s) were never requested.")

    async def _next_turn(self, request: ModelRequest) -> Turn:
        if not self._steps:
            raise UnexpectedModelCall(
                f"The model was asked for turn {len(self.requests)} but the script has no more turns; "
                "enqueue another one."
            )
        return _as_turn(self._steps.pop(0), self.route)


ModelFunction = Callable[[ModelRequest], "Step | Awaitable[Step]"]


class FunctionModel(_FakeBase):
    """A model whose every turn is computed by a function of the request.

    The function receives a `ModelRequest` (transcript, tools, options) and returns a turn, a string,
    or an awaitable of either.
    """

    def __init__(self, function: ModelFunction, *, name: str = "function", chunk_size: int = 4) -> None:
        super().__init__(name=name, chunk_size=chunk_size)
        self._function = function

    async def _next_turn(self, request: ModelRequest) -> Turn:
        result = self._function(request)
        if inspect.isawaitable(result):
            result = await result
        return _as_turn(result, self.route)
