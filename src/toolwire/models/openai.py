"""Any OpenAI-compatible endpoint as a `Model`: OpenAI, Azure, vLLM, llama.cpp, Ollama, LiteLLM...

One pooled `httpx2.AsyncClient` carries every request; the wire adapters build and read plain
JSON, so no second object model sits in the hot path. A wire format is a small `_Wire` strategy
(path, request builder, response parser, stream assembler): Chat Completions and Responses.

Routes (`toolwire.models.routes` decides, this module switches): `chat` and `responses` use one
wire; `auto` starts on Chat Completions and, when the endpoint does not serve a route, moves to the
other one for the same model, schema and tools, remembered for the endpoint; `jsonplan` layers the JSON
plan on a wire: the tools go into the system prompt, no `tools` are sent, and the plan in the
answer becomes a `ToolCall` for the Gate. The plan is also used, for the rest of the process, for
an endpoint that answered that the model does not support tools. A tool call the model wrote as
text is turned into a real call too.

On Responses the exchange is stateless by default: earlier output items and results are resent.
With `stateful=True` a request that continues a turn this model received sends
`previous_response_id` and only the new items; a stored response the endpoint no longer knows is
retried statelessly once. The module is a little over 400 lines because the transport's error
mapping (one actionable sentence per failure) lives next to the transport that meets them.
"""

from __future__ import annotations

import functools
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
from toolwire.messages import Message, ToolSpec, Turn
from toolwire.models import routes
from toolwire.models.base import RequestOptions, StreamEvent, TextDelta, TurnComplete
from toolwire.models.routes import clear_route_memory
from toolwire.wire import chat, jsonplan, responses
from toolwire.wire.sse import SSEDecoder, SSEEvent

__all__ = ["OpenAIModel", "clear_route_memory"]

logger = logging.getLogger(__name__)


class _Assembler(Protocol):
    def feed(self, chunk: dict[str, Any]) -> list[TextDelta]: ...
    def done(self) -> None: ...
    def finish(self) -> Turn: ...


@dataclass(frozen=True, slots=True)
class _Wire:
    """One wire format, as the model needs it."""

    route: routes.WireRoute
    label: str
    """The format's name, for error messages."""
    path: str
    build: Callable[[str, Sequence[Message], Sequence[ToolSpec], RequestOptions, bool], dict[str, Any]]
    parse: Callable[[dict[str, Any]], Turn]
    assembler: Callable[[], _Assembler]


_WIRES: dict[routes.WireRoute, _Wire] = {
    "chat": _Wire(
        route="chat",
        label="Chat Completions",
        path="/chat/completions",
        build=chat.build_request,
        parse=chat.parse_response,
        assembler=chat.ChatStreamAssembler,
    ),
    "responses": _Wire(
        route="responses",
        label="Responses",
        path="/responses",
        build=responses.build_request,
        parse=responses.parse_response,
        assembler=responses.ResponsesStreamAssembler,
    ),
}

_Convert = Callable[[Turn], Turn]
_Remember = Callable[[Turn, str | None], None]


class OpenAIModel:
    """A model behind an OpenAI-compatible HTTP API.

    Args:
        model: The model name sent upstream.
        base_url: The API root, usually ending in `/v1`.
        api_key: Sent as a Bearer token when given.
        route: `chat` (Chat Completions) or `responses` for native tool calls on that wire,
            `auto` for Chat Completions with a fallback to Responses when the endpoint does not
            serve Chat Completions (for this model), `jsonplan` to always use the JSON plan.
            Every native route falls back to the JSON plan when the endpoint refuses tools.
        stateful: On Responses, continue a stored response with `previous_response_id` instead of
            resending the conversation. Use it only where the endpoint stores responses.
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
        route: routes.ConfiguredRoute = "chat",
        stateful: bool = False,
        client: httpx2.AsyncClient | None = None,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"The base URL {base_url!r} is not an http(s) URL; set TOOLWIRE_BASE_URL to one."
            )
        if route not in routes.ROUTES:
            raise ConfigError(
                f"The route {route!r} is not known; use 'auto', 'responses', 'chat' or 'jsonplan'."
            )
        self._model = model
        self._base_url = base_url.rstrip("/")
        self._endpoint: routes.Endpoint = (self._base_url, model)
        self._configured_route: routes.ConfiguredRoute = route
        self._chain = routes.ResponseChain() if stateful else None
        self._client = client
        self._owns_client = client is None
        self._timeout = timeout
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
    def route(self) -> Literal["chat", "responses", "jsonplan"]:
        """The route requests take now: the wire in use, or `jsonplan` (configured or after a refusal)."""
        if self._configured_route == "jsonplan" or routes.uses_plan(self._endpoint):
            return "jsonplan"
        return routes.wire_route(self._endpoint, self._configured_route)

    async def request(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> Turn:
        """Ask for one whole turn."""
        names = frozenset(t.name for t in tools)
        while True:
            wire = self._wire()
            try:
                if self.route != "jsonplan":
                    try:
                        return await self._native(wire, transcript, tools, options, names)
                    except ToolsUnsupportedError as exc:
                        self._fall_back(exc)
                plan = wire.build(
                    self._model, jsonplan.render_transcript(transcript, tools), (), options, False
                )
                turn = wire.parse(await self._post(wire, plan))
                return routes.read_plan(turn, names, routes.plan_call_id(transcript))
            except RouteUnsupportedError as exc:
                self._switch(wire, exc)

    async def stream(
        self, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        """Ask for one turn; yield its text as it arrives, then exactly one `TurnComplete`."""
        while True:
            wire = self._wire()
            started = False
            try:
                async for event in self._stream_on(wire, transcript, tools, options):
                    started = True
                    yield event
                return
            except RouteUnsupportedError as exc:
                if started:  # cannot happen: the refusal comes before the body; never replay text
                    raise
                self._switch(wire, exc)

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> OpenAIModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- routes ----------------------------------------------------------------------------------

    def _wire(self) -> _Wire:
        return _WIRES[routes.wire_route(self._endpoint, self._configured_route)]

    def _fall_back(self, exc: ToolsUnsupportedError) -> None:
        routes.remember_plan(self._endpoint)
        logger.warning("%s; using the JSON-plan route for this model from now on.", exc)

    def _switch(self, wire: _Wire, exc: RouteUnsupportedError) -> None:
        """Move `auto` to the other wire after `exc`, or raise it when there is none to move to."""
        if self._configured_route != "auto":
            raise exc
        other = routes.switch_route(self._endpoint, wire.route)
        if other is None:
            raise RouteUnsupportedError(
                f"The endpoint at {self._base_url} serves neither Responses nor Chat Completions "
                f"(HTTP {exc.status_code}); check TOOLWIRE_BASE_URL, which usually ends in /v1.",
                status_code=exc.status_code,
                body=exc.body,
            ) from exc
        logger.warning(
            "The endpoint at %s does not serve %s for %r (HTTP %s); route 'auto' uses %s from now on.",
            *(self._base_url, wire.label, self._model, exc.status_code, _WIRES[other].label),
        )

    async def _native(
        self,
        wire: _Wire,
        transcript: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: RequestOptions,
        names: frozenset[str],
    ) -> Turn:
        chain = self._chain if wire.route == "responses" else None
        previous = chain.previous(transcript) if chain is not None else None
        try:
            data = await self._post(wire, self._build(wire, transcript, tools, options, False, previous))
        except ModelHTTPError as exc:
            if chain is None or previous is None or not routes.stale_response_error(exc):
                raise
            chain.forget(previous)
            data = await self._post(wire, self._build(wire, transcript, tools, options, False, None))
        turn = wire.parse(data)
        if chain is not None:
            chain.remember(transcript, turn, responses.response_id(data))
        return routes.converted_text_calls(turn, names)

    async def _stream_on(
        self, wire: _Wire, transcript: Sequence[Message], tools: Sequence[ToolSpec], options: RequestOptions
    ) -> AsyncIterator[StreamEvent]:
        """Stream one turn on `wire`: natively, or through the JSON plan when tools are refused."""
        names = frozenset(t.name for t in tools)
        if self.route != "jsonplan":
            started = False
            try:
                async for event in self._stream_native(wire, transcript, tools, options, names):
                    started = True
                    yield event
                return
            except ToolsUnsupportedError as exc:
                if started:
                    raise
                self._fall_back(exc)
        call_id = routes.plan_call_id(transcript)
        body = wire.build(self._model, jsonplan.render_transcript(transcript, tools), (), options, True)
        async for event in self._stream_converted(
            wire, body, lambda turn: routes.read_plan(turn, names, call_id), hold=True
        ):
            yield event

    async def _stream_native(
        self,
        wire: _Wire,
        transcript: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: RequestOptions,
        names: frozenset[str],
    ) -> AsyncIterator[StreamEvent]:
        def convert(turn: Turn) -> Turn:
            return routes.converted_text_calls(turn, names)

        chain = self._chain if wire.route == "responses" else None
        remember = functools.partial(chain.remember, transcript) if chain is not None else None
        previous = chain.previous(transcript) if chain is not None else None
        started = False
        try:
            body = self._build(wire, transcript, tools, options, True, previous)
            async for event in self._stream_converted(
                wire, body, convert, hold=bool(names), remember=remember
            ):
                started = True
                yield event
            return
        except ModelHTTPError as exc:
            if chain is None or previous is None or started or not routes.stale_response_error(exc):
                raise
            chain.forget(previous)
        body = self._build(wire, transcript, tools, options, True, None)
        async for event in self._stream_converted(wire, body, convert, hold=bool(names), remember=remember):
            yield event

    def _build(
        self,
        wire: _Wire,
        transcript: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: RequestOptions,
        stream: bool,
        previous: str | None,
    ) -> dict[str, Any]:
        if previous is not None:  # only ever found on Responses
            return responses.build_request(
                self._model, transcript, tools, options, stream, previous_response_id=previous
            )
        return wire.build(self._model, transcript, tools, options, stream)

    # --- transport ---------------------------------------------------------------------------

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(self._timeout))
        return self._client

    async def _post(self, wire: _Wire, body: dict[str, Any]) -> dict[str, Any]:
        url = self._base_url + wire.path
        payload = json.dumps(body, ensure_ascii=False).encode()
        try:
            response = await self._http().post(url, content=payload, headers=self._headers)
        except httpx2.TransportError as exc:
            raise self._transport_error(url, exc) from exc
        if response.status_code >= 400:
            raise self._status_error(wire, response.status_code, response.text, "tools" in body)
        try:
            data = json.loads(response.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ModelResponseError(
                f"The model endpoint at {url} answered with something other than a JSON object; "
                "check that TOOLWIRE_BASE_URL points at an OpenAI-compatible API."
            )
        return data

    async def _stream_turn(
        self, wire: _Wire, body: dict[str, Any], remember: _Remember | None
    ) -> AsyncIterator[StreamEvent]:
        url = self._base_url + wire.path
        payload = json.dumps(body, ensure_ascii=False).encode()
        assembler = wire.assembler()
        decoder = SSEDecoder()
        try:
            async with self._http().stream("POST", url, content=payload, headers=self._headers) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(wire, response.status_code, response.text, "tools" in body)
                finished = False
                async for line in response.aiter_lines():
                    # After [DONE] the body is still read to its end (not `break`): a response
                    # left unread closes its connection, and every streamed request would pay a
                    # new TCP handshake.
                    event = None if finished else decoder.feed(line)
                    if event is None:
                        continue
                    if event.data == "[DONE]":
                        assembler.done()
                        finished = True
                        continue
                    for delta in assembler.feed(_chunk(url, event)):
                        yield delta
                if not finished:
                    # Ended without [DONE]: a last event may lack its blank line. If it does not
                    # read, the stream was cut and `finish` says so.
                    last = decoder.flush()
                    if last is not None and last.data == "[DONE]":
                        assembler.done()
                    elif last is not None and _is_json(last.data):
                        for delta in assembler.feed(_chunk(url, last)):
                            yield delta
        except httpx2.TransportError as exc:
            raise self._transport_error(url, exc) from exc
        turn = assembler.finish()
        if remember is not None:
            remember(turn, getattr(assembler, "response_id", None))
        yield TurnComplete(turn=turn)

    async def _stream_converted(
        self,
        wire: _Wire,
        body: dict[str, Any],
        convert: _Convert,
        *,
        hold: bool,
        remember: _Remember | None = None,
    ) -> AsyncIterator[StreamEvent]:
        holdback = routes.Holdback() if hold else None
        async for event in self._stream_turn(wire, body, remember):
            if isinstance(event, TextDelta):
                for delta in holdback.feed(event.text) if holdback is not None else (event,):
                    yield delta
                continue
            turn = convert(event.turn)
            if holdback is not None and not holdback.live and turn.message.text:
                yield TextDelta(text=turn.message.text)  # the held text, or the plan's reply
            yield TurnComplete(turn=turn)

    def _transport_error(self, url: str, exc: httpx2.TransportError) -> ModelConnectionError:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout | httpx2.UnsupportedProtocol):
            return ModelConnectionError(
                f"Could not reach the model endpoint at {url}: {reason}; "
                "check TOOLWIRE_BASE_URL and that the server is running."
            )
        if isinstance(exc, httpx2.TimeoutException):
            return ModelConnectionError(
                f"The model endpoint at {url} did not answer within {self._timeout:g} s; "
                "raise the timeout or check the server's load."
            )
        return ModelConnectionError(
            f"The connection to the model endpoint at {url} broke mid-response ({reason}); retry the request."
        )

    def _status_error(self, wire: _Wire, status: int, text: str, sent_tools: bool) -> ModelHTTPError:
        return routes.http_error(
            model=self._model,
            base_url=self._base_url,
            route=wire.route,
            status=status,
            text=text,
            sent_tools=sent_tools,
        )


def _is_json(data: str) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _chunk(url: str, event: SSEEvent) -> dict[str, Any]:
    try:
        chunk = json.loads(event.data)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise ModelResponseError(
            f"The model endpoint at {url} sent a stream event that is not a JSON object; "
            "check that TOOLWIRE_BASE_URL points at an OpenAI-compatible API."
        )
    return chunk
