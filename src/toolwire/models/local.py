"""The embedded model: a GGUF file run in-process by llama.cpp, behind the Model protocol.

The Runner, the Gate and the trace cannot tell it from a remote endpoint: it takes the canonical
transcript and returns canonical turns with real `ToolCall`s. The prompt is the model's own chat
template (rendered here with Jinja2, so the template's tools section is used exactly as written).

"Constrain the form, not the decision": the model first decides freely whether its answer opens
with a tool call — the probability mass it puts on tokens that start a call (`<tool_call>`, a
fenced JSON block, a bare `{`) — and only when it chose to call is the call body decoded under a
grammar built from the tool schemas, one branch per tool, so a call always names a registered tool
with schema-valid arguments. Forcing the whole answer through a grammar of calls makes small models
call a tool even when none fits; leaving the call body free makes them write invalid calls.

That urge to open a call is a poor judge on its own, so a call in answer to a user gets a second
look: the model is asked apart whether the user's message needs that function. A call it opened
without conviction is dropped for a text answer, and a call it only described in its answer is
made (see `confirm_threshold`).

The model is loaded once per process and path and shared; inference runs in a worker thread under
the engine's lock, so requests are serialised and the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolwire.exceptions import ModelResponseError
from toolwire.messages import AssistantMessage, Message, ToolCall, ToolSpec, Turn, Usage, UserMessage
from toolwire.models.base import RequestOptions, StreamEvent, TextDelta, TurnComplete
from toolwire.models.local_calendar import calendar_note, takes_dates
from toolwire.models.local_dates import dated_calls
from toolwire.models.local_engine import Engine, asked_apart, load_engine
from toolwire.models.local_model_files import resolve_model_path
from toolwire.models.local_prompt import (
    CALL_MAX_TOKENS,
    ContextWindowError,
    call_grammar,
    confirm_questions,
    fit_prompt,
    guidance,
    named_tools,
    offered_tools,
    parse_text_calls,
)

__all__ = ["ContextWindowError", "LocalModel"]

logger = logging.getLogger(__name__)

_DEFAULT_MAX_TOKENS = 512
_MAX_CALLS = 8


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class _Answer:
    """What one turn has produced so far."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    generated: int = 0
    finish: str = "stop"


class _Cancelled(Exception):
    """The consumer of a stream went away; generation stops at the next token."""


class LocalModel:
    """The embedded llama.cpp model as a `Model`.

    Args:
        model_path: A GGUF file; default `TOOLWIRE_LOCAL_MODEL`, else the packaged model.
        n_ctx: The context window in tokens; longer transcripts lose their oldest turns.
        n_threads: CPU threads for inference; default every core this process may use.
        call_threshold: How sure the model must be (the probability of opening a call) before a
            call is made; higher means fewer calls when none fits and more missed calls.
        closing_bias: Natural-log odds by which a call's arguments end rather than take another
            optional argument (see `toolwire.models.local_closing`); higher means fewer arguments
            the user did not ask for, and past about 4 also fewer that the user did (measured on
            the accuracy set in benchmarks/); 0 turns it off.
        confirm_threshold: Answering a user's message, a call is made only when the model, asked
            apart whether the message needs that function, says yes with at least this share (see
            `confirm_questions`): a call it opened is dropped below it, and a call it only described
            in its answer ("you can use the `get_summary` function") is made at or above it. The
            default lies between the highest share of an unneeded call (0.68) and the lowest of a
            needed one (0.69) on the tuning set in benchmarks/. `None` turns the second look off.
        read_threshold: The same bar for a tool whose `ToolSpec.effect` is `"read"`: a call that
            was not needed costs a read and a round trip, where a write changes the business
            system, so a read is made on less certainty. On the tuning, held-out and late sets in
            benchmarks/ the needed reads the second look turned down had 0.61-0.68, the unneeded
            read it was asked about 0.58. A tool of unknown effect counts as a write.
        confirm_below: A call the model opened with at least this probability is not second-guessed
            (on the tuning set every unneeded call was opened below 0.7, and the one needed call
            the second look would have dropped, above 0.8).
        describe_floor: From this probability of opening a call up to `call_threshold`, an answer
            in text is held back until it is complete, so that a call it describes can still be
            made instead (such answers then arrive whole, not streamed).
        constrained: Decode tool calls under the schema grammar; `False` parses the model's free
            text instead (measured in benchmarks/, not for production).
        calendar: When a tool offered takes a date, write the days around today into the system
            prompt for the model to copy (see `toolwire.models.local_calendar`); today is the
            request's `RequestOptions.now` (the Runner sets it), else the machine's local date.
        date_threshold: In answer to a user's message, a call to a tool with optional date
            parameters keeps its date arguments only when the model, asked apart, says the message
            names a day, a date or a period with at least this share, and a call without any gets
            those the model writes without the closing bias (see `toolwire.models.local_dates`).
            The default lies below the lowest share of a message that names a time on the case
            sets in benchmarks/ (0.63). `None` turns the check off.
        progress: Told, in one line, when the packaged model is assembled (the first use only).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        call_threshold: float = 0.5,
        closing_bias: float = 3.0,
        confirm_threshold: float | None = 0.685,
        read_threshold: float = 0.6,
        confirm_below: float = 0.75,
        describe_floor: float = 0.2,
        constrained: bool = True,
        calendar: bool = True,
        date_threshold: float | None = 0.5,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self._model_path = model_path
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self.call_threshold = call_threshold
        self.closing_bias = closing_bias
        self.confirm_threshold = confirm_threshold
        self.read_threshold = read_threshold
        self.confirm_below = confirm_below
        self.describe_floor = describe_floor
        self.constrained = constrained
        self.calendar = calendar
        self.date_threshold = date_threshold
        self._progress = progress
        self._engine: Engine | None = None

    @property
    def name(self) -> str:
        """The model's name from its GGUF metadata (before loading: the file name)."""
        if self._engine is not None:
            return self._engine.name
        return Path(self._model_path).name if self._model_path else "local"

    def engine(self) -> Engine:
        """The shared loaded model, loading it on first use (blocking: call from a worker thread)."""
        if self._engine is None:
            path = resolve_model_path(self._model_path, progress=self._progress)
            self._engine = load_engine(path, n_ctx=self._n_ctx, n_threads=self._n_threads)
        return self._engine

    async def request(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        """Ask for one whole turn (inference runs in a worker thread)."""
        stop = threading.Event()

        def run() -> Turn:
            turn: Turn | None = None
            for item in self._generate(transcript, tools, options, stop):
                if isinstance(item, Turn):
                    turn = item
            assert turn is not None  # _generate always ends with a Turn
            return turn

        try:
            return await asyncio.to_thread(run)
        except asyncio.CancelledError:
            stop.set()  # the worker stops at its next token and releases the engine
            raise

    async def stream(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        """Yield the turn's text as it is generated, then the complete turn."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | Turn | BaseException] = asyncio.Queue()
        stop = threading.Event()

        def run() -> None:
            try:
                for item in self._generate(transcript, tools, options, stop):
                    loop.call_soon_threadsafe(queue.put_nowait, item)
            except _Cancelled:
                return
            except BaseException as exc:  # handed to the consumer, raised there
                loop.call_soon_threadsafe(queue.put_nowait, exc)

        worker = loop.run_in_executor(None, run)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Turn):
                    yield TurnComplete(turn=item)
                    return
                yield TextDelta(text=item)
        finally:
            stop.set()
            await asyncio.shield(worker)

    async def aclose(self) -> None:
        """Nothing to release per instance: the loaded model is shared by the process."""

    def _calls(
        self,
        engine: Engine,
        context: list[int],
        offered: list[ToolSpec],
        options: RequestOptions,
        stop: threading.Event,
    ) -> tuple[list[ToolCall], int]:
        """The calls decoded under the tools' grammar after `context`, and the tokens they took."""
        limit = 1 if options.parallel_tool_calls is False else _MAX_CALLS
        calls: list[ToolCall] = []
        generated = 0
        for name, arguments, used in engine.constrained_calls(
            context,
            call_grammar(offered),
            limit=limit,
            max_tokens=CALL_MAX_TOKENS,
            stop=stop,
            closing_bias=self.closing_bias,
        ):
            generated += used
            arguments = _drop_unset(arguments, next(t for t in offered if t.name == name))
            calls.append(ToolCall(id=_new_call_id(), name=name, arguments=arguments))
        return calls, generated

    def _unconfirmed(self, engine: Engine, asked: str | None, tools: Sequence[ToolSpec]) -> bool:
        """Whether the model, asked apart for each of `tools`, says `asked` does not need it."""
        if asked is None or self.confirm_threshold is None:
            return False  # no second look: the model's own choice stands
        for tool in tools:
            share = asked_apart(engine, confirm_questions(asked, tool))
            if share is None:
                continue  # too long to ask apart: the model's own choice stands
            logger.debug("second look at %s: yes share %.3f", tool.name, share)
            if share < (self.read_threshold if tool.effect == "read" else self.confirm_threshold):
                return True
        return False

    def _in_text(
        self,
        engine: Engine,
        prompt: list[int],
        offered: list[ToolSpec],
        options: RequestOptions,
        stop: threading.Event,
        temperature: float,
        max_tokens: int,
        answer: _Answer,
        asked: str | None,
        hold: bool,
    ) -> Generator[str, None, _Answer]:
        """Answer in text, streaming it unless `hold` holds it back for a second look at `asked`.

        A held answer that names a function the model then confirms becomes a call to it.
        """
        said: list[int] = []
        spent = answer.generated
        for piece, used, reason in engine.stream_text(
            prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            ban_call_start=bool(offered) and self.constrained,
            stop=stop,
            generated=said,
        ):
            answer.generated, answer.finish = spent + used, reason
            if piece:
                answer.text.append(piece)
                if not hold and (self.constrained or not offered):
                    yield piece  # free-text calls are parsed by the caller, not streamed as prose
        if answer.finish == "tool_calls":
            # The model announced a call in prose, then opened it: decode it after the prose
            # (the answer carries both, as an OpenAI model's may).
            answer.calls, used = self._calls(engine, prompt + said, offered, options, stop)
            answer.generated += used
            answer.finish = "tool_calls" if answer.calls else "stop"
        elif hold and asked is not None and not stop.is_set():
            named = named_tools("".join(answer.text), offered)
            logger.debug("the answer names %s", [t.name for t in named])
            if named and not self._unconfirmed(engine, asked, named):
                # It told the user which function to use instead of using it: use it.
                calls, used = self._calls(engine, prompt, named, options, stop)
                answer.generated += used
                if calls:
                    answer.calls, answer.text, answer.finish = calls, [], "tool_calls"
        if hold and answer.text:
            yield "".join(answer.text)
        return answer

    def _generate(
        self,
        transcript: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: RequestOptions,
        stop: threading.Event,
    ) -> Iterator[str | Turn]:
        """Produce text pieces, then the Turn; runs in a worker thread, holding the engine lock."""
        engine = self.engine()
        offered = offered_tools(tools, options.tool_choice)
        max_tokens = options.max_tokens or _DEFAULT_MAX_TOKENS
        temperature = options.temperature or 0.0
        last = transcript[-1] if transcript else None
        asked = last.content if isinstance(last, UserMessage) else None
        with engine.lock:
            system_extra = guidance(offered) if offered else ""
            if self.calendar and takes_dates(offered):
                now = options.now or dt.datetime.now().astimezone()
                system_extra += "\n\n" + calendar_note(now.date())
            prompt = fit_prompt(engine, transcript, offered, reserve=max_tokens, system_extra=system_extra)
            forced = bool(offered) and options.tool_choice not in (None, "auto")
            p_call = engine.call_probability(prompt) if offered and not forced else 0.0
            logger.debug("probability of a call: %.3f", p_call)
            # The second look is for the model's own choice in answer to a user: never after tool
            # results (its answer names the tools it used) and never against a forced call.
            checking = self.constrained and not forced and asked is not None
            checking = checking and self.confirm_threshold is not None
            answer = _Answer()
            if offered and self.constrained and (forced or p_call >= self.call_threshold):
                answer.calls, answer.generated = self._calls(engine, prompt, offered, options, stop)
                if not answer.calls:
                    raise ModelResponseError(
                        "The local model started a tool call but did not finish it; ask again, "
                        "or rephrase the request more explicitly."
                    )
                answer.finish = "tool_calls"
                chosen = [t for t in offered if any(c.name == t.name for c in answer.calls)]
                doubtful = checking and p_call < self.confirm_below
                if doubtful and self._unconfirmed(engine, asked, chosen):
                    answer = _Answer(generated=answer.generated)  # opened on impulse: answer in text
            if not answer.calls:
                # An answer that may describe a call is held back until the second look has seen it.
                hold = bool(offered) and checking and p_call >= self.describe_floor
                params = (prompt, offered, options, stop, temperature, max_tokens)
                answer = yield from self._in_text(engine, *params, answer, asked, hold)
            if answer.calls and asked is not None and self.date_threshold is not None:
                answer.calls, used = dated_calls(
                    engine, prompt, answer.calls, offered, asked, self.date_threshold, stop
                )
                answer.generated += used
            if stop.is_set():
                raise _Cancelled
        calls, finish, text = answer.calls, answer.finish, "".join(answer.text)
        if offered and not self.constrained:
            text, parsed = parse_text_calls(text)
            calls = [ToolCall(id=_new_call_id(), name=n, arguments=a) for n, a in parsed]
            if calls:
                finish = "tool_calls"
            elif text:
                yield text
        if not calls and not text.strip():
            raise ModelResponseError(
                "The local model produced neither text nor a tool call; ask again or rephrase the request."
            )
        yield Turn(
            message=AssistantMessage(text=text.strip() or None, tool_calls=tuple(calls)),
            usage=Usage(input_tokens=len(prompt), output_tokens=answer.generated, requests=1),
            route="local",
            finish_reason=finish,
        )


def _drop_unset(arguments: str, tool: ToolSpec) -> str:
    """Drop optional arguments the model set to an empty string.

    Small models fill every property they see, writing `""` for the ones the user did not give;
    as a filter that would mean "the empty category", not "no filter".
    """
    args = json.loads(arguments)
    required = set(tool.parameters.get("required", ()))
    kept = {k: v for k, v in args.items() if k in required or v != ""}
    return arguments if kept == args else json.dumps(kept, ensure_ascii=False)
