"""Any OpenAI-compatible endpoint as a `Model`: OpenAI, Azure, vLLM, llama.cpp, Ollama, LiteLLM...

One pooled `httpx2.AsyncClient` carries every request; the wire adapters build and read plain
JSON, so no second object model sits in the hot path. A wire format is a small `_Wire` strategy
(path, request builder, response parser, stream assembler): Chat Completions today, Responses
beside it later.

The JSON plan is layered on a wire rather than being one: the tools go into the system prompt, no
`tools` are sent, and the plan in the answer becomes a `ToolCall` for the Gate. It is used when
configured, and, for the rest of the process, for an endpoint that answered that the model does
not support tools. On the chat route, a tool call the model wrote as text is turned into a real
call too. The module is a little over 400 lines because the error mapping (one actionable sentence
per failure) lives next to the transport that meets those failures.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx2

from toolwire.exceptions import (
    ConfigError,
    ModelConnectionError,
    ModelHTTPError,
    ModelResponseError,
    RouteUnsupportedError,
    ToolsUnsupportedError,
)
from toolwire.messages import AssistantMessage, Message, ToolCall, ToolSpec, Turn
from toolwire.models.base import RequestOptions, StreamEvent, TextDelta, TurnComplete
from toolwire.wire import chat, jsonplan
from toolwire.wire.sse import SSEDecoder, SSEEvent

__all__ = ["OpenAIModel", "clear_route_memory"]

logger = logging.getLogger(__name__)

_PLAN_ENDPOINTS: set[tuple[str, str]] = set()
"""(base URL, model) pairs that refused `tools`: they use the JSON plan for the rest of the process."""

_TOOLS_REFUSED = (
    "does not support tool",
    "unsupported param: tools",
    "unsupported parameter: 'tools'",
    "tools is not supported",
    "tools are not supported",
    "tool use is not supported",
    "tool calling is not supported",
    "tool choice requires --enable-auto-tool-choice",
)
"""How servers say a model has no tool support (OpenAI, Ollama, vLLM, Qwen's demo server...)."""


def clear_route_memory() -> None:
    """Forget which endpoints were switched to the JSON plan, so each tries native tools again."""
    _PLAN_ENDPOINTS.clear()


class _Assembler(Protocol):
    def feed(self, chunk: dict[str, Any]) -> list[TextDelta]: ...
    def done(self) -> None: ...
    def finish(self) -> Turn: ...


@dataclass(frozen=True, slots=True)
class _Wire:
    """One wire format, as the model needs it."""

    label: str
    """The format's name, for error messages."""
    path: str
    build: Callable[[str, Sequence[Message], Sequence[ToolSpec], RequestOptions, bool], dict[str, Any]]
    parse: Callable[[dict[str, Any]], Turn]
    assembler: Callable[[], _Assembler]


_CHAT = _Wire(
    label="Chat Completions",
    path="/chat/completions",
    build=chat.build_request,
    parse=chat.parse_response,
    assembler=chat.ChatStreamAssembler,
)


class _Holdback:
    """Holds streamed text back while it may be JSON (a plan or a call written as text).

    Prose is released at its first visible character; text that opens like JSON stays held until
    the turn is complete, when the model decides whether it becomes calls or is shown after all.
    """

    __slots__ = ("_held", "live")

    def __init__(self) -> None:
        self._held: list[str] = []
        self.live = False

    def feed(self, text: str) -> list[TextDelta]:
        if self.live:
            return [TextDelta(text=text)]
        self._held.append(text)
        head = "".join(self._held).lstrip()
        if not head or head.startswith(("{", "[", "```", "<tool_call>")):
            return []
        if "```".startswith(head) or "<tool_call>".startswith(head):
            return []
        self.live = True
        released, self._held = "".join(self._held), []
        return [TextDelta(text=released)]


def _converted_text_calls(turn: Turn, names: frozenset[str]) -> Turn:
    """Turn calls the model wrote as text into real calls, when nothing else was called."""
    text = turn.message.text
    if turn.message.tool_calls or not text or not names:
        return turn
    found = jsonplan.find_text_tool_calls(text, names)
    if not found:
        return turn
    plan = jsonplan.extract_plan(text)
    calls = tuple(ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(found))
    reply = plan.reply if plan is not None and plan.is_call else None
    message = AssistantMessage(text=reply or None, tool_calls=calls)
    return dataclasses.replace(turn, message=message, finish_reason="text_tool_call")


def _read_plan(turn: Turn, names: frozenset[str], call_id: str) -> Turn:
    """Read a JSON-plan answer: a plan naming a tool becomes one call, anything else text."""
    text = turn.message.text or ""
    plan = jsonplan.extract_plan(text) if text.lstrip()[:1] in ("{", "`", "<") or names else None
    if plan is not None and plan.is_call and names:
        call = ToolCall(id=call_id, name=plan.name, arguments=plan.arguments)
        message = AssistantMessage(text=plan.reply or None, tool_calls=(call,))
    elif plan is not None:
        message = AssistantMessage(text=plan.reply or None)
    elif names and (found := jsonplan.find_text_tool_calls(text, names)):
        name, arguments = found[0]
        message = AssistantMessage(tool_calls=(ToolCall(id=call_id, name=name, arguments=arguments),))
    else:
        message = turn.message
    return dataclasses.replace(turn, message=message, route="jsonplan")


class OpenAIModel:
    """A model behind an OpenAI-compatible HTTP API.

    Args:
        model: The model name sent upstream.
        base_url: The API root, usually ending in `/v1`.
        api_key: Sent as a Bearer token when given.
        route: `chat` for native tool calls (falling back to the JSON plan when the endpoint
            refuses tools), `jsonplan` to always use the JSON plan.
        client: A shared client; when omitted one is created on first use and closed by `aclose`.
        timeout: Seconds for connecting and for each read.
        headers: Extra headers for every request.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        route: Literal["chat", "jsonplan"] = "chat",
        client: httpx2.AsyncClient | None = None,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"The base URL {base_url!r} is not an http(s) URL; set TOOLWIRE_BASE_URL to one."
            )
        if route not in ("chat", "jsonplan"):
            raise ConfigError(f"The route {route!r} is not known; use 'chat' or 'jsonplan'.")
        self._model = model
        self._base_url = base_url.rstrip("/")
        self._configured_route = route
        self._client = client
        self._owns_client = client is None
        self._timeout = timeout
        self._wire = _CHAT
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        if headers:
            self._headers.update(headers)

    @property
    def name(self) -> str:
        """The model's name, for traces."""
        return self._model

    @property
    def route(self) -> Literal["chat", "jsonplan"]:
        """The route requests take now: `jsonplan` when configured or after the endpoint refused tools."""
        if self._configured_route == "jsonplan" or (self._base_url, self._model) in _PLAN_ENDPOINTS:
            return "jsonplan"
        return "chat"

    async def request(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        """Ask for one whole turn."""
        names = frozenset(t.name for t in tools)
        if self.route == "chat":
            try:
                body = self._wire.build(self._model, transcript, tools, options, False)
                return _converted_text_calls(self._wire.parse(await self._post(body)), names)
            except ToolsUnsupportedError as exc:
                self._fall_back(exc)
        body = self._wire.build(
            self._model, jsonplan.render_transcript(transcript, tools), (), options, False
        )
        return _read_plan(self._wire.parse(await self._post(body)), names, _plan_id(transcript))

    async def stream(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        """Ask for one turn; yield its text as it arrives, then exactly one `TurnComplete`."""
        names = frozenset(t.name for t in tools)
        if self.route == "chat":
            body = self._wire.build(self._model, transcript, tools, options, True)
            started = False
            try:
                async for event in self._stream_converted(
                    body, lambda turn: _converted_text_calls(turn, names), hold=bool(names)
                ):
                    started = True
                    yield event
                return
            except ToolsUnsupportedError as exc:
                if started:  # cannot happen: the refusal comes before the body; never replay text
                    raise
                self._fall_back(exc)
        call_id = _plan_id(transcript)
        body = self._wire.build(self._model, jsonplan.render_transcript(transcript, tools), (), options, True)
        async for event in self._stream_converted(
            body, lambda turn: _read_plan(turn, names, call_id), hold=True
        ):
            yield event

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> OpenAIModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- transport ---------------------------------------------------------------------------

    @property
    def _url(self) -> str:
        return self._base_url + self._wire.path

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(self._timeout))
        return self._client

    def _fall_back(self, exc: ToolsUnsupportedError) -> None:
        _PLAN_ENDPOINTS.add((self._base_url, self._model))
        logger.warning("%s; using the JSON-plan route for this model from now on.", exc)

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body, ensure_ascii=False).encode()
        try:
            response = await self._http().post(self._url, content=payload, headers=self._headers)
        except httpx2.TransportError as exc:
            raise self._transport_error(exc) from exc
        if response.status_code >= 400:
            raise self._status_error(response.status_code, response.text, "tools" in body)
        try:
            data = json.loads(response.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ModelResponseError(
                f"The model endpoint at {self._url} answered with something other than a JSON object; "
                "check that TOOLWIRE_BASE_URL points at an OpenAI-compatible API."
            )
        return data

    async def _stream_turn(self, body: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        payload = json.dumps(body, ensure_ascii=False).encode()
        assembler = self._wire.assembler()
        decoder = SSEDecoder()
        try:
            async with self._http().stream(
                "POST", self._url, content=payload, headers=self._headers
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response.status_code, response.text, "tools" in body)
                async for line in response.aiter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    if event.data == "[DONE]":
                        assembler.done()
                        break
                    for delta in assembler.feed(self._chunk(event)):
                        yield delta
                else:
                    # Ended without [DONE]: a last event may lack its blank line. If it does not
                    # read, the stream was cut and `finish` says so.
                    last = decoder.flush()
                    if last is not None and last.data == "[DONE]":
                        assembler.done()
                    elif last is not None and _is_json(last.data):
                        for delta in assembler.feed(self._chunk(last)):
                            yield delta
        except httpx2.TransportError as exc:
            raise self._transport_error(exc) from exc
        yield TurnComplete(turn=assembler.finish())

    async def _stream_converted(
        self, body: dict[str, Any], convert: Callable[[Turn], Turn], *, hold: bool
    ) -> AsyncIterator[StreamEvent]:
        holdback = _Holdback() if hold else None
        async for event in self._stream_turn(body):
            if isinstance(event, TextDelta):
                for delta in holdback.feed(event.text) if holdback is not None else (event,):
                    yield delta
                continue
            turn = convert(event.turn)
            if holdback is not None and not holdback.live and turn.message.text:
                yield TextDelta(text=turn.message.text)  # the held text, or the plan's reply
            yield TurnComplete(turn=turn)

    def _chunk(self, event: SSEEvent) -> dict[str, Any]:
        try:
            chunk = json.loads(event.data)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            raise ModelResponseError(
                f"The model endpoint at {self._url} sent a stream event that is not a JSON object; "
                "check that TOOLWIRE_BASE_URL points at an OpenAI-compatible API."
            )
        return chunk

    def _transport_error(self, exc: httpx2.TransportError) -> ModelConnectionError:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout | httpx2.UnsupportedProtocol):
            return ModelConnectionError(
                f"Could not reach the model endpoint at {self._url}: {reason}; "
                "check TOOLWIRE_BASE_URL and that the server is running."
            )
        if isinstance(exc, httpx2.TimeoutException):
            return ModelConnectionError(
                f"The model endpoint at {self._url} did not answer within {self._timeout:g} s; "
                "raise the timeout or check the server's load."
            )
        return ModelConnectionError(
            f"The connection to the model endpoint at {self._url} broke mid-response ({reason}); "
            "retry the request."
        )

    def _status_error(self, status: int, text: str, sent_tools: bool) -> ModelHTTPError:
        message, code, param = _error_fields(text)
        body = text[:4000]
        if sent_tools and (
            (code == "unsupported_parameter" and param in ("tools", "tool_choice"))
            or any(s in message.lower() for s in _TOOLS_REFUSED)
        ):
            return ToolsUnsupportedError(
                f"The model {self._model!r} at {self._base_url} does not accept tools ({message}); "
                "use route='jsonplan' for it.",
                status_code=status,
                body=body,
            )
        if status == 405 or (status == 404 and "model" not in message.lower()):
            return RouteUnsupportedError(
                f"The endpoint {self._url} does not serve {self._wire.label} (HTTP {status}); "
                "check TOOLWIRE_BASE_URL, which usually ends in /v1.",
                status_code=status,
                body=body,
            )
        return ModelHTTPError(
            f"The model endpoint at {self._url} answered HTTP {status} ({message}); {_advice(status)}.",
            status_code=status,
            body=body,
        )


def _plan_id(transcript: Sequence[Message]) -> str:
    # Stable and unique within a run: the plan call of the n-th assistant turn.
    return f"plan_{1 + sum(isinstance(m, AssistantMessage) for m in transcript)}"


def _is_json(data: str) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _error_fields(text: str) -> tuple[str, Any, Any]:
    """(message, code, param) of an error body, in OpenAI's shape or the older flat one."""
    try:
        payload = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "no body", None, None
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        return (
            str(error.get("message") or error.get("detail") or text[:300]),
            error.get("code"),
            error.get("param"),
        )
    return str(error)[:300], None, None


def _advice(status: int) -> str:
    if status in (401, 403):
        return "check the API key (TOOLWIRE_API_KEY) and its permissions"
    if status == 404:
        return "check the model name and TOOLWIRE_BASE_URL"
    if status == 429:
        return "wait and retry, or raise the endpoint's rate limit"
    if status >= 500:
        return "retry later, or check the endpoint's logs"
    return "check the request settings against what the endpoint supports"
