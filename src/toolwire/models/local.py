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

The model is loaded once per process and path and shared; inference runs in a worker thread under
the engine's lock, so requests are serialised and the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from toolwire.exceptions import ConfigError, ModelResponseError
from toolwire.messages import AssistantMessage, Message, ToolCall, ToolSpec, Turn, Usage
from toolwire.models.base import RequestOptions, StreamEvent, TextDelta, TurnComplete
from toolwire.models.local_engine import Engine, load_engine
from toolwire.models.local_model_files import resolve_model_path
from toolwire.models.local_prompt import (
    ContextWindowError,
    call_grammar,
    fit_prompt,
    guidance,
    parse_text_calls,
)

__all__ = ["ContextWindowError", "LocalModel"]

_DEFAULT_MAX_TOKENS = 512
_CALL_MAX_TOKENS = 256
_MAX_CALLS = 8


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


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
        constrained: Decode tool calls under the schema grammar; `False` parses the model's free
            text instead (measured in benchmarks/, not for production).
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
        constrained: bool = True,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self._model_path = model_path
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self.call_threshold = call_threshold
        self.closing_bias = closing_bias
        self.constrained = constrained
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
            max_tokens=_CALL_MAX_TOKENS,
            stop=stop,
            closing_bias=self.closing_bias,
        ):
            generated += used
            arguments = _drop_unset(arguments, next(t for t in offered if t.name == name))
            calls.append(ToolCall(id=_new_call_id(), name=name, arguments=arguments))
        return calls, generated

    def _generate(
        self,
        transcript: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: RequestOptions,
        stop: threading.Event,
    ) -> Iterator[str | Turn]:
        """Produce text pieces, then the Turn; runs in a worker thread, holding the engine lock."""
        engine = self.engine()
        offered = _offered_tools(tools, options.tool_choice)
        max_tokens = options.max_tokens or _DEFAULT_MAX_TOKENS
        temperature = options.temperature or 0.0
        with engine.lock:
            system_extra = guidance(offered) if offered else ""
            prompt = fit_prompt(engine, transcript, offered, reserve=max_tokens, system_extra=system_extra)
            forced = bool(offered) and options.tool_choice not in (None, "auto")
            p_call = engine.call_probability(prompt) if offered and not forced else 0.0
            calls: list[ToolCall] = []
            text_parts: list[str] = []
            generated = 0
            finish = "stop"
            if offered and self.constrained and (forced or p_call >= self.call_threshold):
                calls, generated = self._calls(engine, prompt, offered, options, stop)
                if not calls:
                    raise ModelResponseError(
                        "The local model started a tool call but did not finish it; ask again, "
                        "or rephrase the request more explicitly."
                    )
                finish = "tool_calls"
            else:
                ban_calls = bool(offered) and self.constrained
                said: list[int] = []
                for piece, used, reason in engine.stream_text(
                    prompt,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    ban_call_start=ban_calls,
                    stop=stop,
                    generated=said,
                ):
                    generated = used
                    finish = reason
                    if piece:
                        if offered and not self.constrained:
                            text_parts.append(piece)  # parsed below; not streamed as prose
                            continue
                        text_parts.append(piece)
                        yield piece
                if finish == "tool_calls":
                    # The model announced a call in prose, then opened it: decode it after the prose
                    # (the answer carries both, as an OpenAI model's may).
                    calls, used = self._calls(engine, prompt + said, offered, options, stop)
                    generated += used
                    finish = "tool_calls" if calls else "stop"
            if stop.is_set():
                raise _Cancelled
        text = "".join(text_parts)
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
            usage=Usage(input_tokens=len(prompt), output_tokens=generated, requests=1),
            route="local",
            finish_reason=finish,
        )


def _offered_tools(tools: Sequence[ToolSpec], tool_choice: str | dict[str, Any] | None) -> list[ToolSpec]:
    """The tools the model may call under `tool_choice` (empty: it must answer in text)."""
    if tool_choice == "none":
        return []
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
        named = [t for t in tools if t.name == wanted]
        if not named:
            raise ConfigError(
                f"tool_choice names {wanted!r}, which is not among the tools offered; "
                "offer that tool or drop tool_choice."
            )
        return named
    return list(tools)


def _drop_unset(arguments: str, tool: ToolSpec) -> str:
    """Drop optional arguments the model set to an empty string.

    Small models fill every property they see, writing `""` for the ones the user did not give;
    as a filter that would mean "the empty category", not "no filter".
    """
    args = json.loads(arguments)
    required = set(tool.parameters.get("required", ()))
    kept = {k: v for k, v in args.items() if k in required or v != ""}
    return arguments if kept == args else json.dumps(kept, ensure_ascii=False)
