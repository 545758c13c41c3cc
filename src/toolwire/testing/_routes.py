"""The scripted server's two wire routes: rendering a step's turn, misbehaving, checking transcripts.

`toolwire.testing.server` owns the script and the HTTP plumbing; this module knows the wire
formats, through the adapters' server-side renderers, so the bytes are the ones a real endpoint
sends. Each route has a chunk/event list builder that applies a step's misbehaviours, an SSE
framer, and OpenAI's transcript check with OpenAI's exact 400 messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from toolwire.messages import AssistantMessage, ToolCall, Turn, Usage
from toolwire.wire import chat, responses
from toolwire.wire.sse import encode_event

if TYPE_CHECKING:
    from toolwire.testing.server import Step

__all__ = [
    "chat_chunks",
    "chat_sse",
    "chat_transcript_problem",
    "error_body",
    "responses_events",
    "responses_sse",
    "responses_transcript_problem",
    "step_turn",
    "unserved",
]

_MISSING_RESULTS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: "
)
_ORPHAN_RESULT = (  # "preceeding" is OpenAI's spelling
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
_MISSING_OUTPUT = "No tool output found for function call {}."
_ORPHAN_OUTPUT = "No tool call found for function call output with call_id {}."

_NOVEL_EVENT = "response.novel_feature.delta"
"""An event type no client knows; Responses clients must ignore types they do not know."""


def error_body(
    message: str, kind: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error in OpenAI's shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def unserved(status: int, label: str) -> tuple[int, dict[str, Any]]:
    """How a server that lacks a route answers it: FastAPI's 404/405 bodies, or a 400 saying so."""
    if status == 405:
        return 405, {"detail": "Method Not Allowed"}
    if status == 400:
        message = f"The {label} API is not supported by this server."
        return 400, error_body(message, "invalid_request_error", code="unsupported_endpoint")
    return 404, {"detail": "Not Found"}


def step_turn(step: Step, number: int) -> Turn:
    """The turn a step answers with; its calls get the ids `call_<request>_<position>` unless scripted."""
    calls = []
    for k, scripted in enumerate(step.tool_calls):
        name, arguments = scripted[0], scripted[1]
        call_id = scripted[2] if len(scripted) > 2 else f"call_{number}_{k}"
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ToolCall(id=call_id, name=name, arguments=raw))
    text = step.text
    if step.tool_call_as_text and calls:
        written = [json.dumps({"name": c.name, "arguments": _loads_or_raw(c.arguments)}) for c in calls]
        text = "\n".join(([text] if text else []) + written)
        calls = []
    return Turn(message=AssistantMessage(text=text, tool_calls=tuple(calls)), usage=step.usage or Usage())


def _loads_or_raw(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


# --- Chat Completions ----------------------------------------------------------------------------


def chat_chunks(
    step: Step, turn: Turn, model: str, completion_id: str, *, include_usage: bool, split: int
) -> list[dict[str, Any]]:
    """The chunks of a streamed completion, with the step's misbehaviours applied."""
    chunks = list(chat.render_stream(turn, model, completion_id, split=split, include_usage=include_usage))
    calls = turn.message.tool_calls
    first_argument_piece = None
    for position, chunk in enumerate(chunks):
        for fragment in (chunk["choices"][0]["delta"].get("tool_calls") or ()) if chunk["choices"] else ():
            if "id" in fragment:
                continue  # the first fragment of a call
            first_argument_piece = position if first_argument_piece is None else first_argument_piece
            call = calls[fragment["index"]]
            if not step.ids_only_first_fragment:
                fragment.update(id=call.id, type="function")
                fragment["function"]["name"] = call.name
            if step.empty_string_id:
                fragment["id"] = ""
    finish = next((i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"]), 1)
    if step.arguments_only_in_done and calls:
        # No argument pieces while the calls stream: each call's whole arguments come last.
        head = [c for c in chunks[:finish] if not _argument_piece(c)]
        whole = [
            {**chunks[0], "choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]}
            for piece in ({"index": i, "function": {"arguments": c.arguments}} for i, c in enumerate(calls))
        ]
        chunks = [*head, *whole, *chunks[finish:]]
        first_argument_piece = len(head)
    if step.cut_stream or step.stream_error:
        # Stop after the first argument piece of the first call, or halfway through the text.
        cut = first_argument_piece + 1 if first_argument_piece is not None else max(1, finish // 2)
        chunks = chunks[:cut]
    if step.novel_events:
        extra = {**chunks[0], "choices": [], "obfuscation": "x9", "moderation": {"flagged": False}}
        chunks = [chunks[0], extra, *chunks[1:]]
    return chunks


def _argument_piece(chunk: dict[str, Any]) -> bool:
    fragments = (chunk["choices"][0]["delta"].get("tool_calls") or ()) if chunk["choices"] else ()
    return any("id" not in fragment for fragment in fragments)


async def chat_sse(chunks: list[dict[str, Any]], step: Step) -> AsyncIterator[str]:
    """The SSE body of a streamed completion: chunks, then `[DONE]` unless the step breaks off."""
    if step.malformed:
        yield encode_event('{"id": "chatcmpl-broken", "choices": [')
        return
    for chunk in chunks:
        if step.novel_events:
            yield ": keep-alive\n\n"
        yield encode_event(json.dumps(chunk))
    if step.stream_error:
        yield encode_event(json.dumps(error_body(step.stream_error, "server_error")))
    elif not step.cut_stream:
        yield encode_event("[DONE]")


def chat_transcript_problem(messages: list[dict[str, Any]], *, strict_order: bool) -> tuple[str, str] | None:
    """OpenAI's 400 (message, param) for a transcript whose results do not answer their calls."""
    pending: list[str] = []  # ids of the assistant message right before, not yet answered
    in_block = False
    assistant_at = 0
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not in_block or call_id not in pending:
                return _ORPHAN_RESULT, f"messages.[{i}].role"
            if strict_order and call_id != pending[0]:
                text = f"Tool messages must answer the calls in order: expected {pending[0]}, got {call_id}."
                return text, f"messages.[{i}].tool_call_id"
            pending.remove(call_id)
            continue
        if pending:
            return _MISSING_RESULTS + ", ".join(pending), f"messages.[{i}].role"
        in_block = role == "assistant" and bool(message.get("tool_calls"))
        if in_block:
            pending = [str(c.get("id")) for c in message["tool_calls"]]
            assistant_at = i
    if pending:
        return _MISSING_RESULTS + ", ".join(pending), f"messages.[{assistant_at}].role"
    return None


# --- Responses -----------------------------------------------------------------------------------


def responses_events(
    step: Step, turn: Turn, model: str, response_id: str, *, split: int
) -> list[dict[str, Any]]:
    """The events of a streamed response, with the step's misbehaviours applied."""
    events = list(responses.render_stream(turn, model, response_id, split=split))
    if step.arguments_only_in_done:
        events = [e for e in events if e["type"] != "response.function_call_arguments.delta"]
    if step.empty_string_id:
        for event in events:
            for item in _items_of(event):
                if item.get("type") == "function_call":
                    item["call_id"] = ""
    if step.cut_stream or step.stream_error:
        kinds = [e["type"] for e in events]
        if "response.function_call_arguments.delta" in kinds:
            cut = kinds.index("response.function_call_arguments.delta") + 1
        elif "response.function_call_arguments.done" in kinds:
            cut = kinds.index("response.function_call_arguments.done")
        else:
            texts = [i for i, kind in enumerate(kinds) if kind == "response.output_text.delta"]
            cut = texts[len(texts) // 2] if texts else 2
        events = events[:cut]
    if step.stream_error:
        error = {"code": "server_error", "message": step.stream_error}
        failed = responses.response_object(response_id, model, status="failed", output=[], error=error)
        events += [
            {"type": "error", **error, "param": None},
            {"type": "response.failed", "response": failed},
        ]
    if step.novel_events:
        novel = {"type": _NOVEL_EVENT, "item_id": "nf_1", "output_index": 99, "delta": "?"}
        events = [novel, *(x for event in events for x in (event, {**novel}))]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def _items_of(event: dict[str, Any]) -> list[dict[str, Any]]:
    items = [event["item"]] if isinstance(event.get("item"), dict) else []
    response = event.get("response")
    return items + (list(response.get("output") or ()) if isinstance(response, dict) else [])


async def responses_sse(events: list[dict[str, Any]], step: Step) -> AsyncIterator[str]:
    """The SSE body of a streamed response: `event:` and `data:` lines per event, no `[DONE]`."""
    if step.malformed:
        yield encode_event('{"type": "response.created", "response": {', event="response.created")
        return
    for event in events:
        yield encode_event(json.dumps(event), event=event["type"])


def responses_transcript_problem(items: list[Any]) -> tuple[str, str | None] | None:
    """OpenAI's 400 (message, param) for input whose calls and outputs do not pair up by `call_id`."""
    calls: list[str] = []
    answered: set[str] = set()
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            calls.append(str(item.get("call_id")))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                return _ORPHAN_OUTPUT.format(call_id), "input"
            answered.add(call_id)
    missing = [call_id for call_id in calls if call_id not in answered]
    return (_MISSING_OUTPUT.format(missing[0]), None) if missing else None
