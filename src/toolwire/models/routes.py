"""Which route a request to an OpenAI-compatible endpoint takes, and what the process remembers.

A route is a wire format (`chat` or `responses`) or the JSON plan layered on one. Two fallbacks
switch routes, each remembered for an endpoint (a base URL and a model name, because gateways and
OpenAI itself serve routes per model) for the rest of the process, so only the first request pays
for the probe:

- An endpoint that refuses `tools` for a model moves that model to the JSON plan.
- With `route="auto"`, an endpoint that does not serve a wire route (404/405/501, or a 400 or 404
  whose message says so) moves the model to the other wire, for the same model name, schema and
  tools. Chat Completions is tried first: an OpenAI-compatible family stays on it until shown
  otherwise, and nearly every compatible server speaks it; Responses takes over for endpoints and
  models that serve only Responses.

This module decides from status codes and error bodies; the model (`toolwire.models.openai`) does
the switching. The JSON plan's reading of a turn lives here too: it is the fallback route's half
of the model.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

from toolwire.exceptions import ModelHTTPError, RouteUnsupportedError, ToolsUnsupportedError
from toolwire.messages import AssistantMessage, Message, TextDelta, ToolCall, Turn
from toolwire.wire import jsonplan

__all__ = [
    "AUTO_ORDER",
    "ROUTES",
    "ConfiguredRoute",
    "Endpoint",
    "Holdback",
    "ResponseChain",
    "WireRoute",
    "advice",
    "clear_route_memory",
    "converted_text_calls",
    "error_fields",
    "http_error",
    "plan_call_id",
    "read_plan",
    "refuses_tools",
    "remember_plan",
    "route_unserved",
    "stale_response",
    "stale_response_error",
    "switch_route",
    "uses_plan",
    "wire_route",
]

logger = logging.getLogger(__name__)

WireRoute = Literal["chat", "responses"]
"""A wire format the model can speak."""
ConfiguredRoute = Literal["chat", "responses", "auto", "jsonplan"]
"""What a user can configure: one wire, `auto` (either, with fallback), or the JSON plan."""
ROUTES: tuple[ConfiguredRoute, ...] = ("chat", "responses", "auto", "jsonplan")
"""Every configurable route."""
Endpoint = tuple[str, str]
"""(base URL, model name): what route memory is kept for."""
AUTO_ORDER: tuple[WireRoute, WireRoute] = ("chat", "responses")
"""The wires `auto` tries, in order."""

_PLAN: set[Endpoint] = set()
"""Endpoints that refused `tools`: they use the JSON plan for the rest of the process."""
_UNSERVED: dict[Endpoint, set[WireRoute]] = {}
"""Wire routes an endpoint answered it does not serve, as `auto` found out."""

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

_ROUTE_REFUSED = re.compile(
    r"invalid url|unrecognized request url|(?:unknown|unsupported) (?:endpoint|route|url)"
    r"|(?:responses api|/responses|chat completions|chat/completions)\b.*"
    r"\b(?:not supported|unsupported|not available|not enabled|not implemented)"
    r"|does ?n[o']t support (?:the )?(?:responses|chat completions)"
    r"|(?:only|not) supported (?:in|on|by) (?:the )?(?:/?v1/)?(?:responses|chat)"
)
"""How a 400 or 404 says the route itself is not served, for the server or for this model
("This model is only supported in v1/responses and not in v1/chat/completions.")."""

_STATE_NOT_FOUND = ("response with id", "previous response", "item with id")
"""Not-found messages about stored state: the route is served, the state is gone."""


def clear_route_memory(*, base_url: str | None = None, model: str | None = None) -> None:
    """Forget every route switch, or only those of one base URL and/or model.

    Args:
        base_url: Forget only endpoints with this base URL (as given to the model, without a
            trailing slash).
        model: Forget only endpoints for this model name.
    """
    for endpoint in [*_PLAN, *_UNSERVED]:
        if (base_url is None or endpoint[0] == base_url.rstrip("/")) and model in (None, endpoint[1]):
            _PLAN.discard(endpoint)
            _UNSERVED.pop(endpoint, None)


def uses_plan(endpoint: Endpoint) -> bool:
    """Whether the endpoint refused `tools` earlier in this process."""
    return endpoint in _PLAN


def remember_plan(endpoint: Endpoint) -> None:
    """Send the endpoint's requests through the JSON plan from now on."""
    _PLAN.add(endpoint)


def wire_route(endpoint: Endpoint, configured: ConfiguredRoute) -> WireRoute:
    """The wire a request takes now: the configured one, or for `auto` the first one not refused."""
    if configured in ("chat", "responses"):
        return configured
    if configured == "jsonplan":
        return "chat"
    unserved = _UNSERVED.get(endpoint, set())
    return next((route for route in AUTO_ORDER if route not in unserved), AUTO_ORDER[0])


def switch_route(endpoint: Endpoint, failed: WireRoute) -> WireRoute | None:
    """Record that `endpoint` does not serve `failed`; return the wire `auto` tries next.

    Returns:
        The other wire, or `None` when the endpoint refused that one as well; then the memory of
        the endpoint is cleared, so a later request probes again rather than failing unasked.
    """
    unserved = _UNSERVED.setdefault(endpoint, set())
    unserved.add(failed)
    other: WireRoute = "chat" if failed == "responses" else "responses"
    if other in unserved:
        del _UNSERVED[endpoint]
        return None
    return other


def error_fields(text: str) -> tuple[str, Any, Any]:
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


def refuses_tools(message: str, code: Any, param: Any) -> bool:
    """Whether an error says the model does not accept `tools`."""
    if code == "unsupported_parameter" and param in ("tools", "tool_choice"):
        return True
    lowered = message.lower()
    return any(s in lowered for s in _TOOLS_REFUSED)


def stale_response(status: int, message: str, code: Any) -> bool:
    """Whether an error says a `previous_response_id` (or an item it names) is not stored."""
    if code == "previous_response_not_found":
        return True
    lowered = message.lower()
    return status in (400, 404) and "not found" in lowered and any(s in lowered for s in _STATE_NOT_FOUND)


def route_unserved(status: int, message: str, code: Any) -> bool:
    """Whether an error says the endpoint does not serve the wire route it was sent to.

    405 and 501 do; 404 does unless it speaks of a model or of stored state; a 400 or a 404 about a
    model does when its message says the route, endpoint or URL is unknown or unsupported.
    """
    lowered = message.lower()
    if stale_response(status, message, code):
        return False
    if status in (405, 501):
        return True
    if status in (400, 404) and _ROUTE_REFUSED.search(lowered) is not None:
        return True
    return status == 404 and "model" not in lowered


def advice(status: int) -> str:
    """What to do about an HTTP error status, as the end of a sentence."""
    if status in (401, 403):
        return "check the API key (TOOLWIRE_API_KEY) and its permissions"
    if status == 404:
        return "check the model name and TOOLWIRE_BASE_URL"
    if status == 429:
        return "wait and retry, or raise the endpoint's rate limit"
    if status >= 500:
        return "retry later, or check the endpoint's logs"
    return "check the request settings against what the endpoint supports"


def http_error(
    *, model: str, base_url: str, route: WireRoute, status: int, text: str, sent_tools: bool
) -> ModelHTTPError:
    """The exception for an HTTP error status: the fallbacks' two, or a plain `ModelHTTPError`.

    Args:
        model: The model name the request was for.
        base_url: The endpoint's API root.
        route: The wire the request was sent on.
        status: The HTTP status.
        text: The response body.
        sent_tools: Whether the request offered tools (only then can it be refused for them).
    """
    message, code, param = error_fields(text)
    label, other = (
        ("Responses", "Chat Completions") if route == "responses" else ("Chat Completions", "Responses")
    )
    url, body = base_url + ("/responses" if route == "responses" else "/chat/completions"), text[:4000]
    if sent_tools and refuses_tools(message, code, param):
        return ToolsUnsupportedError(
            f"The model {model!r} at {base_url} does not accept tools ({message}); "
            "use route='jsonplan' for it.",
            status_code=status,
            body=body,
        )
    if route_unserved(status, message, code):
        return RouteUnsupportedError(
            f"The endpoint {url} does not serve {label} (HTTP {status}); use route='auto' to fall back "
            f"to {other}, or check TOOLWIRE_BASE_URL, which usually ends in /v1.",
            status_code=status,
            body=body,
        )
    return ModelHTTPError(
        f"The model endpoint at {url} answered HTTP {status} ({message}); {advice(status)}.",
        status_code=status,
        body=body,
    )


def stale_response_error(exc: ModelHTTPError) -> bool:
    """Whether `exc` says a `previous_response_id` is not stored (any more)."""
    message, code, _ = error_fields(exc.body)
    return stale_response(exc.status_code, message, code)


class ResponseChain:
    """The Responses ids a stateful model received, by the conversation that led to each.

    A conversation that continues a remembered turn can send `previous_response_id` and only the
    new items. The key is the transcript up to and including the turn exactly as received: a turn
    the runner or the text-call conversion changed no longer matches, and is resent statelessly.

    Args:
        size: How many responses to keep; the oldest is forgotten first.
    """

    def __init__(self, size: int = 64) -> None:
        self._ids: OrderedDict[tuple[Message, ...], str] = OrderedDict()
        self._size = size

    def previous(self, transcript: Sequence[Message]) -> str | None:
        """The response whose turn is the transcript's last assistant turn, if remembered."""
        last = max((i for i, m in enumerate(transcript) if isinstance(m, AssistantMessage)), default=-1)
        return self._ids.get(tuple(transcript[: last + 1])) if last >= 0 else None

    def remember(self, transcript: Sequence[Message], turn: Turn, response_id: str | None) -> None:
        """Remember the response that answered `transcript` with `turn`."""
        if response_id:
            self._ids[(*transcript, turn.message)] = response_id
            while len(self._ids) > self._size:
                self._ids.popitem(last=False)

    def forget(self, response_id: str) -> None:
        """Forget a response the endpoint no longer stores."""
        for key in [k for k, v in self._ids.items() if v == response_id]:
            del self._ids[key]
        logger.warning("The endpoint no longer stores response %s; resending the conversation.", response_id)


# --- the JSON plan, and calls written as text -----------------------------------------------------


class Holdback:
    """Holds streamed text back while it may be JSON (a plan or a call written as text).

    Prose is released at its first visible character; text that opens like JSON stays held until
    the turn is complete, when the model decides whether it becomes calls or is shown after all.
    """

    __slots__ = ("_held", "live")

    def __init__(self) -> None:
        self._held: list[str] = []
        self.live = False
        """Whether text is being passed through as it arrives."""

    def feed(self, text: str) -> list[TextDelta]:
        """Take a piece of text; return what can be shown now."""
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


def converted_text_calls(turn: Turn, names: frozenset[str]) -> Turn:
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


def read_plan(turn: Turn, names: frozenset[str], call_id: str) -> Turn:
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


def plan_call_id(transcript: Sequence[Message]) -> str:
    """The id of a JSON-plan call: stable and unique within a run (the n-th assistant turn's)."""
    return f"plan_{1 + sum(isinstance(m, AssistantMessage) for m in transcript)}"
