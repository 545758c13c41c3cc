"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for end-to-end tests.

Each model request takes the next `Step` of a script (or asks a callable for one) and is answered,
streaming or not, through the wire adapters' server-side renderers, so the bytes are the ones a
real endpoint sends. Steps can misbehave on purpose the way real servers do: ids only in the first
fragment (as OpenAI), empty-string ids, a tool call written as text, a stream cut mid-arguments,
an HTTP error, invalid JSON. Server-wide, it can refuse `tools` and check the transcript with
OpenAI's exact 400 messages.

The server runs uvicorn in a background thread, so it serves both synchronous and asynchronous
tests: `with ScriptedServer(steps) as srv:` or `async with ...`; point a model at `srv.base_url`.
Only the functions named `_chat_*` know the Chat route; a Responses route goes beside them. The
module is a little over 400 lines because the step constructors and misbehaviours document
themselves; splitting them from the server that honours them would scatter one concept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolwire.messages import AssistantMessage, ToolCall, Turn, Usage
from toolwire.wire import chat
from toolwire.wire.sse import encode_event

__all__ = ["Script", "ScriptedCall", "ScriptedServer", "Step"]

ScriptedCall = tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str]
"""A call to answer with: (name, arguments as a dict or a raw string, optional id)."""

_MISSING_RESULTS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: "
)
_ORPHAN_RESULT = (  # "preceeding" is OpenAI's spelling
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)


@dataclass(kw_only=True)
class Step:
    """One scripted answer: the turn to send, and how to misbehave while sending it."""

    text: str | None = None
    tool_calls: Sequence[ScriptedCall] = ()
    usage: Usage | None = None
    """Token counts to report; zeros when omitted."""
    latency: float | None = None
    """Seconds to wait before answering; the server's `latency` when omitted."""
    ids_only_first_fragment: bool = True
    """Streamed calls carry `id` and `name` only in their first fragment, as OpenAI sends them."""
    empty_string_id: bool = False
    """Send `""` as the id of later fragments (streaming) or of every call (non-streaming).

    For `""` as the only id of a streamed call, script the call with the id `""`.
    """
    tool_call_as_text: bool = False
    """Write the calls as JSON text in `content` instead of sending `tool_calls`."""
    cut_stream: bool = False
    """End the body mid-arguments (or mid-text): no `finish_reason`, no `[DONE]`."""
    status: int | None = None
    """Answer with this HTTP error status instead of a turn."""
    error_body: dict[str, Any] | str | None = None
    """The body of the error; an OpenAI-style error when omitted."""
    malformed: bool = False
    """Answer with invalid JSON."""

    @classmethod
    def reply(cls, text: str, **misbehaviour: Any) -> Step:
        """A text answer."""
        return cls(text=text, **misbehaviour)

    @classmethod
    def call(
        cls,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        id: str | None = None,
        **misbehaviour: Any,
    ) -> Step:
        """One tool call, with arguments as a dict or a raw (even invalid) string."""
        call: ScriptedCall = (name, {} if arguments is None else arguments)
        if id is not None:
            call = (name, call[1], id)
        return cls(tool_calls=(call,), **misbehaviour)

    @classmethod
    def text_and_call(
        cls, text: str, name: str, arguments: dict[str, Any] | str | None = None, **misbehaviour: Any
    ) -> Step:
        """Text and one tool call in the same turn."""
        return dataclasses.replace(cls.call(name, arguments, **misbehaviour), text=text)

    @classmethod
    def plan(
        cls, name: str, args: dict[str, Any] | None = None, reply: str = "", **misbehaviour: Any
    ) -> Step:
        """A JSON-plan answer, as a model on the JSON-plan route writes it."""
        text = json.dumps({"action": {"name": name, "args": args or {}}, "reply": reply})
        return cls(text=text, **misbehaviour)

    @classmethod
    def error(cls, status: int, message: str = "Scripted failure.", *, code: str | None = None) -> Step:
        """An HTTP error with an OpenAI-style body."""
        kind = "invalid_request_error" if status < 500 else "server_error"
        return cls(status=status, error_body=_error_body(message, kind, code=code))


Script = Sequence[Step] | Callable[[dict[str, Any], str], Step]
"""Steps consumed one per model request, or `(request_body, route) -> Step`."""


def _error_body(
    message: str, kind: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _turn(step: Step, number: int) -> Turn:
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


@dataclass(eq=False)
class _State:
    steps: list[Step] = field(default_factory=list)
    served: int = 0


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers from a script.

    Args:
        script: Steps consumed one per model request, or a callable `(request_body, route) -> Step`.
        reject_tools: Answer 400 "does not support tools" to every request that offers tools.
        check_transcript: Answer 400 with OpenAI's message when a call id is left unanswered, or a
            tool message answers no call of the assistant message right before it.
        strict_result_order: Also require tool messages in the order of the calls (OpenAI does not).
        latency: Seconds to wait before every answer, unless a step sets its own.
        split: The largest piece of text or arguments per stream chunk.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        reject_tools: bool = False,
        check_transcript: bool = True,
        strict_result_order: bool = False,
        latency: float = 0.0,
        split: int = 7,
    ) -> None:
        self._script = script
        self._state = _State(steps=list(script) if not callable(script) else [])
        self.reject_tools = reject_tools
        self.check_transcript = check_transcript
        self.strict_result_order = strict_result_order
        self.latency = latency
        self.split = split
        self.requests: list[dict[str, Any]] = []
        """Every request body received, in order, rejected ones included."""
        self.headers: list[dict[str, str]] = []
        """The headers of each request in `requests`, names in lower case."""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_endpoint, methods=["POST"]),
                Route("/v1/models", self._models_endpoint, methods=["GET"]),
            ]
        )

    @classmethod
    def from_steps(cls, *steps: Step, **options: Any) -> ScriptedServer:
        """A server answering with `steps`, in order."""
        return cls(list(steps), **options)

    @property
    def base_url(self) -> str:
        """The API root, ending in `/v1`."""
        if not self._port:
            raise RuntimeError("The scripted server is not running; start it with `with` or `async with`.")
        return f"http://127.0.0.1:{self._port}/v1"

    def enqueue(self, *steps: Step) -> None:
        """Append steps to a list script, for the requests still to come."""
        if callable(self._script):
            raise TypeError("This server answers from a callable script; it has no steps to add to.")
        self._state.steps.extend(steps)

    @property
    def remaining(self) -> int:
        """Steps not yet used."""
        return len(self._state.steps)

    def assert_complete(self) -> None:
        """Fail when steps of the script were never used."""
        assert not self._state.steps, f"{len(self._state.steps)} scripted step(s) were never requested"

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start serving on a free port; returns once the server accepts connections."""
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
        # without it a kept-alive connection stalls 40 ms per response on delayed ACKs.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            loop="asyncio",
            http="h11",
            ws="none",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("The scripted server failed to start; see the log above.")
            self._thread.join(0.01)

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None

    def __enter__(self) -> ScriptedServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    # --- shared by every route -----------------------------------------------------------------

    def _next_step(self, body: dict[str, Any], route: str) -> Step | None:
        self._state.served += 1
        if callable(self._script):
            return self._script(body, route)
        return self._state.steps.pop(0) if self._state.steps else None

    def _exhausted(self) -> JSONResponse:
        message = (
            f"The scripted server has no step left for request #{len(self.requests)}; "
            "add a step to the script or expect fewer model requests."
        )
        return JSONResponse(_error_body(message, "server_error", code="script_exhausted"), status_code=500)

    @staticmethod
    def _failure(step: Step) -> Response:
        status = step.status or 500
        if isinstance(step.error_body, str):
            return Response(step.error_body, status_code=status, media_type="text/plain")
        body = step.error_body or _error_body(f"Scripted error {status}.", "server_error")
        return JSONResponse(body, status_code=status)

    async def _models_endpoint(self, request: Request) -> Response:
        data = [{"id": "scripted", "object": "model", "created": 0, "owned_by": "toolwire"}]
        return JSONResponse({"object": "list", "data": data})

    # --- the Chat Completions route --------------------------------------------------------------

    async def _chat_endpoint(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse(
                _error_body("The body is not valid JSON.", "invalid_request_error"), status_code=400
            )
        if isinstance(body, dict):
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        try:
            chat.parse_request(body)
        except chat.InvalidRequestError as exc:
            error = _error_body(str(exc), "invalid_request_error", param=exc.param)
            return JSONResponse(error, status_code=400)
        model = str(body.get("model") or "scripted")
        if self.reject_tools and body.get("tools"):
            message = f"Model '{model}' does not support tools."
            error = _error_body(message, "invalid_request_error", param="tools", code="unsupported_parameter")
            return JSONResponse(error, status_code=400)
        if self.check_transcript and (problem := self._chat_transcript_problem(body["messages"])):
            return JSONResponse(
                _error_body(problem[0], "invalid_request_error", param=problem[1]), status_code=400
            )
        step = self._next_step(body, "chat")
        if step is None:
            return self._exhausted()
        delay = self.latency if step.latency is None else step.latency
        if delay:
            await asyncio.sleep(delay)
        if step.status is not None:
            return self._failure(step)
        turn = _turn(step, self._state.served)
        completion_id = f"chatcmpl-scripted-{self._state.served}"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = self._chat_chunks(step, turn, model, completion_id, include_usage)
            return StreamingResponse(_chat_sse(chunks, step), media_type="text/event-stream")
        if step.malformed or step.cut_stream:
            return Response(
                '{"id": "chatcmpl-broken", "choices": [{"index": 0, "message": {',
                media_type="application/json",
            )
        completion = chat.render_response(turn, model, completion_id)
        if step.empty_string_id:
            for call in completion["choices"][0]["message"].get("tool_calls") or ():
                call["id"] = ""
        return JSONResponse(completion)

    def _chat_chunks(
        self, step: Step, turn: Turn, model: str, completion_id: str, include_usage: bool
    ) -> list[dict[str, Any]]:
        chunks = list(
            chat.render_stream(turn, model, completion_id, split=self.split, include_usage=include_usage)
        )
        calls = turn.message.tool_calls
        first_argument_piece = None
        for position, chunk in enumerate(chunks):
            for fragment in (
                (chunk["choices"][0]["delta"].get("tool_calls") or ()) if chunk["choices"] else ()
            ):
                if "id" in fragment:
                    continue  # the first fragment of a call
                first_argument_piece = position if first_argument_piece is None else first_argument_piece
                call = calls[fragment["index"]]
                if not step.ids_only_first_fragment:
                    fragment.update(id=call.id, type="function")
                    fragment["function"]["name"] = call.name
                if step.empty_string_id:
                    fragment["id"] = ""
        if step.cut_stream:
            # Stop after the first argument piece of the first call, or halfway through the text.
            text_end = next(
                (i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"]), 1
            )
            cut = first_argument_piece + 1 if first_argument_piece is not None else max(1, text_end // 2)
            chunks = chunks[:cut]
        return chunks

    def _chat_transcript_problem(self, messages: list[dict[str, Any]]) -> tuple[str, str] | None:
        pending: list[str] = []  # ids of the assistant message right before, not yet answered
        in_block = False
        assistant_at = 0
        for i, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                call_id = message.get("tool_call_id")
                if not in_block or call_id not in pending:
                    return _ORPHAN_RESULT, f"messages.[{i}].role"
                if self.strict_result_order and call_id != pending[0]:
                    message_text = (
                        f"Tool messages must answer the calls in order: expected {pending[0]}, got {call_id}."
                    )
                    return message_text, f"messages.[{i}].tool_call_id"
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


async def _chat_sse(chunks: list[dict[str, Any]], step: Step) -> AsyncIterator[str]:
    if step.malformed:
        yield encode_event('{"id": "chatcmpl-broken", "choices": [')
    else:
        for chunk in chunks:
            yield encode_event(json.dumps(chunk))
    if not step.cut_stream:
        yield encode_event("[DONE]")
