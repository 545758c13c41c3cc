from __future__ import annotations

import json

import jsonschema  # type: ignore[import-untyped]
import pytest

from toolwire.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
)
from toolwire.wire.jsonplan import (
    Plan,
    extract_plan,
    find_text_tool_calls,
    plan_prompt,
    plan_schema,
    render_transcript,
)

CREATE = ToolSpec(
    name="create_item",
    description="Creates a bookkeeping entry.",
    parameters={
        "type": "object",
        "properties": {"title": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["title", "amount"],
        "additionalProperties": False,
    },
)
SUMMARY = ToolSpec(
    name="get_summary",
    description="Totals for a month.",
    parameters={"type": "object", "properties": {"month": {"type": "string"}}},
)
NAMES = {"create_item", "get_summary"}
LUNCH = '{"action": {"name": "create_item", "args": {"title": "Lunch", "amount": 12.5}}, "reply": "Booked."}'
TEA = '{"title": "Tea", "amount": 3}'


# --- extract_plan ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        LUNCH,
        f"```json\n{LUNCH}\n```",
        "Sure! Here is the plan:\n"
        + LUNCH.replace(", ", ",\n ")
        + "\nLet me know if you need anything else.",
        f'{{"note": "not a plan"}} then {LUNCH}',
    ],
    ids=["bare", "fenced", "prose-around", "skips-object-without-action"],
)
def test_extract_plan_tolerates_fences_and_prose(text: str) -> None:
    plan = extract_plan(text)
    assert plan is not None and plan.is_call
    assert plan.name == "create_item"
    assert json.loads(plan.arguments) == {"title": "Lunch", "amount": 12.5}
    assert plan.reply == "Booked."


def test_extract_plan_ignores_braces_inside_strings_and_broken_objects() -> None:
    text = 'Use {curly} like: {"action": {"name": "create_item", "args": {"title": "a } b {"}}, "reply": ""}'
    plan = extract_plan(text)
    assert plan is not None and json.loads(plan.arguments)["title"] == "a } b {"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I'll book it.",
        '{"action": ',
        "{not json at all}",
        '{"reply": "no action key"}',
        '[{"action": 3}]',
        "{" * 5000,
    ],
)
def test_extract_plan_returns_none_without_a_plan(text: str) -> None:
    assert extract_plan(text) is None


def test_extract_plan_reads_the_none_action_and_common_slips() -> None:
    assert extract_plan('{"action": {"name": "none", "args": {}}, "reply": "Hello!"}') == Plan(
        name="none", arguments="{}", reply="Hello!"
    )
    assert extract_plan('{"action": null, "reply": "Hi"}') == Plan(name="none", arguments="{}", reply="Hi")
    flat = extract_plan('{"action": "get_summary", "args": {"month": "2024-05"}}')
    assert flat == Plan(name="get_summary", arguments='{"month": "2024-05"}', reply=None)
    # Arguments written as a string are kept verbatim for the Gate to judge.
    raw = extract_plan('{"action": {"name": "create_item", "args": "{\\"title\\": 1"}, "reply": ""}')
    assert raw is not None and raw.arguments == '{"title": 1'
    aliased = extract_plan('{"action": {"name": " get_summary ", "arguments": {"month": "x"}}}')
    assert (
        aliased is not None
        and aliased.name == "get_summary"
        and json.loads(aliased.arguments) == {"month": "x"}
    )


# --- find_text_tool_calls --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "create_item", "arguments": {"title": "Tea", "amount": 3}}',
        '{"name": "create_item", "parameters": {"title": "Tea", "amount": 3}}',
        json.dumps({"type": "function", "function": {"name": "create_item", "arguments": TEA}}),
        '<tool_call>\n{"name": "create_item", "arguments": {"title": "Tea", "amount": 3}}\n</tool_call>',
        '{"action": {"name": "create_item", "args": {"title": "Tea", "amount": 3}}, "reply": "ok"}',
        '{"function": "create_item", "arguments": {"title": "Tea", "amount": 3}}',
    ],
    ids=["name-arguments", "name-parameters", "chat-shape", "tool_call-tags", "plan", "function-string"],
)
def test_find_text_tool_calls_recognises_each_form(text: str) -> None:
    [(name, arguments)] = find_text_tool_calls(text, NAMES)
    assert name == "create_item"
    assert json.loads(arguments) == {"title": "Tea", "amount": 3}


def test_find_text_tool_calls_finds_several_and_ignores_unregistered_names() -> None:
    text = (
        '[{"name": "get_summary", "arguments": {"month": "2024-01"}}, '
        '{"name": "drop_database", "arguments": {}}, {"name": "create_item"}]'
    )
    assert find_text_tool_calls(text, NAMES) == [
        ("get_summary", '{"month": "2024-01"}'),
        ("create_item", "{}"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "The total is 12.",
        '{"name": "Alice", "age": 3}',
        '{"action": {"name": "none", "args": {}}, "reply": "Hi"}',
        '{"action": {"name": "rm_rf", "args": {}}}',
    ],
)
def test_find_text_tool_calls_leaves_ordinary_text_alone(text: str) -> None:
    assert find_text_tool_calls(text, NAMES) == []


# --- prompt and schema -----------------------------------------------------------------------


def test_plan_prompt_lists_every_tool_with_description_and_schema() -> None:
    prompt = plan_prompt([CREATE, SUMMARY])
    assert '{"action": {"name": "<a tool name or none>"' in prompt
    assert "- create_item: Creates a bookkeeping entry." in prompt
    assert json.dumps(CREATE.parameters) in prompt
    assert "- get_summary: Totals for a month." in prompt


def test_plan_schema_accepts_real_plans_and_rejects_others() -> None:
    validator = jsonschema.Draft202012Validator(plan_schema([CREATE, SUMMARY]))
    jsonschema.Draft202012Validator.check_schema(validator.schema)

    good = [
        {"action": {"name": "create_item", "args": {"title": "Tea", "amount": 3}}, "reply": ""},
        {"action": {"name": "get_summary", "args": {}}, "reply": "Here you go"},
        {"action": {"name": "none", "args": {}}, "reply": "Hello"},
    ]
    bad = [
        {"action": {"name": "drop_database", "args": {}}, "reply": ""},
        {"action": {"name": "create_item", "args": {"title": "Tea"}}, "reply": ""},
        {"action": {"name": "none", "args": {"x": 1}}, "reply": ""},
        {"action": {"name": "none", "args": {}}},
        {"action": {"name": "none", "args": {}}, "reply": "", "extra": 1},
    ]
    assert [validator.is_valid(p) for p in good] == [True, True, True]
    assert [validator.is_valid(p) for p in bad] == [False] * len(bad)


# --- render_transcript -----------------------------------------------------------------------


CALL = ToolCall(id="call_1", name="create_item", arguments='{"title": "Tea", "amount": 3}')
SECOND = ToolCall(id="call_2", name="get_summary", arguments="{broken")
HISTORY: list[Message] = [
    SystemMessage(content="You keep the books."),
    UserMessage(content="Book tea for 3 and show the total."),
    AssistantMessage(text="Booking.", tool_calls=(CALL, SECOND)),
    ToolResult(call_id="call_1", name="create_item", content='{"id": 7}'),
    ToolResult(call_id="call_2", name="get_summary", content="invalid_json: not JSON", code="invalid_json"),
]


def test_render_transcript_turns_calls_into_plans_and_results_into_one_user_message() -> None:
    rendered = render_transcript(HISTORY)

    assert rendered[:2] == HISTORY[:2]
    assistant = rendered[2]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls == ()
    first, second = (json.loads(line) for line in (assistant.text or "").splitlines())
    assert first == {
        "action": {"name": "create_item", "args": {"title": "Tea", "amount": 3}},
        "reply": "Booking.",
    }
    assert second == {"action": {"name": "get_summary", "args": "{broken"}, "reply": ""}
    assert rendered[3] == UserMessage(
        content='Result of create_item: {"id": 7}\n\nResult of get_summary: invalid_json: not JSON'
    )
    assert len(rendered) == 4


def test_render_transcript_with_specs_adds_the_prompt_to_the_system_message() -> None:
    rendered = render_transcript([*HISTORY, AssistantMessage(text="Done: 3 total.")], [CREATE])
    system = rendered[0]
    assert isinstance(system, SystemMessage)
    assert system.content.startswith("You keep the books.\n\n") and "- create_item:" in system.content
    last = rendered[-1]
    assert isinstance(last, AssistantMessage)
    assert json.loads(last.text or "") == {"action": {"name": "none", "args": {}}, "reply": "Done: 3 total."}

    bare = render_transcript([UserMessage(content="hi")], [CREATE])
    assert isinstance(bare[0], SystemMessage) and bare[1] == UserMessage(content="hi")
