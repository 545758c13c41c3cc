"""The tool loop: ask the model, check and run what it proposes, feed the results back, repeat.

Rules (seed 000's loop with seed 003's safety rules):
- Tools are offered while a decision is needed. The loop stops on a turn without tool calls, or after
  `max_rounds` turns that called tools; in that case one last request *without* tools asks for the
  final answer, so a looping model still ends in text.
- Every call id proposed in a turn gets exactly one result, placed in the transcript right after the
  assistant turn, in the order the calls were proposed, whatever happened to the call.
- At most `max_calls_per_turn` calls of one turn are executed; the rest are answered `too_many_calls`.
- Consecutive reads run concurrently (at most `max_concurrency` at once); a write runs alone, after
  everything proposed before it and before everything proposed after it. A failing call never cancels
  a sibling: the Gate turns every failure into a result.
- A forcing `tool_choice` (`required` or a named function) applies to the first request only, so the
  model is free to answer once the tool ran.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from toolwire.context import Context
from toolwire.gate import CheckedCall, Gate, error_result
from toolwire.messages import (
    AssistantMessage,
    CallTrace,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    Turn,
    Usage,
    UserMessage,
)
from toolwire.models.base import Model, RequestOptions, TextDelta, TurnComplete
from toolwire.tools import Tool, Toolbox

__all__ = ["CallFinished", "CallProposed", "RunComplete", "RunEvent", "RunResult", "Runner"]

SystemPrompt = str | Callable[[Context], str]


@dataclass(kw_only=True, frozen=True)
class RunResult:
    """What one run produced."""

    answer: str
    """The final text for the user."""
    transcript: tuple[Message, ...]
    """The whole conversation, system prompt included: pass it as `history` to continue."""
    calls: tuple[CallTrace, ...]
    """Every proposed call and its outcome, in proposal order."""
    usage: Usage
    """Tokens and requests, summed over the run."""
    rounds: int
    """How many model requests the run made."""
    route: str
    """The route that produced the final answer (`chat`, `responses`, `jsonplan`, `local`...)."""
    stop_reason: Literal["answer", "max_rounds"] = "answer"
    """`max_rounds` when the model kept calling tools until the limit."""


@dataclass(kw_only=True, frozen=True)
class CallProposed:
    """The model proposed a call; nothing has run yet."""

    call: ToolCall
    round: int


@dataclass(kw_only=True, frozen=True)
class CallFinished:
    """A proposed call was answered (executed, refused, or failed)."""

    trace: CallTrace
    result: ToolResult


@dataclass(kw_only=True, frozen=True)
class RunComplete:
    """The run is over; the last event of every stream."""

    result: RunResult


RunEvent = TextDelta | CallProposed | CallFinished | RunComplete
"""What `Runner.stream` yields: text as it arrives, calls as they are proposed and answered, the result."""

_FORCING = ("required",)


class Runner:
    """Runs the tool loop of one model over one toolbox.

    Example:
        ```python
        runner = Runner(OpenAIModel("gpt-4.1-mini", base_url=...), [create_item, list_items])
        result = await runner.run("Book 12.50 for lunch", context=Context(user_id="u1"))
        print(result.answer)
        ```
    """

    def __init__(
        self,
        model: Model,
        tools: Toolbox | Iterable[Tool] = (),
        *,
        gate: Gate | None = None,
        system_prompt: SystemPrompt | None = None,
        options: RequestOptions | None = None,
        max_rounds: int = 8,
        max_calls_per_turn: int = 16,
        max_concurrency: int = 8,
    ) -> None:
        if max_rounds < 1 or max_calls_per_turn < 1 or max_concurrency < 1:
            raise ValueError("max_rounds, max_calls_per_turn and max_concurrency must be at least 1.")
        self.model = model
        self.toolbox = tools if isinstance(tools, Toolbox) else Toolbox(tools)
        self.gate = gate or Gate(self.toolbox)
        self.system_prompt = system_prompt
        self.options = options or RequestOptions()
        self.max_rounds = max_rounds
        self.max_calls_per_turn = max_calls_per_turn
        self.max_concurrency = max_concurrency

    async def run(
        self,
        input: str | Sequence[Message],
        *,
        context: Context | None = None,
        history: Sequence[Message] = (),
    ) -> RunResult:
        """Run the loop to its final answer, asking the model for whole responses.

        Args:
            input: the user's text, or messages to append to the history.
            context: who is asking; injected into tools, never shown to the model.
            history: an earlier run's `transcript`, to continue that conversation.

        Raises:
            ModelError: the model endpoint failed in a way no fallback could absorb.
        """
        result: RunResult | None = None
        async for event in self._loop(input, context, history, streaming=False):
            if isinstance(event, RunComplete):
                result = event.result
        assert result is not None  # _loop always ends with RunComplete or raises
        return result

    def stream(
        self,
        input: str | Sequence[Message],
        *,
        context: Context | None = None,
        history: Sequence[Message] = (),
    ) -> AsyncIterator[RunEvent]:
        """Run the loop, yielding text deltas and call events as they happen, then `RunComplete`."""
        return self._loop(input, context, history, streaming=True)

    def _start(
        self, input: str | Sequence[Message], context: Context, history: Sequence[Message]
    ) -> list[Message]:
        transcript: list[Message] = []
        if self.system_prompt is not None:
            prompt = (
                self.system_prompt if isinstance(self.system_prompt, str) else self.system_prompt(context)
            )
            transcript.append(SystemMessage(content=prompt))
        # The runner owns the system prompt: an old one in the history would contradict today's.
        transcript.extend(m for m in history if not isinstance(m, SystemMessage))
        if isinstance(input, str):
            transcript.append(UserMessage(content=input))
        else:
            transcript.extend(input)
        return transcript

    async def _loop(
        self,
        input: str | Sequence[Message],
        context: Context | None,
        history: Sequence[Message],
        *,
        streaming: bool,
    ) -> AsyncIterator[RunEvent]:
        context = context or Context()
        transcript = self._start(input, context, history)
        specs = self.toolbox.specs()
        # The model learns the date the application goes by (the one the tools resolve "today" in).
        options = self.options if self.options.now else replace(self.options, now=context.current_time())
        usage = Usage()
        traces: list[CallTrace] = []
        requests = 0
        stop: Literal["answer", "max_rounds"] = "answer"
        turn: Turn | None = None
        # Identical writes (same tool and arguments) seen so far in this request: the occurrence
        # number keeps their idempotency keys apart, and a retried request counts the same way.
        seen: Counter[tuple[str, str]] = Counter()

        while True:
            offer = specs if requests < self.max_rounds else []
            if not offer and requests:
                stop = "max_rounds"
            request_options = options if offer else _without_tools(options)
            requests += 1
            if streaming:
                async for event in self.model.stream(transcript, offer, request_options):
                    if isinstance(event, TurnComplete):
                        turn = event.turn
                    else:
                        yield event
            else:
                turn = await self.model.request(transcript, offer, request_options)
            assert turn is not None
            usage = usage + turn.usage
            message = turn.message
            if not offer and message.tool_calls:
                # Asked without tools, a model may still name one; it is not executed, and the
                # transcript must not hold calls nobody answered.
                message = AssistantMessage(text=message.text)
            transcript.append(message)
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                yield CallProposed(call=call, round=requests)
            answered: list[CallFinished | None] = [None] * len(message.tool_calls)
            async for index, finished in self._answer_calls(message.tool_calls, context, requests, seen):
                answered[index] = finished
                yield finished
            done = [a for a in answered if a is not None]
            traces.extend(a.trace for a in done)
            transcript.extend(a.result for a in done)
            if options.tool_choice in _FORCING or isinstance(options.tool_choice, dict):
                options = replace(options, tool_choice=None)

        yield RunComplete(
            result=RunResult(
                answer=message.text or "",
                transcript=tuple(transcript),
                calls=tuple(traces),
                usage=usage,
                rounds=requests,
                route=turn.route,
                stop_reason=stop,
            )
        )

    async def _answer_calls(
        self, calls: Sequence[ToolCall], context: Context, round: int, seen: Counter[tuple[str, str]]
    ) -> AsyncIterator[tuple[int, CallFinished]]:
        """Answer every call of one turn, yielding each as it finishes, tagged with its position."""
        segment: list[tuple[int, CheckedCall]] = []
        for index, call in enumerate(calls):
            started = time.perf_counter()
            if index >= self.max_calls_per_turn:
                result = error_result(
                    call,
                    "too_many_calls",
                    f"Only {self.max_calls_per_turn} calls are executed per turn; "
                    "propose the remaining ones in the next turn.",
                )
                yield index, await self._refused(call, result, context, started, round)
                continue
            checked = self.gate.check(call)
            if isinstance(checked, ToolResult):
                yield index, await self._refused(call, checked, context, started, round)
                continue
            if checked.tool.effect == "read":
                segment.append((index, checked))
                continue
            # A write is a barrier: the reads proposed before it finish first, then it runs alone.
            async for item in self._run_reads(segment, context, round):
                yield item
            segment = []
            occurrence = seen[checked.identity]
            seen[checked.identity] += 1
            yield index, await self._run_one(checked, context, round, occurrence)
        async for item in self._run_reads(segment, context, round):
            yield item

    async def _run_one(
        self, checked: CheckedCall, context: Context, round: int, occurrence: int = 0
    ) -> CallFinished:
        started = time.perf_counter()
        result = await self.gate.execute(checked, context, occurrence=occurrence)
        return _finished(checked.call, result, started, round)

    async def _refused(
        self, call: ToolCall, result: ToolResult, context: Context, started: float, round: int
    ) -> CallFinished:
        finished = _finished(call, result, started, round)
        await self.gate.refused(call, result, context, duration_ms=finished.trace.duration_ms)
        return finished

    async def _run_reads(
        self, segment: list[tuple[int, CheckedCall]], context: Context, round: int
    ) -> AsyncIterator[tuple[int, CallFinished]]:
        if not segment:
            return
        if len(segment) == 1:
            index, checked = segment[0]
            yield index, await self._run_one(checked, context, round)
            return
        limit = asyncio.Semaphore(self.max_concurrency)

        async def bounded(index: int, checked: CheckedCall) -> tuple[int, CallFinished]:
            async with limit:
                return index, await self._run_one(checked, context, round)

        tasks = [asyncio.ensure_future(bounded(index, checked)) for index, checked in segment]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            # Only reached early when the consumer stops listening: do not leave reads running.
            for task in tasks:
                task.cancel()


def _finished(call: ToolCall, result: ToolResult, started: float, round: int) -> CallFinished:
    trace = CallTrace(
        call_id=call.id,
        name=call.name,
        arguments=call.arguments,
        outcome=result.code or "ok",
        result=result.content,
        duration_ms=(time.perf_counter() - started) * 1000,
        replayed=result.replayed,
        round=round,
    )
    return CallFinished(trace=trace, result=result)


def _without_tools(options: RequestOptions) -> RequestOptions:
    # tool_choice or parallel_tool_calls without tools is a 400 on OpenAI's endpoints.
    if options.tool_choice is None and options.parallel_tool_calls is None:
        return options
    return replace(options, tool_choice=None, parallel_tool_calls=None)
