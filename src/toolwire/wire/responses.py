"""The Responses API on the wire, both sides, as plain dicts.

Client side (here): `build_request`, `parse_response` and `ResponsesStreamAssembler` turn the
canonical transcript into a `/responses` request body, and a response (or its event stream) back
into a `Turn`. Server side (in `_responses_server`, re-exported here): `parse_request`,
`render_response` and `render_stream` do the reverse for the gateway and the scripted test server;
`ResponsesEventWriter` keeps the event bookkeeping (`sequence_number`, `output_index`, closing
order) for them and for the Chat stream bridge. Shared item shapes live in `_responses_shapes`.

Three rules hold everywhere. Calls are joined by `call_id`, never by the item `id` (`fc_...`).
`strict` is always sent explicitly, because an omitted `strict` makes Responses normalize the schema
to strict mode. A turn's `finish_reason` uses Chat's words (`stop`, `tool_calls`, `length`,
`content_filter`) whatever the route, so a turn renders on either wire. The module is a little over
400 lines because the stream assembler's rules (which event is authoritative) stay next to the
parser whose results they must reproduce.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolwire.exceptions import ModelError, ModelHTTPError, ModelResponseError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
)
from toolwire.wire._common import usage_from
from toolwire.wire._responses_server import (
    ResponsesEventWriter,
    parse_request,
    render_response,
    render_stream,
)
from toolwire.wire._responses_shapes import (
    JSON,
    arguments_text,
    call_item_id,
    function_call_item,
    function_tool,
    part_text,
    response_object,
    tool_choice_to_chat,
    tool_choice_to_responses,
    usage_json,
)

__all__ = [
    "ResponsesEventWriter",
    "ResponsesStreamAssembler",
    "build_request",
    "call_item_id",
    "function_call_item",
    "function_tool",
    "parse_request",
    "parse_response",
    "render_response",
    "render_stream",
    "response_id",
    "response_object",
    "tool_choice_to_chat",
    "tool_choice_to_responses",
    "usage_json",
]

_INCOMPLETE_TO_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}
# Error codes of failed responses and `error` events, as the HTTP status a client would retry on.
_STATUS_OF_CODE = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "invalid_prompt": 400,
    "invalid_request_error": 400,
}
# The `.done` events that restate a part's whole text, and the field that holds it.
_DONE_TEXT = {
    "response.output_text.done": "text",
    "response.refusal.done": "refusal",
    "response.content_part.done": "",
}


def _input_items(transcript: Sequence[Message]) -> list[JSON]:
    items: list[JSON] = []
    for message in transcript:
        if isinstance(message, AssistantMessage):
            if message.text:
                part = {"type": "output_text", "text": message.text, "annotations": []}
                items.append({"type": "message", "role": "assistant", "content": [part]})
            items.extend(function_call_item(call) for call in message.tool_calls)
        elif isinstance(message, ToolResult):
            items.append(
                {"type": "function_call_output", "call_id": message.call_id, "output": message.content}
            )
        else:
            items.append({"type": "message", "role": message.role, "content": message.content})
    return items


def build_request(
    model: str,
    transcript: Sequence[Message],
    tools: Sequence[ToolSpec],
    options: RequestOptions,
    stream: bool,
    *,
    previous_response_id: str | None = None,
) -> JSON:
    """Build a `/responses` request body.

    Leading system messages become `instructions`, sent on every request because Responses does
    not carry them over. The exchange is stateless: earlier assistant turns are resent as `message`
    and `function_call` items, each result as a `function_call_output` with the same `call_id`.

    Args:
        model: The model name sent upstream.
        transcript: The canonical transcript; tool results must already follow their assistant turn.
        tools: The tools offered, with `strict` always explicit; none means the model must answer in text.
        options: `tool_choice` (Chat's shape, translated) and `parallel_tool_calls` are sent only with
            tools; `max_tokens` becomes `max_output_tokens`.
        stream: Ask for an event stream.
        previous_response_id: Continue a stored response chain: only the items after the last
            assistant turn are sent. Use it only where the route is known to store responses.
    """
    lead = 0
    while lead < len(transcript) and isinstance(transcript[lead], SystemMessage):
        lead += 1
    history = list(transcript[lead:])
    if previous_response_id is not None:
        last = max((i for i, m in enumerate(history) if isinstance(m, AssistantMessage)), default=-1)
        history = history[last + 1 :]
    body: JSON = {"model": model}
    if lead:
        body["instructions"] = "\n\n".join(
            m.content for m in transcript[:lead] if isinstance(m, SystemMessage)
        )
    body["input"] = _input_items(history)
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    if tools:
        body["tools"] = [function_tool(spec) for spec in tools]
        if options.tool_choice is not None:
            body["tool_choice"] = tool_choice_to_responses(options.tool_choice)
        if options.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = options.parallel_tool_calls
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body["max_output_tokens"] = options.max_tokens
    if stream:
        body["stream"] = True
    return body


def response_id(body: Mapping[str, Any]) -> str | None:
    """The `resp_...` id of a response body, for `previous_response_id` on the next request."""
    value = body.get("id")
    return value if isinstance(value, str) else None


def _failure(error: Any, where: str) -> ModelError:
    """The exception for a failed response or an `error` event: an HTTP error when the code says which."""
    error = error if isinstance(error, dict) else {"message": error}
    code, message = error.get("code"), str(error.get("message") or "no message").rstrip(". ")
    status = code if isinstance(code, int) else _STATUS_OF_CODE.get(str(code))
    text = (
        f"The model endpoint reported {where} ({code}: {message}); retry the request or check the endpoint."
    )
    if status is not None and 400 <= status < 600:
        return ModelHTTPError(text, status_code=status, body=json.dumps(error))
    return ModelResponseError(text)


def _call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    if not isinstance(call_id, str) or not call_id:
        raise ModelResponseError(
            "The model endpoint sent a function_call without a call_id, so its result could not be "
            "joined to it; use the Chat route for this endpoint."
        )
    return ToolCall(id=call_id, name=str(name or ""), arguments=arguments_text(arguments))


def _finish_reason(status: Any, incomplete: Any, has_calls: bool) -> str:
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
        return _INCOMPLETE_TO_FINISH.get(str(reason), "length")
    return "tool_calls" if has_calls else "stop"


def _check_status(body: Mapping[str, Any]) -> None:
    status = body.get("status")
    if status == "failed":
        raise _failure(body.get("error"), "a failed response")
    if status not in (None, "completed", "incomplete"):
        raise ModelResponseError(
            f"The model endpoint answered a response with status {status!r}, which holds no finished "
            "turn; do not request background mode on this route."
        )


def parse_response(body: Mapping[str, Any]) -> Turn:
    """Read a non-streaming `response` body as a `Turn`.

    Text is every `output_text` (or `refusal`) part of every `message` item; calls are the
    `function_call` items, identified by `call_id`. Reasoning and unknown items are skipped.

    Raises:
        ModelHTTPError: the response failed with an error code that maps to an HTTP status.
        ModelResponseError: the response failed otherwise, is unfinished, or is not a response.
    """
    output = body.get("output") if isinstance(body, Mapping) else None
    if not isinstance(output, list):
        raise ModelResponseError(
            "The model endpoint answered something that is not a Responses object; "
            "check that the base URL serves /v1/responses."
        )
    _check_status(body)
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            content = item.get("content")
            if isinstance(content, str):
                texts.append(content)
            else:
                texts.extend(part_text(part) for part in content or ())
        elif kind == "function_call":
            calls.append(_call(item.get("call_id"), item.get("name"), item.get("arguments")))
    return Turn(
        message=AssistantMessage(text="".join(texts) or None, tool_calls=tuple(calls)),
        usage=usage_from(body.get("usage"), "input_tokens", "output_tokens"),
        route="responses",
        finish_reason=_finish_reason(body.get("status"), body.get("incomplete_details"), bool(calls)),
    )


@dataclass
class _Slot:
    """What has arrived so far of one output item."""

    kind: str
    call_id: str | None = None
    name: str = ""
    arguments: str = ""
    parts: dict[int, str] = field(default_factory=dict)
    closed: bool = False
    """Whether `output_item.done` (or the final response) delivered the finished item."""


class ResponsesStreamAssembler:
    """Reassemble Responses stream events into text deltas and one complete `Turn`.

    Items are keyed by `output_index` (by `item_id` when a server leaves the index out). Argument
    deltas are appended to a per-call buffer; `function_call_arguments.done`, `output_item.done` and
    the final response are authoritative and replace it, so a stream that sends arguments only at
    the end still yields the whole call. Text that arrives only in a `.done` event is returned as
    a delta too. Unknown event types are ignored.
    """

    def __init__(self) -> None:
        self._slots: dict[int, _Slot] = {}
        self._index_of: dict[str, int] = {}
        self._final: JSON | None = None
        self._done_marker = False
        self.response_id: str | None = None
        """The response's id, once `response.created` (or the final event) carried it."""

    def done(self) -> None:
        """Record a `data: [DONE]` line, which some servers send although Responses has none.

        It ends the stream only when every item that started has also finished.
        """
        self._done_marker = True

    def feed(self, event: Mapping[str, Any]) -> list[TextDelta]:
        """Take one decoded event; return the text it adds.

        Raises:
            ModelHTTPError: an `error` event or `response.failed` whose code maps to an HTTP status.
            ModelResponseError: any other `error` event or `response.failed`.
        """
        if self._final is not None:
            return []
        kind = event.get("type")
        if kind == "error" or (kind is None and isinstance(event.get("error"), dict)):
            raise _failure(event.get("error") or event, "an error in the stream")
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if kind == "response.failed":
            raise _failure((response or {}).get("error"), "a failed response")
        if kind in ("response.completed", "response.incomplete"):
            return self._complete(response if isinstance(response, dict) else {"status": kind[9:]})
        return self._item_event(str(kind), event)

    def _item_event(self, kind: str, event: Mapping[str, Any]) -> list[TextDelta]:
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, dict):
                slot = self._slot(event, str(item.get("type")))
                slot.closed = slot.closed or kind.endswith("done")
                return self._item(slot, item)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            slot, index = self._slot(event, "message"), int(event.get("content_index") or 0)
            delta = str(event.get("delta") or "")
            slot.parts[index] = slot.parts.get(index, "") + delta
            return [TextDelta(text=delta)] if delta else []
        elif kind in _DONE_TEXT:
            slot, index = self._slot(event, "message"), int(event.get("content_index") or 0)
            key = _DONE_TEXT[kind]
            text = event.get(key) if key else part_text(event.get("part")) or None
            return self._set_text(slot, index, text if isinstance(text, str) else None)
        elif kind == "response.function_call_arguments.delta":
            self._slot(event, "function_call").arguments += str(event.get("delta") or "")
        elif kind == "response.function_call_arguments.done":
            slot = self._slot(event, "function_call")
            slot.arguments = arguments_text(event.get("arguments"))
            slot.name = str(event.get("name") or slot.name)
        return []

    def _slot(self, event: Mapping[str, Any], kind: str) -> _Slot:
        index = event.get("output_index")
        item = event.get("item")
        item_id = event.get("item_id") or (item.get("id") if isinstance(item, dict) else None)
        if not isinstance(index, int):
            found = self._index_of.get(item_id) if isinstance(item_id, str) else None
            index = found if found is not None else max(self._slots, default=-1) + 1
        if isinstance(item_id, str):
            self._index_of[item_id] = index
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _Slot(kind=kind)
        return slot

    def _set_text(self, slot: _Slot, index: int, text: str | None) -> list[TextDelta]:
        """Make `text` the part's whole text; return what the deltas had not delivered yet."""
        if text is None:
            return []
        have = slot.parts.get(index, "")
        slot.parts[index] = text
        if len(text) > len(have) and text.startswith(have):
            return [TextDelta(text=text[len(have) :])]
        return []

    def _item(self, slot: _Slot, item: Mapping[str, Any]) -> list[TextDelta]:
        slot.kind = str(item.get("type") or slot.kind)
        if slot.kind == "function_call":
            slot.call_id = item.get("call_id") or slot.call_id
            slot.name = str(item.get("name") or slot.name)
            if item.get("arguments"):
                slot.arguments = arguments_text(item["arguments"])
            return []
        deltas: list[TextDelta] = []
        if slot.kind == "message" and isinstance(item.get("content"), list):
            for index, part in enumerate(item["content"]):
                deltas += self._set_text(slot, index, part_text(part) or None)
        return deltas

    def _complete(self, response: JSON) -> list[TextDelta]:
        deltas: list[TextDelta] = []
        for index, item in enumerate(response.get("output") or ()):
            if isinstance(item, dict):
                slot = self._slot({"output_index": index}, str(item.get("type")))
                slot.closed = True
                deltas += self._item(slot, item)
        self._final = response
        return deltas

    def finish(self) -> Turn:
        """Return the complete turn once the stream has ended.

        Raises:
            ModelResponseError: the stream ended without `response.completed` or `.incomplete`
                (or a `[DONE]` after every item finished), so a half-received call is never run;
                or a call came without a `call_id`.
        """
        if self._final is None and self._done_marker and all(s.closed for s in self._slots.values()):
            self._final = {"status": "completed"}
        if self._final is None:
            raise ModelResponseError(
                "The model endpoint's Responses stream was cut off before its final event; retry the request."
            )
        texts: list[str] = []
        calls: list[ToolCall] = []
        for _, slot in sorted(self._slots.items()):
            if slot.kind == "message":
                texts.extend(text for _, text in sorted(slot.parts.items()))
            elif slot.kind == "function_call":
                calls.append(_call(slot.call_id, slot.name, slot.arguments))
        final = self._final
        return Turn(
            message=AssistantMessage(text="".join(texts) or None, tool_calls=tuple(calls)),
            usage=usage_from(final.get("usage"), "input_tokens", "output_tokens"),
            route="responses",
            finish_reason=_finish_reason(final.get("status"), final.get("incomplete_details"), bool(calls)),
        )
