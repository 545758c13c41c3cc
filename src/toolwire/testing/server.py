"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for end-to-end tests.

It serves `/v1/chat/completions` and `/v1/responses`. Each model request, on either route, takes
the next `Step` of a script (or asks a callable for one) and is answered, streaming or not,
through the wire adapters' server-side renderers (in `_routes`), so the bytes are the ones a real
endpoint sends and one script plays the same on both routes. Steps can misbehave on purpose the
way real servers do: ids only in the first fragment (as OpenAI), empty-string ids, arguments only
at the end, a tool call written as text, a stream cut mid-arguments or failing mid-way, event
types no client knows, an HTTP error, invalid JSON. Server-wide, it can refuse `tools`, lack a
route, and check the transcript with OpenAI's exact 400 messages. On Responses, `call_id` always
differs from the item `id` (`fc_...`), and responses are stored for `previous_response_id`.

The server runs uvicorn in a background thread, so it serves both synchronous and asynchronous
tests: `with ScriptedServer(steps) as srv:` or `async with ...`; point a model at `srv.base_url`.
The module is a little over 400 lines because the step constructors and misbehaviours document
themselves; splitting them from the server that honours them would scatter one concept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolwire._serving import ThreadedServer
from toolwire.exceptions import WireFormatError
from toolwire.messages import Message, Usage
from toolwire.testing import _routes
from toolwire.testing._routes import error_body as _error_body
from toolwire.wire import chat, responses

__all__ = ["Script", "ScriptedCall", "ScriptedServer", "Step"]

ScriptedCall = tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str]
"""A call to answer with: (name, arguments as a dict or a raw string, optional id)."""


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
    """End the body mid-arguments (or mid-text): no `finish_reason` or `[DONE]`, no final event."""
    arguments_only_in_done: bool = False
    """Stream no argument pieces: each call's whole arguments arrive at the end, in
    `function_call_arguments.done` and the finished item (Responses) or one last fragment (Chat)."""
    stream_error: str | None = None
    """Break the stream off mid-arguments (or mid-text) with an error carrying this message:
    `error` then `response.failed` (Responses), a `data: {"error": ...}` chunk (Chat). Without
    streaming, answer 200 with a `failed` response (Responses) or an error object (Chat)."""
    novel_events: bool = False
    """Interleave what no client knows: events of an unknown type (Responses), SSE comments and
    chunks with unknown fields (Chat). Clients must ignore them."""
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


@dataclass(eq=False)
class _State:
    steps: list[Step] = field(default_factory=list)
    served: int = 0


def _bad_request(message: str, param: str | None = None, *, code: str | None = None) -> JSONResponse:
    return JSONResponse(
        _error_body(message, "invalid_request_error", param=param, code=code), status_code=400
    )


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers from a script.

    Args:
        script: Steps consumed one per model request, or a callable `(request_body, route) -> Step`.
        reject_tools: Answer 400 "does not support tools" to every request that offers tools.
        check_transcript: Answer 400 with OpenAI's message when a call id is left unanswered, or a
            result answers no call (on Chat: no call of the assistant message right before it).
        strict_result_order: Also require tool messages in the order of the calls (OpenAI does not).
        latency: Seconds to wait before every answer, unless a step sets its own.
        split: The largest piece of text or arguments per stream chunk.
        serve_chat: Serve `/v1/chat/completions`; when false it answers `unserved_status`.
        serve_responses: Serve `/v1/responses`; when false it answers `unserved_status`.
        unserved_status: How a route that is not served answers: 404 or 405 (FastAPI's bodies),
            or 400 with a message saying the API is not supported.
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
        serve_chat: bool = True,
        serve_responses: bool = True,
        unserved_status: int = 404,
    ) -> None:
        self._script = script
        self._state = _State(steps=list(script) if not callable(script) else [])
        self.reject_tools = reject_tools
        self.check_transcript = check_transcript
        self.strict_result_order = strict_result_order
        self.latency = latency
        self.split = split
        self.serve_chat = serve_chat
        self.serve_responses = serve_responses
        self.unserved_status = unserved_status
        self.requests: list[dict[str, Any]] = []
        """Every request body received, in order, rejected ones included."""
        self.routes: list[str] = []
        """The route of each request in `requests`: `chat` or `responses`."""
        self.stored: dict[str, list[Any]] = {}
        """Each stored response's input and output items, by response id, for `previous_response_id`."""
        self.headers: list[dict[str, str]] = []
        """The headers of each request in `requests`, names in lower case."""
        self.clients: list[tuple[str, int] | None] = []
        """The client address (host, port) of each request: a new port means a new connection."""
        self._serving: ThreadedServer | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_endpoint, methods=["POST"]),
                Route("/v1/responses", self._responses_endpoint, methods=["POST"]),
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
        if self._serving is None:
            raise RuntimeError("The scripted server is not running; start it with `with` or `async with`.")
        return f"{self._serving.url}/v1"

    def enqueue(self, *steps: Step) -> None:
        """Append steps to a list script, for the requests still to come."""
        if callable(self._script):
            raise TypeError("This server answers from a callable script; it has no steps to add to.")
        self._state.steps.extend(steps)

    @property
    def remaining(self) -> int:
        """Steps not yet used."""
        return len(self._state.steps)

    @staticmethod
    def read_transcript(body: dict[str, Any], route: str) -> list[Message]:
        """The canonical transcript of a request body on either route, for route-blind scripts."""
        parse = responses.parse_request if route == "responses" else chat.parse_request
        return parse(body)[0]

    def assert_complete(self) -> None:
        """Fail when steps of the script were never used."""
        assert not self._state.steps, f"{len(self._state.steps)} scripted step(s) were never requested"

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start serving on a free port; returns once the server accepts connections."""
        serving = ThreadedServer(self.app, name="scripted-model")
        serving.start()
        self._serving = serving

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        if self._serving is not None:
            # Kept, so `base_url` still names the address a finished test talked to.
            self._serving.stop(10)

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

    async def _receive(self, request: Request, route: str) -> dict[str, Any] | Response:
        """The request's body, recorded; or the answer when the body or the route is refused."""
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _bad_request("The body is not valid JSON.")
        if isinstance(body, dict):
            self.requests.append(body)
            self.routes.append(route)
            self.headers.append(dict(request.headers))
            self.clients.append((request.client.host, request.client.port) if request.client else None)
        if not (self.serve_responses if route == "responses" else self.serve_chat):
            label = "Responses" if route == "responses" else "Chat Completions"
            status, error = _routes.unserved(self.unserved_status, label)
            return JSONResponse(error, status_code=status)
        return body if isinstance(body, dict) else _bad_request("The request body must be a JSON object.")

    def _refused_tools(self, body: dict[str, Any]) -> Response | None:
        if not (self.reject_tools and body.get("tools")):
            return None
        message = f"Model '{body.get('model') or 'scripted'}' does not support tools."
        return _bad_request(message, param="tools", code="unsupported_parameter")

    async def _step_for(self, body: dict[str, Any], route: str) -> Step | Response:
        """The step answering this request, after its latency; or the scripted failure."""
        step = self._next_step(body, route)
        if step is None:
            return self._exhausted()
        delay = self.latency if step.latency is None else step.latency
        if delay:
            await asyncio.sleep(delay)
        return self._failure(step) if step.status is not None else step

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
        body = await self._receive(request, "chat")
        if isinstance(body, Response):
            return body
        try:
            chat.parse_request(body)
        except WireFormatError as exc:
            return _bad_request(str(exc), param=exc.param)
        if (refused := self._refused_tools(body)) is not None:
            return refused
        problem = self.check_transcript and _routes.chat_transcript_problem(
            body["messages"], strict_order=self.strict_result_order
        )
        if problem:
            return _bad_request(*problem)
        step = await self._step_for(body, "chat")
        if isinstance(step, Response):
            return step
        model = str(body.get("model") or "scripted")
        turn = _routes.step_turn(step, self._state.served)
        completion_id = f"chatcmpl-scripted-{self._state.served}"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = _routes.chat_chunks(
                step, turn, model, completion_id, include_usage=include_usage, split=self.split
            )
            return StreamingResponse(_routes.chat_sse(chunks, step), media_type="text/event-stream")
        if step.malformed or step.cut_stream:
            return Response(
                '{"id": "chatcmpl-broken", "choices": [{"index": 0, "message": {',
                media_type="application/json",
            )
        if step.stream_error:
            return JSONResponse(_error_body(step.stream_error, "server_error"))
        completion = chat.render_response(turn, model, completion_id)
        if step.empty_string_id:
            for call in completion["choices"][0]["message"].get("tool_calls") or ():
                call["id"] = ""
        return JSONResponse(completion)

    # --- the Responses route -----------------------------------------------------------------------

    async def _responses_endpoint(self, request: Request) -> Response:
        body = await self._receive(request, "responses")
        if isinstance(body, Response):
            return body
        raw = body.get("input")
        items: list[Any] = [{"role": "user", "content": raw}] if isinstance(raw, str) else []
        items = raw if isinstance(raw, list) else items
        checked = {**body, "previous_response_id": None}  # the server keeps the state, not the parser
        if previous := body.get("previous_response_id"):
            if not isinstance(previous, str) or previous not in self.stored:
                message = f"Previous response with id '{previous}' not found."
                return _bad_request(message, param="previous_response_id", code="previous_response_not_found")
            items = checked["input"] = [*self.stored[previous], *items]
        try:
            responses.parse_request(checked)
        except WireFormatError as exc:
            return _bad_request(str(exc), param=exc.param)
        if (refused := self._refused_tools(body)) is not None:
            return refused
        if self.check_transcript and (problem := _routes.responses_transcript_problem(items)):
            return _bad_request(*problem)
        step = await self._step_for(body, "responses")
        if isinstance(step, Response):
            return step
        model = str(body.get("model") or "scripted")
        turn = _routes.step_turn(step, self._state.served)
        response_id = f"resp_scripted_{self._state.served}"
        rendered = responses.render_response(turn, model, response_id)
        if body.get("store", True) is not False:
            self.stored[response_id] = [*items, *rendered["output"]]
        if body.get("stream"):
            events = _routes.responses_events(step, turn, model, response_id, split=self.split)
            return StreamingResponse(_routes.responses_sse(events, step), media_type="text/event-stream")
        if step.malformed or step.cut_stream:
            return Response(
                '{"id": "resp_broken", "object": "response", "output": [', media_type="application/json"
            )
        if step.stream_error:
            error = {"code": "server_error", "message": step.stream_error}
            return JSONResponse(
                responses.response_object(response_id, model, status="failed", output=[], error=error)
            )
        if step.empty_string_id:
            for item in rendered["output"]:
                if item["type"] == "function_call":
                    item["call_id"] = ""
        return JSONResponse(rendered)
