"""The server half of the Responses wire: read a `/responses` request, render a response or its stream.

Used by the gateway and the scripted test server; `ResponsesEventWriter` also serves the bridge
that turns a Chat Completions stream into Responses events. Public names are re-exported by
`toolwire.wire.responses`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Hashable, Iterator
from typing import Any

from toolwire.exceptions import WireFormatError
from toolwire.messages import (
    AssistantMessage,
    Message,
    RequestOptions,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    UserMessage,
)
from toolwire.wire._responses_shapes import (
    JSON,
    TEXT_PARTS,
    arguments_text,
    digest,
    function_call_item,
    message_item,
    part_text,
    response_object,
    tool_choice_to_chat,
    usage_json,
)

__all__ = ["ResponsesEventWriter", "parse_request", "render_response", "render_stream"]

FINISH_TO_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _content_text(content: Any, at: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireFormatError(f"{at}.content must be a string or a list of text parts.", param=at)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in (*TEXT_PARTS, "refusal"):
            raise WireFormatError(
                f"{at}.content[{j}] is a {kind!r} part, which has no text form here; send text parts only.",
                param=f"{at}.content[{j}]",
            )
        texts.append(part_text(part))
    return "".join(texts)


def _add_assistant(transcript: list[Message], text: str | None, call: ToolCall | None) -> None:
    # Consecutive assistant items (message, function_call, function_call...) are one assistant turn.
    calls = (call,) if call else ()
    last = transcript[-1] if transcript else None
    if isinstance(last, AssistantMessage):
        joined = (last.text or "") + (text or "")
        transcript[-1] = AssistantMessage(text=joined or None, tool_calls=last.tool_calls + calls)
    else:
        transcript.append(AssistantMessage(text=text or None, tool_calls=calls))


def _transcript(items: list[Any]) -> list[Message]:
    transcript: list[Message] = []
    names: dict[str, str] = {}  # call id -> tool name, to name each result
    for i, item in enumerate(items):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise WireFormatError(f"{at} must be an object.", param=at)
        kind = item.get("type") or ("message" if "role" in item else None)
        role = item.get("role")
        if kind == "message" and role == "assistant":
            _add_assistant(transcript, _content_text(item.get("content"), at), None)
        elif kind == "message" and role == "user":
            transcript.append(UserMessage(content=_content_text(item.get("content"), at)))
        elif kind == "message" and role in ("system", "developer"):
            transcript.append(SystemMessage(content=_content_text(item.get("content"), at)))
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
                raise WireFormatError(f"{at} is a function_call without a call_id or name.", param=at)
            names[call_id] = name
            _add_assistant(
                transcript,
                None,
                ToolCall(id=call_id, name=name, arguments=arguments_text(item.get("arguments"))),
            )
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise WireFormatError(f"{at} is a function_call_output without a call_id.", param=at)
            content = _content_text(item.get("output"), at)
            transcript.append(ToolResult(call_id=call_id, name=names.get(call_id, ""), content=content))
        elif kind == "reasoning" and not item.get("encrypted_content"):
            continue  # the model's own notes: not part of the transcript, and nothing else depends on them
        else:
            raise WireFormatError(
                f"{at} is a {kind or role!r} item, which this endpoint cannot carry; "
                "send only messages, function_call and function_call_output items.",
                param=at,
            )
    return transcript


def _tool_spec(tool: Any, i: int) -> ToolSpec:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise WireFormatError(
            f"tools[{i}] is a {kind!r} tool, which this endpoint cannot run; offer function tools only.",
            param=f"tools[{i}]",
        )
    name, parameters, strict = tool.get("name"), tool.get("parameters"), tool.get("strict")
    if not isinstance(name, str) or not name or not isinstance(parameters, dict | None):
        raise WireFormatError(f"tools[{i}] needs a name and an object of parameters.", param=f"tools[{i}]")
    return ToolSpec(
        name=name,
        description=str(tool.get("description") or ""),
        parameters=parameters or {"type": "object", "properties": {}},
        strict=strict if isinstance(strict, bool) else None,
    )


def parse_request(body: Any) -> tuple[list[Message], list[ToolSpec], RequestOptions, bool]:
    """Read a `/responses` request body: (transcript, tools, options, stream).

    `instructions` becomes a leading system message; consecutive assistant `message` and
    `function_call` items become one assistant turn; each `function_call_output` a tool result.
    Reasoning items without `encrypted_content` are skipped. The model name is left to the caller.

    Raises:
        WireFormatError: the body cannot be read, relies on stored state (`previous_response_id`),
            or holds an item, content part or tool with no canonical form; the message names it.
    """
    if not isinstance(body, dict):
        raise WireFormatError("The request body must be a JSON object.")
    for key in ("previous_response_id", "conversation"):
        if body.get(key):
            raise WireFormatError(
                f"'{key}' needs stored responses, which this endpoint does not keep; "
                "resend the whole conversation in 'input'.",
                param=key,
            )
    transcript: list[Message] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise WireFormatError("'instructions' must be a string.", param="instructions")
    if instructions:
        transcript.append(SystemMessage(content=instructions))
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        transcript.append(UserMessage(content=raw_input))
    elif isinstance(raw_input, list):
        transcript.extend(_transcript(raw_input))
    else:
        raise WireFormatError("'input' must be a string or an array of items.", param="input")
    tools = [_tool_spec(tool, i) for i, tool in enumerate(body.get("tools") or ())]
    return transcript, tools, _options(body), bool(body.get("stream"))


def _options(body: JSON) -> RequestOptions:
    choice, parallel = body.get("tool_choice"), body.get("parallel_tool_calls")
    temperature, max_tokens = body.get("temperature"), body.get("max_output_tokens")
    if choice is not None and not isinstance(choice, str | dict):
        raise WireFormatError("'tool_choice' must be a string or an object.", param="tool_choice")
    if parallel is not None and not isinstance(parallel, bool):
        raise WireFormatError("'parallel_tool_calls' must be a boolean.", param="parallel_tool_calls")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise WireFormatError("'temperature' must be a number.", param="temperature")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise WireFormatError("'max_output_tokens' must be an integer.", param="max_output_tokens")
    return RequestOptions(
        tool_choice=None if choice is None else tool_choice_to_chat(choice),
        parallel_tool_calls=parallel,
        temperature=None if temperature is None else float(temperature),
        max_tokens=max_tokens,
    )


def render_response(turn: Turn, model: str, id: str, *, created_at: int | None = None) -> JSON:
    """Render a turn as a non-streaming `response` body: the message item, then one item per call."""
    output = []
    if turn.message.text:
        output.append(message_item(f"msg_{digest(id + ':0')}", turn.message.text))
    output.extend(function_call_item(call, status="completed") for call in turn.message.tool_calls)
    incomplete = FINISH_TO_INCOMPLETE.get(turn.finish_reason or "")
    return response_object(
        id,
        model,
        status="incomplete" if incomplete else "completed",
        output=output,
        usage=usage_json(turn.usage),
        incomplete_reason=incomplete,
        created_at=created_at,
    )


class ResponsesEventWriter:
    """Write a Responses event stream item by item, keeping its bookkeeping right.

    Every event gets the next `sequence_number`; every item the next `output_index`. A message item
    is opened by the first text and closed (`output_text.done`, `content_part.done`,
    `output_item.done`) before a call opens; calls stay open until closed or until `complete`,
    which closes everything still open, in output order, before the terminal event.
    """

    def __init__(self, *, id: str, model: str, created_at: int | None = None) -> None:
        self.id = id
        self.model = model
        self.created_at = int(time.time()) if created_at is None else created_at
        self.output: list[JSON] = []
        """The items so far, in output order, as they stand."""
        self._sequence = 0
        self._message: int | None = None
        self._calls: dict[Hashable, int] = {}

    def _event(self, kind: str, **fields: Any) -> JSON:
        event = {"type": kind, **copy.deepcopy(fields), "sequence_number": self._sequence}
        self._sequence += 1
        return event

    def _snapshot(self, status: str, **fields: Any) -> JSON:
        return response_object(
            self.id, self.model, status=status, output=self.output, created_at=self.created_at, **fields
        )

    def start(self) -> list[JSON]:
        """`response.created` and `response.in_progress`."""
        snapshot = self._snapshot("in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def text(self, delta: str, *, refusal: bool = False) -> list[JSON]:
        """A piece of text (or of a refusal), opening the message item or a new part as needed."""
        events: list[JSON] = []
        kind, key = ("refusal", "refusal") if refusal else ("output_text", "text")
        if self._message is None:
            self._message = len(self.output)
            item_id = f"msg_{digest(f'{self.id}:{self._message}')}"
            message = {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant"}
            self.output.append({**message, "content": []})
            added = self._event(
                "response.output_item.added", output_index=self._message, item=self.output[-1]
            )
            events.append(added)
        content: list[JSON] = self.output[self._message]["content"]
        if not content or content[-1]["type"] != kind:
            events += self._close_part()
            content.append({"type": kind, key: ""} if refusal else {"type": kind, key: "", "annotations": []})
            events.append(self._part_event("response.content_part.added", part=content[-1]))
        content[-1][key] += delta
        extra: JSON = {} if refusal else {"logprobs": []}
        events.append(self._part_event(f"response.{kind}.delta", delta=delta, **extra))
        return events

    def _part_event(self, kind: str, **fields: Any) -> JSON:
        assert self._message is not None
        item = self.output[self._message]
        where = {
            "item_id": item["id"],
            "output_index": self._message,
            "content_index": len(item["content"]) - 1,
        }
        return self._event(kind, **where, **fields)

    def _close_part(self) -> list[JSON]:
        item = self.output[self._message] if self._message is not None else None
        if item is None or not item["content"]:
            return []
        part = item["content"][-1]
        if part["type"] == "refusal":
            done = self._part_event("response.refusal.done", refusal=part["refusal"])
        else:
            done = self._part_event("response.output_text.done", text=part["text"], logprobs=[])
        return [done, self._part_event("response.content_part.done", part=part)]

    def close_message(self) -> list[JSON]:
        """Close the open message item, if any."""
        if self._message is None:
            return []
        events = self._close_part()
        index, self._message = self._message, None
        self.output[index]["status"] = "completed"
        return [
            *events,
            self._event("response.output_item.done", output_index=index, item=self.output[index]),
        ]

    def open_call(self, key: Hashable, *, call_id: str, name: str) -> list[JSON]:
        """Open a `function_call` item under `key`, closing the open message item first."""
        events = self.close_message()
        index = self._calls[key] = len(self.output)
        item = function_call_item(ToolCall(id=call_id, name=name, arguments=""), status="in_progress")
        self.output.append(item)
        return [*events, self._event("response.output_item.added", output_index=index, item=item)]

    def arguments(self, key: Hashable, delta: str) -> list[JSON]:
        """A piece of the open call's arguments."""
        index = self._calls[key]
        item = self.output[index]
        item["arguments"] += delta
        kind = "response.function_call_arguments.delta"
        return [self._event(kind, item_id=item["id"], output_index=index, delta=delta)]

    def close_call(self, key: Hashable) -> list[JSON]:
        """Close the call opened under `key`: the full arguments, then the finished item."""
        index = self._calls.pop(key)
        item = self.output[index]
        item["status"] = "completed"
        kind = "response.function_call_arguments.done"
        done = self._event(
            kind, item_id=item["id"], output_index=index, name=item["name"], arguments=item["arguments"]
        )
        return [done, self._event("response.output_item.done", output_index=index, item=item)]

    def close_all(self) -> list[JSON]:
        """Close every open item, in output order."""
        events: list[JSON] = []
        pending: list[tuple[int, Hashable | None]] = [(i, k) for k, i in self._calls.items()]
        if self._message is not None:
            pending.append((self._message, None))
        for _, key in sorted(pending, key=lambda entry: entry[0]):
            events += self.close_message() if key is None else self.close_call(key)
        return events

    def complete(self, *, usage: JSON | None = None, incomplete_reason: str | None = None) -> list[JSON]:
        """Close what is open, then `response.completed` (or `response.incomplete` with its reason)."""
        events = self.close_all()
        status = "incomplete" if incomplete_reason else "completed"
        snapshot = self._snapshot(status, usage=usage, incomplete_reason=incomplete_reason)
        return [*events, self._event(f"response.{status}", response=snapshot)]

    def fail(self, *, code: str, message: str) -> list[JSON]:
        """An `error` event, then `response.failed` carrying the same error."""
        error = {"code": code, "message": message}
        failed = self._snapshot("failed", error=error)
        return [self._event("error", **error, param=None), self._event("response.failed", response=failed)]


def _pieces(text: str, split: int | None) -> list[str]:
    if not split or len(text) <= split:
        return [text] if text else []
    return [text[i : i + split] for i in range(0, len(text), split)]


def render_stream(
    turn: Turn, model: str, id: str, *, split: int | None = 16, created_at: int | None = None
) -> Iterator[JSON]:
    """Render a turn as Responses stream events, in the order OpenAI sends them.

    `response.created`, `response.in_progress`, then the message item (`output_item.added`,
    `content_part.added`, `output_text.delta`..., `.done`, `content_part.done`,
    `output_item.done`), then each call (`output_item.added`, `function_call_arguments.delta`...,
    `.done`, `output_item.done`), then `response.completed`. The caller adds the SSE framing
    (`event: <type>` and `data: <json>`).

    Args:
        turn: The turn to send.
        model: The model name echoed in the response snapshots.
        id: The response id.
        split: The largest piece of text or arguments per delta; `None` sends each whole.
        created_at: The creation time; now when unset.
    """
    writer = ResponsesEventWriter(id=id, model=model, created_at=created_at)
    yield from writer.start()
    for piece in _pieces(turn.message.text or "", split):
        yield from writer.text(piece)
    for key, call in enumerate(turn.message.tool_calls):
        yield from writer.open_call(key, call_id=call.id, name=call.name)
        for piece in _pieces(call.arguments, split):
            yield from writer.arguments(key, piece)
        yield from writer.close_call(key)
    incomplete = FINISH_TO_INCOMPLETE.get(turn.finish_reason or "")
    yield from writer.complete(usage=usage_json(turn.usage), incomplete_reason=incomplete)
