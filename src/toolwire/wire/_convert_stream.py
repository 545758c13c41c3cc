"""Stream bridges between Chat Completions chunks and Responses events, both directions.

Both are push-style: `feed` takes one decoded chunk or event and returns what to send on, and
`finish` is called when the source stream ends. A source that fails or ends early becomes the
target's error form (a `response.failed` event, or a Chat error chunk), so a half-received call
never reaches a client as if it were whole. Re-exported by `toolwire.wire.convert`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolwire.exceptions import ModelResponseError
from toolwire.wire._convert_common import (
    ConversionError,
    check_skippable,
    finish_of_status,
    status_of_finish,
    usage_to_chat,
    usage_to_responses,
)
from toolwire.wire._responses_server import ResponsesEventWriter
from toolwire.wire._responses_shapes import JSON, arguments_text, digest, part_text

__all__ = ["ChatToResponsesStream", "ResponsesToChatStream"]

# The `.done` events that restate a part's whole text, and the part type they restate.
_DONE_TEXT = {
    "response.output_text.done": "output_text",
    "response.refusal.done": "refusal",
    "response.content_part.done": "",
}
_CUT_OFF = "The upstream stream was cut off before the turn was complete; retry the request."


class ChatToResponsesStream:
    """Turn `chat.completion.chunk` objects into Responses events.

    The first content opens a message item; the first fragment of each tool-call index closes it
    and opens a `function_call` item (`call_id` = the Chat call id, item id `fc_...`); argument
    pieces become `function_call_arguments.delta`. `finish_reason` closes every open item;
    `response.completed` (or `.incomplete`) follows the usage chunk, or `finish` when none comes.
    """

    def __init__(self, *, id: str | None = None, model: str | None = None) -> None:
        """Start a bridge.

        Args:
            id: The response id; derived from the chunk id when unset.
            model: The model name; taken from the chunks when unset.
        """
        self._id, self._model = id, model
        self._writer: ResponsesEventWriter | None = None
        self._call_ids: dict[int, str] = {}
        self._finish: str | None = None
        self._usage: JSON | None = None
        self.done = False
        """True once a terminal event was returned; later input is ignored."""

    def _start(self, chunk: Mapping[str, Any]) -> tuple[ResponsesEventWriter, list[JSON]]:
        if self._writer is not None:
            return self._writer, []
        created = chunk.get("created")
        self._writer = ResponsesEventWriter(
            id=self._id or f"resp_{digest(str(chunk.get('id') or ''))}",
            model=self._model or str(chunk.get("model") or ""),
            created_at=created if isinstance(created, int) else None,
        )
        return self._writer, self._writer.start()

    def feed(self, chunk: Mapping[str, Any]) -> list[JSON]:
        """Take one decoded chunk (not `[DONE]`: call `finish` for that); return the events to send.

        Raises:
            ConversionError: the chunk has a second choice, which Responses cannot carry.
        """
        if self.done:
            return []
        writer, events = self._start(chunk)
        error = chunk.get("error")
        if error:
            error = error if isinstance(error, dict) else {"message": str(error)}
            code, message = str(error.get("code") or "server_error"), str(error.get("message") or error)
            self.done = True
            return events + writer.fail(code=code, message=message)
        for choice in chunk.get("choices") or ():
            if (choice.get("index") or 0) != 0:
                raise ConversionError("Responses carries one answer per request; ask Chat for one choice.")
            if self._finish is None:
                events += self._delta(writer, choice.get("delta") or {})
            if choice.get("finish_reason") and self._finish is None:
                self._finish = str(choice["finish_reason"])
                events += writer.close_all()
        if chunk.get("usage"):
            self._usage = usage_to_responses(chunk["usage"])
        if self._finish is not None and self._usage is not None:
            events += self._complete(writer)
        return events

    def _delta(self, writer: ResponsesEventWriter, delta: Mapping[str, Any]) -> list[JSON]:
        events: list[JSON] = []
        if delta.get("content"):
            events += writer.text(str(delta["content"]))
        if delta.get("refusal"):
            events += writer.text(str(delta["refusal"]), refusal=True)
        for fragment in delta.get("tool_calls") or ():
            index, fragment_id = fragment.get("index"), fragment.get("id")
            if not isinstance(index, int):  # servers that omit the index: a new id starts the next call
                known = [i for i, call_id in self._call_ids.items() if call_id == fragment_id]
                last = max(self._call_ids, default=-1)
                index = known[0] if known else last + 1 if fragment_id or last < 0 else last
            function = fragment.get("function") or {}
            if index not in self._call_ids:
                call_id = self._call_ids[index] = str(fragment_id or f"call_{digest(f'{writer.id}:{index}')}")
                events += writer.open_call(index, call_id=call_id, name=str(function.get("name") or ""))
            if function.get("arguments"):
                events += writer.arguments(index, arguments_text(function["arguments"]))
        return events

    def _complete(self, writer: ResponsesEventWriter) -> list[JSON]:
        self.done = True
        _, reason = status_of_finish(self._finish)
        return writer.complete(usage=self._usage, incomplete_reason=reason)

    def finish(self) -> list[JSON]:
        """The source ended (`[DONE]` or end of body): the terminal event, `response.failed` if cut off."""
        if self.done:
            return []
        writer, events = self._start({})
        if self._finish is not None:
            return events + self._complete(writer)
        self.done = True
        return events + writer.fail(code="server_error", message=_CUT_OFF)


@dataclass
class _Call:
    """One function call on its way to Chat fragments."""

    index: int
    call_id: str | None = None
    name: str = ""
    arguments: str = ""
    sent: int | None = None
    """Characters of `arguments` already sent; `None` until the first fragment (with the id) went out."""


class ResponsesToChatStream:
    """Turn Responses events into `chat.completion.chunk` objects.

    Text deltas become `content` deltas; each `function_call` item becomes one tool-call index,
    whose first fragment carries `id` (= `call_id`), `type` and `name`. The `.done` events and the
    final response are authoritative: whatever they hold beyond what was sent goes out as one more
    fragment, so arguments sent only at the end still arrive whole. The terminal event becomes the
    `finish_reason` chunk, then the usage chunk. After an error chunk (`failed` is true) send no
    `[DONE]`.
    """

    def __init__(
        self, *, id: str | None = None, model: str | None = None, include_usage: bool = True
    ) -> None:
        """Start a bridge.

        Args:
            id: The completion id; derived from the response id when unset.
            model: The model name; taken from the response when unset.
            include_usage: End with the usage chunk, as `stream_options.include_usage` asks.
        """
        self._id, self._model, self._created = id, model, 0
        self._include_usage = include_usage
        self._calls: dict[int, _Call] = {}
        self._sent: dict[tuple[int, int], str] = {}
        self._started = False
        self.done = False
        """True once the last chunk was returned; later input is ignored."""
        self.failed = False
        """True when the stream ended in an error chunk."""

    def _chunk(self, delta: JSON, finish_reason: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return self._envelope(choices=[choice])

    def _envelope(self, **fields: Any) -> JSON:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            **fields,
        }

    def _start(self, response: Any) -> list[JSON]:
        if self._started:
            return []
        self._started = True
        response = response if isinstance(response, dict) else {}
        self._id = self._id or f"chatcmpl-{digest(str(response.get('id') or ''))}"
        self._model = self._model or str(response.get("model") or "")
        self._created = response.get("created_at") if isinstance(response.get("created_at"), int) else 0
        return [self._chunk({"role": "assistant", "content": ""})]

    def feed(self, event: Mapping[str, Any]) -> list[JSON]:
        """Take one decoded event; return the chunks to send.

        Raises:
            ConversionError: an output item with no Chat form (a hosted tool call, encrypted reasoning).
            ModelResponseError: a final event contradicts arguments or text already sent.
        """
        if self.done:
            return []
        kind = str(event.get("type"))
        response = event.get("response")
        if kind in ("error", "response.failed"):
            error = event if kind == "error" else (response or {}).get("error") or {}
            return self._fail(str(error.get("code") or "server_error"), str(error.get("message") or kind))
        chunks = self._start(response)
        if kind in ("response.completed", "response.incomplete") and isinstance(response, dict):
            return chunks + self._complete(response)
        index = event.get("output_index")
        if not isinstance(index, int):
            return chunks  # every event this bridge reads carries an output index
        if kind in ("response.output_item.added", "response.output_item.done"):
            chunks += self._item(index, event.get("item"), final=kind.endswith("done"))
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            key = (index, int(event.get("content_index") or 0))
            chunks += self._text(key, self._sent.get(key, "") + str(event.get("delta") or ""), kind)
        elif kind in _DONE_TEXT:
            part = event.get("part") if kind.endswith("part.done") else {**event, "type": _DONE_TEXT[kind]}
            key = (index, int(event.get("content_index") or 0))
            if part_text(part):
                chunks += self._text(key, part_text(part), _part_kind(part))
        elif kind == "response.function_call_arguments.delta":
            call = self._call(index)
            chunks += self._arguments(call, call.arguments + str(event.get("delta") or ""))
        elif kind == "response.function_call_arguments.done":
            chunks += self._arguments(self._call(index), arguments_text(event.get("arguments")))
        return chunks

    def _call(self, output_index: int) -> _Call:
        call = self._calls.get(output_index)
        if call is None:
            call = self._calls[output_index] = _Call(index=len(self._calls))
        return call

    def _item(self, output_index: int, item: Any, *, final: bool) -> list[JSON]:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message" and isinstance(item, dict):
            chunks: list[JSON] = []
            for j, part in enumerate(item.get("content") or ()):
                if part_text(part):  # an empty part (the `added` form) restates nothing
                    chunks += self._text((output_index, j), part_text(part), _part_kind(part))
            return chunks
        if kind == "function_call" and isinstance(item, dict):
            call = self._call(output_index)
            call.call_id = call.call_id or item.get("call_id")
            call.name = call.name or str(item.get("name") or "")
            # An item without arguments (the `added` form, or a server that omits them) changes nothing.
            raw = item.get("arguments")
            return self._arguments(call, arguments_text(raw) if raw else call.arguments)
        if kind == "reasoning" and not final:
            return []  # judged on its final form, which carries encrypted_content if any
        check_skippable(item, f"output[{output_index}]")
        return []

    def _text(self, key: tuple[int, int], text: str, kind: str) -> list[JSON]:
        """Make `text` the part's whole text; send what has not been sent yet."""
        sent = self._sent.get(key, "")
        if not text.startswith(sent):
            raise ModelResponseError(
                "The upstream Responses stream restated text that differs from what it streamed; "
                "retry the request."
            )
        self._sent[key] = text
        field = "refusal" if kind.startswith("response.refusal") or kind == "refusal" else "content"
        return [self._chunk({field: text[len(sent) :]})] if len(text) > len(sent) else []

    def _arguments(self, call: _Call, arguments: str) -> list[JSON]:
        """Make `arguments` the call's whole arguments; send the first fragment and what is new."""
        if call.sent is not None and not arguments.startswith(call.arguments[: call.sent]):
            raise ModelResponseError(
                "The upstream Responses stream restated call arguments that differ from what it "
                "streamed; retry the request."
            )
        call.arguments = arguments
        chunks: list[JSON] = []
        if call.sent is None and call.call_id:
            function = {"name": call.name, "arguments": ""}
            fragment = {"index": call.index, "id": call.call_id, "type": "function", "function": function}
            chunks.append(self._chunk({"tool_calls": [fragment]}))
            call.sent = 0
        if call.sent is not None and len(arguments) > call.sent:
            fragment = {"index": call.index, "function": {"arguments": arguments[call.sent :]}}
            chunks.append(self._chunk({"tool_calls": [fragment]}))
            call.sent = len(arguments)
        return chunks

    def _complete(self, response: JSON) -> list[JSON]:
        chunks: list[JSON] = []
        for index, item in enumerate(response.get("output") or ()):
            chunks += self._item(index, item, final=True)
        unsent = [call for call in self._calls.values() if call.sent is None]
        if unsent:
            raise ModelResponseError(
                "The upstream Responses stream ended with a function_call that has no call_id; "
                "use the Chat route for this endpoint."
            )
        finish = finish_of_status(
            response.get("status"), response.get("incomplete_details"), bool(self._calls)
        )
        chunks.append(self._chunk({}, finish))
        if self._include_usage:
            chunks.append(self._envelope(choices=[], usage=usage_to_chat(response.get("usage"))))
        self.done = True
        return chunks

    def _fail(self, code: str, message: str) -> list[JSON]:
        self.done = self.failed = True
        return [{"error": {"message": message, "type": "server_error", "param": None, "code": code}}]

    def finish(self) -> list[JSON]:
        """The source ended: nothing if a terminal event came, else an error chunk (cut off)."""
        return [] if self.done else self._fail("server_error", _CUT_OFF)


def _part_kind(part: Any) -> str:
    return "refusal" if isinstance(part, dict) and part.get("type") == "refusal" else "output_text"
