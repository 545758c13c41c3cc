"""The JSON plan: tool use for models and gateways that have no tool calls.

The model is asked to answer with one JSON object,
`{"action": {"name": <tool or "none">, "args": {...}}, "reply": "..."}`, which toolwire reads and
sends through the same Gate as a native call. This module builds the prompt and the plan's JSON
Schema (for constrained decoding), reads a plan out of raw text, recognises tool calls a model
wrote as text instead of `tool_calls`, and renders a transcript for a model without tool support.

Everything read here came from a model: nothing raises, a text without a plan gives `None`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from toolwire.messages import AssistantMessage, Message, SystemMessage, ToolResult, ToolSpec, UserMessage

__all__ = ["Plan", "extract_plan", "find_text_tool_calls", "plan_prompt", "plan_schema", "render_transcript"]

_MAX_ATTEMPTS = 256
"""Decode attempts per text; bounds the work on long garbage full of braces."""
_decoder = json.JSONDecoder()

_PROMPT_HEAD = """\
You choose the next step for the user's request. You cannot call tools directly: answer with ONLY \
one JSON object, without markdown and without any other text, in exactly this format:
{"action": {"name": "<a tool name or none>", "args": {<the tool's arguments>}}, "reply": "<a short message \
for the user>"}
Use a tool whenever one fits the request, with "args" matching that tool's parameters. Use "none" only \
when no tool fits, and then put your whole answer in "reply". After a tool runs you receive its result \
in a message starting with "Result of <tool>:"; then choose again: another tool, or "none" with your \
answer in "reply".

Tools:"""


@dataclass(kw_only=True, frozen=True)
class Plan:
    """A plan read from a model's text."""

    name: str
    """The tool to call, or `"none"` for a plain answer."""
    arguments: str
    """The tool's arguments as a JSON string (untrusted, like a native call's)."""
    reply: str | None = None
    """The message for the user, if the model wrote one."""

    @property
    def is_call(self) -> bool:
        """Whether the plan asks for a tool."""
        return self.name != "none"


def plan_prompt(specs: Sequence[ToolSpec]) -> str:
    """The system prompt that asks for a plan, listing each tool's name, description and schema."""
    lines = [_PROMPT_HEAD]
    for spec in specs:
        lines.append(f"- {spec.name}: {spec.description or '(no description)'}")
        lines.append(f"  parameters: {json.dumps(spec.parameters, ensure_ascii=False)}")
    return "\n".join(lines)


def plan_schema(specs: Sequence[ToolSpec]) -> dict[str, Any]:
    """The JSON Schema of a plan, one `anyOf` branch per tool plus the `none` branch.

    Enforced during decoding where the model supports constrained output, it makes every plan
    name a real tool with arguments of that tool's shape.
    """
    branches: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"name": {"const": spec.name}, "args": spec.parameters},
            "required": ["name", "args"],
            "additionalProperties": False,
        }
        for spec in specs
    ]
    branches.append(
        {
            "type": "object",
            "properties": {
                "name": {"const": "none"},
                "args": {"type": "object", "properties": {}, "additionalProperties": False},
            },
            "required": ["name", "args"],
            "additionalProperties": False,
        }
    )
    return {
        "type": "object",
        "properties": {"action": {"anyOf": branches}, "reply": {"type": "string"}},
        "required": ["action", "reply"],
        "additionalProperties": False,
    }


def _objects(text: str) -> Iterator[dict[str, Any]]:
    """Every top-level JSON object in `text`, in order, whatever prose or fences surround it."""
    start = text.find("{")
    attempts = 0
    while start != -1 and attempts < _MAX_ATTEMPTS:
        attempts += 1
        try:
            value, end = _decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            yield value
        start = text.find("{", end)


def _as_arguments(args: Any) -> str:
    # A string is kept as written: it may be the arguments' JSON text, and the Gate judges it.
    if args is None:
        return "{}"
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _plan_from(obj: dict[str, Any]) -> Plan | None:
    action = obj["action"]
    if isinstance(action, dict):
        name = action.get("name")
        args = action.get("args", action.get("arguments", action.get("parameters")))
    elif isinstance(action, str):  # {"action": "create_item", "args": {...}}: a common slip
        name, args = action, obj.get("args", obj.get("arguments"))
    elif action is None:
        name, args = "none", None
    else:
        return None
    if name is None:
        name = "none"
    if not isinstance(name, str):
        return None
    name = name.strip()
    if name.lower() in ("", "none", "null"):
        name = "none"
    reply = obj.get("reply")
    return Plan(name=name, arguments=_as_arguments(args), reply=None if reply is None else str(reply))


def extract_plan(text: str) -> Plan | None:
    """Read the first plan in a model's text: code fences, prose before and after are tolerated.

    Returns:
        The first JSON object with an `action` key read as a plan, or `None` when there is none.
    """
    for obj in _objects(text):
        if "action" in obj:
            plan = _plan_from(obj)
            if plan is not None:
                return plan
    return None


def _call_from(obj: dict[str, Any], names: Collection[str]) -> tuple[str, str] | None:
    if "action" in obj:
        plan = _plan_from(obj)
        return (plan.name, plan.arguments) if plan is not None and plan.name in names else None
    function = obj.get("function")
    if isinstance(function, dict):  # the Chat tool-call shape, written out
        obj = function
    elif isinstance(function, str):
        obj = {**obj, "name": function}
    name = obj.get("name")
    if not isinstance(name, str) or name not in names:
        return None
    for key in ("arguments", "parameters", "args"):
        if key in obj:
            return name, _as_arguments(obj[key])
    return name, "{}"


def find_text_tool_calls(text: str, names: Collection[str]) -> list[tuple[str, str]]:
    """Find tool calls a model wrote as text instead of sending `tool_calls`.

    Recognised: `{"name": ..., "arguments": {...}}`, the same with `parameters`, the Chat shape
    `{"type": "function", "function": {...}}`, any of these inside `<tool_call>` tags, and a plan.
    Only objects naming one of `names` count, so prose that merely contains JSON is left alone.

    Returns:
        (name, arguments JSON) for each call found, in the order written.
    """
    calls = []
    for obj in _objects(text):
        call = _call_from(obj, names)
        if call is not None:
            calls.append(call)
    return calls


def _plan_text(name: str, arguments: str, reply: str | None) -> str:
    try:
        args: Any = json.loads(arguments) if arguments else {}
    except ValueError:
        args = arguments  # shown as the model sent it, so it can see its own mistake
    return json.dumps({"action": {"name": name, "args": args}, "reply": reply or ""}, ensure_ascii=False)


def render_transcript(transcript: Sequence[Message], specs: Sequence[ToolSpec] = ()) -> list[Message]:
    """Render a transcript for a model without tool support.

    Assistant calls become assistant text holding the plan JSON; tool results become a user message
    `Result of <tool>: <content>` (consecutive ones merged, for chat templates that need roles to
    alternate). With `specs`, the plan prompt joins the leading system message (or becomes one) and
    earlier plain answers are shown as `none` plans, so the history models the expected format.
    """
    out: list[Message] = []
    for message in transcript:
        if isinstance(message, AssistantMessage):
            if message.tool_calls:
                replies = [message.text] + [None] * (len(message.tool_calls) - 1)
                text = "\n".join(
                    _plan_text(c.name, c.arguments, r)
                    for c, r in zip(message.tool_calls, replies, strict=True)
                )
                out.append(AssistantMessage(text=text))
            elif specs:
                out.append(AssistantMessage(text=_plan_text("none", "{}", message.text)))
            else:
                out.append(message)
            continue
        if isinstance(message, ToolResult):
            message = UserMessage(content=f"Result of {message.name}: {message.content}")
        if isinstance(message, UserMessage) and out and isinstance(out[-1], UserMessage):
            out[-1] = UserMessage(content=f"{out[-1].content}\n\n{message.content}")
        else:
            out.append(message)
    if specs:
        prompt = plan_prompt(specs)
        if out and isinstance(out[0], SystemMessage):
            out[0] = SystemMessage(content=f"{out[0].content}\n\n{prompt}")
        else:
            out.insert(0, SystemMessage(content=prompt))
    return out
