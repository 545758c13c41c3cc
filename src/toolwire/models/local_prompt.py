"""Prompts and grammars for the embedded model: template rendering, trimming, call grammar, parsing.

The transcript is rendered with the model's own chat template (tools section included), trimmed
from the oldest turns when it does not fit the context window, and a tool call's body is decoded
under a GBNF grammar with one branch per tool, built from the tools' JSON Schemas.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from toolwire.exceptions import ConfigError
from toolwire.messages import AssistantMessage, Message, SystemMessage, ToolResult, ToolSpec, UserMessage
from toolwire.models.local_model_files import LocalModelError

if TYPE_CHECKING:
    from toolwire.models.local_engine import Engine

__all__ = [
    "ContextWindowError",
    "call_grammar",
    "chat_messages",
    "confirm_questions",
    "named_tools",
    "offered_tools",
    "fit_prompt",
    "guidance",
    "parse_text_calls",
]

_GUIDANCE = (
    "Call a function only when the user's request needs one of them; otherwise answer directly in "
    "plain text. If the user asks for something that none of the functions does, do not call a "
    "function: say that you cannot do it, or answer from your own knowledge. Leave out optional "
    "arguments the user did not mention."
)
CALL_MAX_TOKENS = 256
"""The most tokens one call's body may take."""
# JSON strings may not hold raw control characters; the stock rule allows them.
_CHAR_RULE = r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ' + " ".join(["[0-9a-fA-F]"] * 4) + ")"
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


class ContextWindowError(LocalModelError):
    """The transcript does not fit the context window even after its oldest turns were dropped."""


def guidance(tools: Sequence[ToolSpec]) -> str:
    """The instruction added to the system prompt when tools are offered.

    Small models call a function for almost any message unless told when not to; measured on the
    accuracy set in benchmarks/, this sentence raises correct abstentions without costing calls.
    """
    return _GUIDANCE if tools else ""


def confirm_questions(asked: str, tool: ToolSpec) -> list[list[dict[str, Any]]]:
    """Two phrasings of one question apart from the conversation: does `asked` need `tool`?

    Asked without the other tools and without the assistant's instructions, the model judges one
    function against one message. Measured on the tuning set in benchmarks/, the mean yes-share of
    the two tells a needed call from an unneeded one where the urge to open a call does not; each
    phrasing alone errs on cases the other gets right.
    """
    about = f"`{tool.name}`"
    return [
        [
            {
                "role": "user",
                "content": f'A user wrote: "{asked}"\n\nThe function {about} is described as: '
                f"{tool.description}\n\nShould the assistant call {about} now to fulfil the user's "
                "message? Answer with yes or no.",
            }
        ],
        [
            {
                "role": "system",
                "content": "You judge whether a function call is needed. Answer only yes or no.",
            },
            {
                "role": "user",
                "content": f'Function {about}: {tool.description}\n\nUser message: "{asked}"\n\n'
                f"Does answering this message require calling {about}?",
            },
        ],
    ]


def named_tools(text: str, tools: Sequence[ToolSpec]) -> list[ToolSpec]:
    """The tools that `text` names as a word (a described call: "you can use the `get_summary` function")."""
    return [t for t in tools if re.search(rf"(?<![\w-]){re.escape(t.name)}(?![\w-])", text)]


def chat_messages(transcript: Sequence[Message], system_extra: str = "") -> list[dict[str, Any]]:
    """The transcript as chat-template messages (`role`, `content`, `tool_calls`)."""
    out: list[dict[str, Any]] = []
    for message in transcript:
        if isinstance(message, SystemMessage | UserMessage):
            out.append({"role": message.role, "content": message.content})
        elif isinstance(message, AssistantMessage):
            calls = [
                {"type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                for c in message.tool_calls
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or ""}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif isinstance(message, ToolResult):
            out.append({"role": "tool", "content": message.content, "tool_call_id": message.call_id})
    if system_extra:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{system_extra}"}
        else:
            out.insert(0, {"role": "system", "content": system_extra})
    return out


def _arguments(raw: str) -> Any:
    """Arguments as an object, as templates expect; a string the model sent that is not JSON stays one."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _groups(transcript: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """The leading system messages, and the rest cut into turns.

    A turn is a user message, or an assistant message with the tool results that answer it
    (never separated).
    """
    head: list[Message] = []
    groups: list[list[Message]] = []
    for message in transcript:
        if isinstance(message, SystemMessage) and not groups:
            head.append(message)
        elif isinstance(message, ToolResult) and groups:
            groups[-1].append(message)
        else:
            groups.append([message])
    return head, groups


def fit_prompt(
    engine: Engine,
    transcript: Sequence[Message],
    tools: Sequence[ToolSpec],
    *,
    reserve: int,
    system_extra: str = "",
) -> list[int]:
    """Render and tokenize the transcript, dropping its oldest turns until `reserve` tokens fit.

    Never dropped: the system prompt, the latest user message, and the last turn (so pending
    tool results stay with the call that asked for them).

    Raises:
        ContextWindowError: Even the protected part does not fit.
    """
    head, groups = _groups(transcript)
    last_user = max((i for i, g in enumerate(groups) if isinstance(g[0], UserMessage)), default=-1)
    protected = {last_user, len(groups) - 1}
    budget = engine.n_ctx - reserve
    kept = list(range(len(groups)))
    while True:
        messages = head + [m for i in kept for m in groups[i]]
        tokens = engine.tokenize(engine.render(chat_messages(messages, system_extra), tools))
        if len(tokens) <= budget:
            return tokens
        droppable = [i for i in kept if i not in protected]
        if not droppable:
            raise ContextWindowError(
                f"The conversation needs {len(tokens)} tokens but the local model's context window "
                f"leaves {budget} after reserving {reserve} for the answer, even without older turns; "
                "shorten the system prompt or the tool results, or raise n_ctx."
            )
        kept.remove(droppable[0])


@lru_cache(maxsize=64)
def _grammar_for(tools_key: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    tools = json.loads(tools_key)
    branches: list[dict[str, Any]] = []
    for tool in tools:
        arguments = dict(tool["parameters"] or {"type": "object"})
        arguments.setdefault("additionalProperties", False)
        branches.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool["name"]}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema = {"anyOf": branches} if len(branches) > 1 else branches[0]
    try:
        grammar = json_schema_to_gbnf(json.dumps(schema))
    except Exception:
        # A schema feature the converter lacks: constrain the name, leave the arguments any object.
        # The Gate still validates them before anything runs.
        loose = [dict(b, properties={**b["properties"], "arguments": {"type": "object"}}) for b in branches]
        grammar = json_schema_to_gbnf(json.dumps({"anyOf": loose} if len(loose) > 1 else loose[0]))
    return "\n".join(_CHAR_RULE if line.startswith("char ::=") else line for line in grammar.splitlines())


def call_grammar(tools: Sequence[ToolSpec]) -> str:
    """A GBNF grammar of one call `{"name": ..., "arguments": {...}}` to any of `tools`."""
    # Not sort_keys: the grammar keeps the schema's property order, the order the model reads.
    key = json.dumps([{"name": t.name, "parameters": t.parameters} for t in tools])
    return _grammar_for(key)


def parse_text_calls(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Calls written as text: `<tool_call>` blocks, fenced JSON, or a bare JSON object.

    Returns the text that is left and `(name, arguments JSON)` pairs; used only when decoding is
    not constrained, to measure what constraining buys.
    """
    bodies = _TAGGED.findall(text) or _FENCED.findall(text)
    rest = _FENCED.sub("", _TAGGED.sub("", text)) if bodies else text
    if not bodies and text.strip().startswith("{"):
        bodies, rest = [text.strip()], ""
    calls = []
    for body in bodies:
        try:
            obj = json.loads(body)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            calls.append(
                (obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
            )
    return (rest.strip() if calls else text), calls


def offered_tools(tools: Sequence[ToolSpec], tool_choice: str | dict[str, Any] | None) -> list[ToolSpec]:
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
