"""The embedded model's second look: a call it only described is made, a call on impulse is dropped.

The engine here is scripted (what the model says, how sure it is, and what it answers when asked
apart whether the user's message needs a function), so each rule of `LocalModel` is seen on its
own. The real model's figures for the same rules are in benchmarks/local_accuracy.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import pytest

from toolwire.messages import AssistantMessage, SystemMessage, ToolCall, ToolResult, ToolSpec, UserMessage
from toolwire.models.base import RequestOptions, TextDelta, TurnComplete
from toolwire.models.local import LocalModel

pytestmark = pytest.mark.skipif(
    find_spec("llama_cpp") is None,  # the call grammar is built with llama.cpp's converter
    reason="the embedded model needs the local extra: pip install -e '.[local]' (make test installs it)",
)

TOOLS = [
    ToolSpec(
        name="get_ticket",
        description="Get one support ticket by its id.",
        parameters={
            "type": "object",
            "properties": {"ticket_id": {"type": "string"}},
            "required": ["ticket_id"],
        },
    ),
    ToolSpec(
        name="create_ticket",
        description="Open a new support ticket.",
        parameters={"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
    ),
]
PROMPT = [1, 2, 3]
DESCRIBED = ("To see ticket T-88, ", "you can use the `get_ticket` function ", "with its id.")


class Scripted:
    """A loaded model whose every choice is given: `p_call`, its prose, its call and its yes-share."""

    n_ctx = 4096
    judge_n_ctx = 1024

    def __init__(
        self,
        *,
        p_call: float,
        prose: tuple[str, ...],
        call: tuple[str, str],
        yes: float | tuple[float, float],
    ) -> None:
        self.lock = threading.Lock()
        self.p_call, self.prose, self.call = p_call, prose, call
        self.yes = yes if isinstance(yes, tuple) else (yes, yes)
        """The yes-share of each of the two phrasings of the question."""
        self.questions: list[str] = []
        self.grammars: list[str] = []
        self.call_contexts: list[list[int]] = []

    def render(self, messages: list[dict[str, Any]], tools: object) -> str:
        return str(messages[-1]["content"])

    def tokenize(self, text: str) -> list[int]:
        question = "yes or no" in text or "require calling" in text
        return [9] * (1 + len(text) // 1000) if question else PROMPT  # a token per 1000 characters

    def call_probability(self, tokens: list[int]) -> float:
        return self.p_call

    def yes_share(self, tokens: list[int]) -> float:
        assert set(tokens) == {9}, "the question is asked apart from the conversation"
        share = self.yes[len(self.questions) % 2]
        self.questions.append("asked")
        return share

    def stream_text(
        self, tokens: list[int], *, generated: list[int], **_: object
    ) -> Iterator[tuple[str, int, str]]:
        for piece in self.prose:
            generated.append(10 + len(generated))
            yield piece, len(generated), "stop"

    def constrained_calls(
        self, context: list[int], grammar: str, **_: object
    ) -> Iterator[tuple[str, str, int]]:
        self.call_contexts.append(context)
        self.grammars.append(grammar)
        yield self.call[0], self.call[1], 5


def model_with(engine: Scripted, **settings: Any) -> LocalModel:
    model = LocalModel("unused.gguf", **settings)
    model._engine = engine  # type: ignore[assignment]
    return model


def asking(text: str) -> list[Any]:
    return [SystemMessage(content="You run a support desk."), UserMessage(content=text)]


async def streamed(model: LocalModel, transcript: list[Any]) -> tuple[list[str], Any]:
    deltas, turn = [], None
    async for event in model.stream(transcript, TOOLS, RequestOptions()):
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, TurnComplete):
            turn = event.turn
    return deltas, turn


async def test_a_described_call_the_model_confirms_is_made_instead_of_told() -> None:
    engine = Scripted(p_call=0.35, prose=DESCRIBED, call=("get_ticket", '{"ticket_id": "T-88"}'), yes=0.8)
    deltas, turn = await streamed(model_with(engine), asking("What is the state of ticket 88?"))

    assert deltas == [], "the description is held back, never streamed"
    assert turn.message.text is None
    assert [(c.name, c.arguments) for c in turn.message.tool_calls] == [
        ("get_ticket", '{"ticket_id": "T-88"}')
    ]
    assert turn.finish_reason == "tool_calls"
    assert engine.call_contexts == [PROMPT], "decoded as if called at once, not after the prose"
    assert "get_ticket" in engine.grammars[0] and "create_ticket" not in engine.grammars[0]
    assert turn.usage.output_tokens == len(DESCRIBED) + 5


async def test_a_described_call_the_model_does_not_confirm_stays_text_sent_whole() -> None:
    engine = Scripted(p_call=0.35, prose=DESCRIBED, call=("get_ticket", "{}"), yes=0.6)
    model = model_with(engine)
    deltas, turn = await streamed(model, asking("How do tickets work here?"))

    assert deltas == ["".join(DESCRIBED)], "held until the second look, then sent in one piece"
    assert turn.message.text == "".join(DESCRIBED)
    assert turn.message.tool_calls == ()
    assert engine.questions == ["asked", "asked"] and engine.call_contexts == []
    whole = await model.request(asking("How do tickets work here?"), TOOLS, RequestOptions())
    assert whole.message.text == turn.message.text, "a stream and a whole answer say the same"


async def test_a_read_is_made_on_less_certainty_than_a_write() -> None:
    # 0.65: below the bar for a write (0.685), above the one for a read (0.6).
    reader = ToolSpec(**{**vars(TOOLS[0]), "effect": "read"})
    writer = ToolSpec(**{**vars(TOOLS[1]), "effect": "write"})
    engine = Scripted(p_call=0.35, prose=DESCRIBED, call=("get_ticket", '{"ticket_id": "T-88"}'), yes=0.65)
    turn = await model_with(engine).request(asking("Ticket 88?"), [reader, writer], RequestOptions())
    assert [c.name for c in turn.message.tool_calls] == ["get_ticket"]

    engine = Scripted(p_call=0.35, prose=DESCRIBED, call=("get_ticket", '{"ticket_id": "T-88"}'), yes=0.65)
    turn = await model_with(engine).request(asking("Ticket 88?"), TOOLS, RequestOptions())
    assert turn.message.tool_calls == (), "a tool of unknown effect is held to a write's bar"

    said = ("To open one, ", "use `create_ticket`.")
    engine = Scripted(p_call=0.35, prose=said, call=("create_ticket", '{"title": "x"}'), yes=0.65)
    turn = await model_with(engine).request(asking("Tickets?"), [reader, writer], RequestOptions())
    assert turn.message.tool_calls == () and turn.message.text == "".join(said)

    engine = Scripted(p_call=0.35, prose=DESCRIBED, call=("get_ticket", '{"ticket_id": "T-88"}'), yes=0.55)
    turn = await model_with(engine).request(asking("Ticket 88?"), [reader, writer], RequestOptions())
    assert turn.message.tool_calls == (), "below the read's bar too"


async def test_an_answer_the_model_was_never_close_to_calling_for_streams_as_it_comes() -> None:
    engine = Scripted(p_call=0.05, prose=DESCRIBED, call=("get_ticket", "{}"), yes=0.99)
    deltas, turn = await streamed(model_with(engine), asking("What can you do?"))

    assert deltas == list(DESCRIBED)
    assert turn.message.tool_calls == () and engine.questions == []


async def test_a_call_opened_on_impulse_is_dropped_for_a_text_answer() -> None:
    engine = Scripted(p_call=0.6, prose=("Goodbye!",), call=("create_ticket", '{"title": "Bye"}'), yes=0.4)
    turn = await model_with(engine).request(asking("Cheers, bye!"), TOOLS, RequestOptions())

    assert turn.message.tool_calls == ()
    assert turn.message.text == "Goodbye!"
    assert turn.finish_reason == "stop"
    assert turn.usage.output_tokens == 5 + 1, "the dropped call's tokens were still spent"


async def test_a_call_the_model_opened_with_conviction_is_not_second_guessed() -> None:
    engine = Scripted(p_call=0.9, prose=("unused",), call=("create_ticket", '{"title": "Wiki"}'), yes=0.1)
    turn = await model_with(engine).request(asking("Create a ticket titled 'Wiki'"), TOOLS, RequestOptions())
    assert [c.name for c in turn.message.tool_calls] == ["create_ticket"] and engine.questions == []


async def test_the_two_phrasings_are_averaged() -> None:
    # 0.9 and 0.4: one phrasing alone would confirm the call, their mean (0.65) does not.
    engine = Scripted(
        p_call=0.6, prose=("Goodbye!",), call=("create_ticket", '{"title": "Bye"}'), yes=(0.9, 0.4)
    )
    turn = await model_with(engine).request(asking("Cheers, bye!"), TOOLS, RequestOptions())
    assert turn.message.tool_calls == () and engine.questions == ["asked", "asked"]

    engine = Scripted(
        p_call=0.6, prose=("unused",), call=("create_ticket", '{"title": "Bye"}'), yes=(0.9, 0.5)
    )
    turn = await model_with(engine).request(asking("Open a ticket"), TOOLS, RequestOptions())
    assert [c.name for c in turn.message.tool_calls] == ["create_ticket"], "a mean of 0.7 confirms it"


async def test_a_confirmed_call_stands() -> None:
    engine = Scripted(p_call=0.6, prose=("unused",), call=("create_ticket", '{"title": "Printer"}'), yes=0.9)
    turn = await model_with(engine).request(asking("Open a ticket: printer broken"), TOOLS, RequestOptions())

    assert [c.name for c in turn.message.tool_calls] == ["create_ticket"]
    assert engine.questions == ["asked", "asked"]


async def test_no_second_look_after_tool_results_or_when_turned_off_or_forced() -> None:
    after_result = [
        *asking("What is the state of ticket 88?"),
        AssistantMessage(
            tool_calls=(ToolCall(id="c1", name="get_ticket", arguments='{"ticket_id": "T-88"}'),)
        ),
        ToolResult(call_id="c1", name="get_ticket", content='{"status": "open"}'),
    ]
    summary = ("I used `get_ticket`: ", "ticket T-88 is open.")
    engine = Scripted(p_call=0.35, prose=summary, call=("get_ticket", "{}"), yes=0.99)
    deltas, turn = await streamed(model_with(engine), after_result)
    assert deltas == list(summary) and turn.message.tool_calls == ()

    engine = Scripted(p_call=0.35, prose=DESCRIBED, call=("get_ticket", "{}"), yes=0.99)
    deltas, turn = await streamed(model_with(engine, confirm_threshold=None), asking("Ticket 88?"))
    assert deltas == list(DESCRIBED) and turn.message.tool_calls == ()

    engine = Scripted(p_call=0.0, prose=(), call=("create_ticket", '{"title": "x"}'), yes=0.0)
    forced = RequestOptions(tool_choice="required")
    turn = await model_with(engine).request(asking("Cheers"), TOOLS, forced)
    assert [c.name for c in turn.message.tool_calls] == ["create_ticket"]
    assert engine.questions == []


async def test_a_message_too_long_to_ask_about_apart_keeps_the_models_own_choice() -> None:
    engine = Scripted(p_call=0.6, prose=("unused",), call=("create_ticket", '{"title": "Long"}'), yes=0.0)
    long_message = "Open a ticket about this log: " + "x" * 1_100_000
    turn = await model_with(engine).request(asking(long_message), TOOLS, RequestOptions())
    assert [c.name for c in turn.message.tool_calls] == ["create_ticket"] and engine.questions == []


def test_no_memory_for_the_second_context_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from toolwire.models import local_engine
    from toolwire.models.local_model_files import LocalModelError, ModelFileError

    def refuse(path: Path, n_ctx: int, n_threads: int) -> None:
        raise ModelFileError("llama.cpp cannot load the local model file")  # as a failed allocation does

    monkeypatch.setattr(local_engine, "_new_llama", refuse)
    engine = object.__new__(local_engine.Engine)  # the loaded model's own context is not needed here
    engine.path, engine.judge_n_ctx, engine.n_threads, engine._judge = Path("model.gguf"), 1024, 2, None
    with pytest.raises(LocalModelError, match="free some memory, or pass confirm_threshold=None"):
        engine.yes_share([1, 2, 3])


class Cancelled(Scripted):
    """Describes a call, then waits mid-answer until the consumer goes away."""

    entered = threading.Event()

    def stream_text(
        self, tokens: list[int], *, generated: list[int], **_: object
    ) -> Iterator[tuple[str, int, str]]:
        stop = _["stop"]
        assert isinstance(stop, threading.Event)
        generated.append(10)
        yield DESCRIBED[0] + DESCRIBED[1], 1, "stop"
        self.entered.set()
        stop.wait(10)  # set when the request is cancelled


async def test_an_answer_held_back_for_a_consumer_that_went_away_asks_nothing_more() -> None:
    engine = Cancelled(p_call=0.35, prose=(), call=("get_ticket", "{}"), yes=0.99)
    task = asyncio.create_task(model_with(engine).request(asking("Ticket 88?"), TOOLS, RequestOptions()))
    assert await asyncio.to_thread(engine.entered.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(engine.lock.acquire, True, 10), "the worker finished"
    assert engine.questions == [] and engine.call_contexts == []
