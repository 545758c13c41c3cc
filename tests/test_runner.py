"""The tool loop: rounds, result linkage, scheduling of reads and writes, limits."""

from __future__ import annotations

import asyncio
import json

import pytest

from toolwire.context import Context
from toolwire.messages import AssistantMessage, SystemMessage, ToolResult, UserMessage
from toolwire.models.base import RequestOptions, TextDelta
from toolwire.runner import CallFinished, CallProposed, RunComplete, Runner
from toolwire.testing import FunctionModel, ModelRequest, ScriptedModel, call, reply
from toolwire.tools import tool


class Counter:
    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []


@pytest.fixture
def weather() -> tuple[Counter, object]:
    counter = Counter()

    @tool
    def get_weather(city: str, unit: str = "c") -> dict[str, object]:
        """Current weather for a city.

        Args:
            city: The city name.
            unit: c or f.
        """
        counter.calls.append({"city": city, "unit": unit})
        return {"city": city, "temp": 18}

    return counter, get_weather


async def test_read_call_is_linked_to_its_result_and_answered(weather: tuple[Counter, object]) -> None:
    counter, get_weather = weather
    model = ScriptedModel(
        [reply(None, call("get_weather", {"city": "Paris"}, id="c1")), "18 degrees in Paris."]
    )
    runner = Runner(model, [get_weather], system_prompt="Be brief.")  # type: ignore[list-item]

    result = await runner.run("Weather in Paris?")

    assert result.answer == "18 degrees in Paris."
    assert counter.calls == [{"city": "Paris", "unit": "c"}]
    [trace] = result.calls
    assert (trace.call_id, trace.name, json.loads(trace.arguments), trace.outcome) == (
        "c1",
        "get_weather",
        {"city": "Paris"},
        "ok",
    )
    kinds = [type(m).__name__ for m in result.transcript]
    assert kinds == ["SystemMessage", "UserMessage", "AssistantMessage", "ToolResult", "AssistantMessage"]
    tool_result = result.transcript[3]
    assert isinstance(tool_result, ToolResult) and tool_result.call_id == "c1"
    assert json.loads(tool_result.content) == {"city": "Paris", "temp": 18}
    # The second request carried the result right after the assistant turn that asked for it.
    second = model.requests[1].transcript
    assert isinstance(second[2], AssistantMessage) and second[3] == tool_result
    assert result.rounds == 2 and result.usage.requests == 2
    model.assert_complete()


async def test_no_tool_needed_gives_text_and_no_call(weather: tuple[Counter, object]) -> None:
    counter, get_weather = weather
    model = ScriptedModel(["Hello! How can I help?"])
    result = await Runner(model, [get_weather]).run("Hi")  # type: ignore[list-item]
    assert result.answer == "Hello! How can I help?"
    assert result.calls == () and counter.calls == [] and result.rounds == 1
    assert [s.name for s in model.requests[0].tools] == ["get_weather"]


async def test_invalid_and_unknown_calls_are_answered_without_running(
    weather: tuple[Counter, object],
) -> None:
    counter, get_weather = weather
    model = ScriptedModel(
        [
            reply(
                None,
                call("get_weather", {"town": "Paris"}, id="bad"),
                call("delete_everything", {}, id="unknown"),
                call("get_weather", "{not json", id="broken"),
            ),
            "Sorry.",
        ]
    )
    result = await Runner(model, [get_weather]).run("Weather?")  # type: ignore[list-item]
    assert counter.calls == []
    outcomes = {t.call_id: t.outcome for t in result.calls}
    assert outcomes == {"bad": "invalid_arguments", "unknown": "unknown_tool", "broken": "invalid_json"}
    results = [m for m in result.transcript if isinstance(m, ToolResult)]
    assert [r.call_id for r in results] == ["bad", "unknown", "broken"]
    assert all(r.is_error for r in results)


async def test_results_are_joined_by_id_whatever_order_calls_finish() -> None:
    release_first = asyncio.Event()

    @tool
    async def slow_lookup(key: str) -> str:
        """Look a key up."""
        if key == "first":
            await release_first.wait()
        else:
            release_first.set()
        return f"value of {key}"

    model = ScriptedModel(
        [
            reply(
                None,
                call("slow_lookup", {"key": "first"}, id="a"),
                call("slow_lookup", {"key": "second"}, id="b"),
            ),
            "ok",
        ]
    )
    events = [e async for e in Runner(model, [slow_lookup]).stream("both")]

    finished = [e.trace.call_id for e in events if isinstance(e, CallFinished)]
    assert finished == ["b", "a"]  # the second finished first...
    result = events[-1]
    assert isinstance(result, RunComplete)
    results = [m for m in result.result.transcript if isinstance(m, ToolResult)]
    assert [(r.call_id, r.content) for r in results] == [("a", "value of first"), ("b", "value of second")]


async def test_reads_run_concurrently_up_to_the_limit() -> None:
    running = 0
    peak = 0
    all_started = asyncio.Event()
    started = 0

    @tool(timeout=5)
    async def probe(n: int) -> int:
        """Probe."""
        nonlocal running, peak, started
        running += 1
        started += 1
        peak = max(peak, running)
        if started >= 3:
            all_started.set()
        # Proves concurrency without timing: each call waits until three have started.
        await asyncio.wait_for(all_started.wait(), 4)
        running -= 1
        return n

    model = ScriptedModel([reply(None, *(call("probe", {"n": i}) for i in range(6))), "done"])
    result = await Runner(model, [probe], max_concurrency=3).run("go")
    assert [t.outcome for t in result.calls] == ["ok"] * 6
    assert peak == 3


async def test_writes_run_alone_in_proposed_order() -> None:
    log: list[str] = []
    running = 0
    peak = 0

    @tool(effect="write")
    async def book(label: str) -> str:
        """Book something."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        log.append(f"start {label}")
        await asyncio.sleep(0)
        log.append(f"end {label}")
        running -= 1
        return label

    @tool
    async def look(label: str) -> str:
        """Look at something."""
        log.append(f"read {label}")
        return label

    model = ScriptedModel(
        [
            reply(
                None,
                call("look", {"label": "r1"}),
                call("book", {"label": "w1"}),
                call("book", {"label": "w2"}),
                call("look", {"label": "r2"}),
            ),
            "done",
        ]
    )
    await Runner(model, [book, look]).run("go")
    assert log == ["read r1", "start w1", "end w1", "start w2", "end w2", "read r2"]
    assert peak == 1


async def test_a_failing_call_does_not_cancel_its_siblings() -> None:
    done: list[int] = []

    @tool
    async def work(n: int) -> int:
        """Work."""
        await asyncio.sleep(0)
        if n == 1:
            raise RuntimeError("disk full")
        done.append(n)
        return n

    model = ScriptedModel([reply(None, *(call("work", {"n": i}, id=f"w{i}") for i in range(3))), "ok"])
    result = await Runner(model, [work]).run("go")
    assert sorted(done) == [0, 2]
    outcomes = {t.call_id: t.outcome for t in result.calls}
    assert outcomes == {"w0": "ok", "w1": "tool_error", "w2": "ok"}
    assert "disk full" in result.calls[1].result and "Traceback" not in result.calls[1].result


async def test_calls_beyond_the_per_turn_limit_are_refused(weather: tuple[Counter, object]) -> None:
    counter, get_weather = weather
    model = ScriptedModel([reply(None, *(call("get_weather", {"city": f"c{i}"}) for i in range(3))), "ok"])
    result = await Runner(model, [get_weather], max_calls_per_turn=2).run("go")  # type: ignore[list-item]
    assert [t.outcome for t in result.calls] == ["ok", "ok", "too_many_calls"]
    assert len(counter.calls) == 2


async def test_a_looping_model_stops_at_max_rounds_with_a_final_answer_without_tools(
    weather: tuple[Counter, object],
) -> None:
    counter, get_weather = weather

    def always_call(request: ModelRequest) -> AssistantMessage:
        if not request.tools:
            return reply("Here is what I found.")
        return reply(None, call("get_weather", {"city": "Paris"}))

    model = FunctionModel(always_call)
    runner = Runner(
        model,
        [get_weather],  # type: ignore[list-item]
        max_rounds=3,
        options=RequestOptions(tool_choice="auto", parallel_tool_calls=False),
    )
    result = await runner.run("loop")
    assert result.answer == "Here is what I found."
    assert result.stop_reason == "max_rounds"
    assert len(counter.calls) == 3 and result.rounds == 4
    final = model.requests[-1]
    assert (
        final.tools == () and final.options.tool_choice is None and final.options.parallel_tool_calls is None
    )
    assert [bool(r.tools) for r in model.requests] == [True, True, True, False]


async def test_a_call_proposed_without_tools_is_not_left_unanswered(weather: tuple[Counter, object]) -> None:
    counter, get_weather = weather
    model = ScriptedModel(
        [
            reply(None, call("get_weather", {"city": "Oslo"})),
            reply("Cold.", call("get_weather", {"city": "Rome"})),
        ]
    )
    result = await Runner(model, [get_weather], max_rounds=1).run("go")  # type: ignore[list-item]
    last = result.transcript[-1]
    assert isinstance(last, AssistantMessage) and last.tool_calls == () and last.text == "Cold."
    assert len(counter.calls) == 1


async def test_forcing_tool_choice_applies_to_the_first_request_only(weather: tuple[Counter, object]) -> None:
    _, get_weather = weather
    model = ScriptedModel([reply(None, call("get_weather", {"city": "Oslo"})), "Cold."])
    runner = Runner(model, [get_weather], options=RequestOptions(tool_choice="required"))  # type: ignore[list-item]
    await runner.run("go")
    assert [r.options.tool_choice for r in model.requests] == ["required", None]


async def test_every_request_carries_the_applications_clock_in_the_users_time_zone(
    weather: tuple[Counter, object],
) -> None:
    import datetime as dt
    from zoneinfo import ZoneInfo

    _, get_weather = weather
    model = ScriptedModel([reply(None, call("get_weather", {"city": "Oslo"})), "Cold."])
    berlin = ZoneInfo("Europe/Berlin")
    # 23:30 UTC is already the next day in Berlin: the model must be told the user's day.
    context = Context(now=dt.datetime(2025, 3, 13, 23, 30, tzinfo=dt.UTC), timezone=berlin)
    await Runner(model, [get_weather]).run("go", context=context)  # type: ignore[list-item]

    assert [r.options.now for r in model.requests] == [context.current_time()] * 2
    assert {r.options.now.date() for r in model.requests if r.options.now} == {dt.date(2025, 3, 14)}

    fixed = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    model = ScriptedModel(["Hi."])
    await Runner(model, [get_weather], options=RequestOptions(now=fixed)).run("go", context=context)  # type: ignore[list-item]
    assert model.requests[0].options.now == fixed, "a clock the caller set is kept"


async def test_stream_yields_text_then_calls_then_the_result(weather: tuple[Counter, object]) -> None:
    _, get_weather = weather
    model = ScriptedModel(
        [reply("Let me check. ", call("get_weather", {"city": "Oslo"}, id="x")), "It is cold in Oslo."]
    )
    events = [e async for e in Runner(model, [get_weather]).stream("Oslo?")]  # type: ignore[list-item]
    kinds = [type(e).__name__ for e in events]
    first_call = kinds.index("CallProposed")
    assert kinds[:first_call] == ["TextDelta"] * first_call
    assert kinds.index("CallFinished") > first_call and kinds[-1] == "RunComplete"
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Let me check. It is cold in Oslo."
    proposed = [e for e in events if isinstance(e, CallProposed)]
    assert proposed[0].call.id == "x" and proposed[0].round == 1
    final = events[-1]
    assert isinstance(final, RunComplete) and final.result.answer == "It is cold in Oslo."


async def test_context_reaches_the_tool_and_history_continues_a_conversation() -> None:
    seen: list[str] = []

    @tool
    def whoami(ctx: Context) -> str:
        """Who is asking."""
        seen.append(f"{ctx.tenant_id}/{ctx.user_id}/{ctx.request_id}")
        return ctx.user_id

    model = ScriptedModel([reply(None, call("whoami")), "You are u7.", "Still u7."])
    runner = Runner(model, [whoami], system_prompt=lambda ctx: f"User {ctx.user_id}")
    first = await runner.run("who?", context=Context(user_id="u7", tenant_id="t1", request_id="r1"))
    assert seen == ["t1/u7/r1"]
    assert "ctx" not in json.dumps(model.requests[0].tools[0].parameters)
    second = await runner.run("again?", history=first.transcript, context=Context(user_id="u7"))
    assert second.answer == "Still u7."
    sent = model.requests[-1].transcript
    assert sum(isinstance(m, SystemMessage) for m in sent) == 1
    assert [m.content for m in sent if isinstance(m, UserMessage)] == ["who?", "again?"]
