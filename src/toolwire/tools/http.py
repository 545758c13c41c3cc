"""HTTP functions (seed 001): a definition bound to a connection, checked when saved, run as a Tool.

A `FunctionDefinition` is what the model is offered (name, description, JSON Schema of the
arguments) plus an `http_request_body` template whose string leaves may be `$name` placeholders.
A `Connection` fixes what the model can never change: scheme, host, path prefix, method and auth.
Arguments reach the request in three ways only: as placeholder values in the body (their JSON type
kept), as URL-encoded `{name}` path placeholders, and as the query string (every argument used in
neither, which for GET is all of them). Arguments never become headers.

Two small additions to the seed, needed to import an OpenAPI document onto one connection: a
definition may carry a `path` appended to the connection's URL and a `method` that replaces the
connection's. Both are set by an administrator, never by the model.

The save-time checks live in `_http_check`, sending and reading in `_http_send`.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, urlsplit

import httpx2

from toolwire.context import Context
from toolwire.exceptions import ToolDefinitionError
from toolwire.gate.redact import REDACTED
from toolwire.tools._http_check import (
    METHODS,
    PATH_PLACEHOLDER,
    PLACEHOLDER,
    Method,
    Problem,
    placeholders,
    placement_problems,
    properties_of,
    schema_problems,
    url_problems,
)
from toolwire.tools._http_send import DEFAULT_MAX_RESPONSE_BYTES, MAX_TRIES, Fence, Sender, UpstreamError
from toolwire.tools.auth import AuthConfig, ConnectionAuth, connection_auth
from toolwire.tools.base import ArgumentError, Tool, validate_tool_name

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "METHODS",
    "ArgumentError",
    "Connection",
    "DefinitionError",
    "FunctionDefinition",
    "Method",
    "PreparedRequest",
    "UpstreamError",
    "http_tool",
    "http_tools",
    "prepare",
    "render_body",
]

_MISSING: Final = object()


class DefinitionError(ToolDefinitionError):
    """A function definition or connection that cannot be saved; names the JSON path of each problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        """Each problem as `(json path, what to do)`."""
        super().__init__("; ".join(f"{path}: {what}" for path, what in self.problems) + ".")


@dataclass(kw_only=True, frozen=True)
class Connection:
    """Where and how HTTP functions call an API: URL, method, auth, timeout."""

    name: str
    url: str
    """The request URL; `{name}` placeholders may appear in its path only."""
    method: Method = "GET"
    auth: AuthConfig = field(default_factory=AuthConfig)
    timeout: float = 10.0
    """Seconds for connecting and for each read of one attempt."""

    def problems(self) -> list[Problem]:
        """What is wrong with this connection, as `(json path, what to do)` pairs."""
        found = url_problems(self.url, "url")
        if not self.name.strip():
            found.insert(0, ("name", "give the connection a name"))
        if self.method not in METHODS:
            found.append(("method", f"use one of {', '.join(METHODS)}"))
        if not self.timeout > 0:
            found.append(("timeout", "give a positive number of seconds"))
        return found + self.auth.problems("auth")

    def validate(self) -> None:
        """Raise `DefinitionError` naming every problem, if there is one."""
        if problems := self.problems():
            raise DefinitionError(problems)


@dataclass(kw_only=True, frozen=True)
class FunctionDefinition:
    """A function the model may call, bound to exactly one connection by name."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object (`properties`, `required`, `additionalProperties`)."""
    connection: str
    strict: bool | None = None
    http_request_body: dict[str, Any] | None = None
    """Body template for POST/PUT/PATCH; a string leaf `"$name"` is replaced by that argument."""
    method: Method | None = None
    """Replaces the connection's method (an OpenAPI operation's own method)."""
    path: str = ""
    """Appended to the connection's URL (an OpenAPI operation's path); may hold `{name}`."""

    @classmethod
    def from_json(
        cls, *, name: str, description: str, definition: Mapping[str, Any], connection: str
    ) -> FunctionDefinition:
        """Build from the seed's JSON definition (`strict`, `parameters`, `http_request_body`)."""
        return cls(
            name=name,
            description=description,
            parameters=dict(definition.get("parameters") or {}),
            connection=connection,
            strict=definition.get("strict"),
            http_request_body=definition.get("http_request_body"),
            method=definition.get("method"),
            path=definition.get("path", ""),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON definition, as `from_json` reads it."""
        out: dict[str, Any] = {"strict": self.strict, "parameters": self.parameters}
        if self.http_request_body is not None:
            out["http_request_body"] = self.http_request_body
        if self.method is not None:
            out["method"] = self.method
        if self.path:
            out["path"] = self.path
        return out

    def method_for(self, connection: Connection) -> Method:
        """The method a call sends: this definition's own, else the connection's."""
        return self.method or connection.method

    def validate(self, connection: Connection) -> None:
        """Check the definition against its connection, as it is saved.

        Raises:
            DefinitionError: every problem found, each with its JSON path, e.g.
                `http_request_body.fields.project.key: placeholder $project_key has no parameter`.
        """
        found: list[Problem] = []
        try:
            validate_tool_name(self.name)
        except ToolDefinitionError as exc:
            found.append(("name", str(exc).rstrip(".")))
        if not self.description.strip():
            found.append(("description", "say what the function does and when to use it"))
        if self.connection != connection.name:
            found.append(("connection", f"the definition names {self.connection!r}, not {connection.name!r}"))
        found += [(f"connection.{path}", what) for path, what in connection.problems()]
        found += schema_problems(self.parameters, self.strict)
        found += placement_problems(self, connection, properties_of(self.parameters))
        if found:
            raise DefinitionError(found)


def render_body(template: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Fill a body template: each `"$name"` leaf takes the argument's JSON value, type kept.

    A placeholder whose argument was not given is removed with its key, and an object left empty
    by such removals is removed too, so the API never receives the literal text `"$description"`.
    """

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            kept = {
                key: value for key, value in ((k, fill(v)) for k, v in node.items()) if value is not _MISSING
            }
            return _MISSING if node and not kept else kept
        if isinstance(node, str) and (match := PLACEHOLDER.match(node)):
            return json.loads(json.dumps(arguments[match[1]])) if match[1] in arguments else _MISSING
        return node

    filled = fill(template)
    return filled if isinstance(filled, dict) else {}


@dataclass(kw_only=True, frozen=True)
class PreparedRequest:
    """The request a call would send, for display: credentials shown as `[redacted]`."""

    method: Method
    url: str
    headers: dict[str, str]
    body: dict[str, Any] | None = None
    """The JSON body, or `None` for GET."""


@dataclass(kw_only=True, frozen=True)
class _Resolved:
    method: Method
    url: httpx2.URL
    headers: dict[str, str]
    body: dict[str, Any] | None
    content: bytes | None
    fence: Fence
    """The connection's path prefix: every URL of this call, redirects included, stays below it."""


def _path_value(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ArgumentError(f"Argument {name!r} fills a URL path segment: give a string or an integer.")
    text = str(value)
    if text in ("", ".", ".."):
        raise ArgumentError(f"Argument {name!r} fills a URL path segment: {text!r} is not a usable value.")
    # Every reserved character is escaped, `/` included, so the value stays inside its segment.
    return quote(text, safe="")


def _query_value(value: Any) -> str | list[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value):
        return [v if isinstance(v, str) else json.dumps(v) for v in value]
    return json.dumps(value, ensure_ascii=False)


def _resolve(
    definition: FunctionDefinition, connection: Connection, arguments: Mapping[str, Any]
) -> _Resolved:
    """Build the request a call sends, without its auth; raise `ArgumentError` for unusable values."""
    method = definition.method_for(connection)
    parts = urlsplit(connection.url)
    template = (parts.path.rstrip("/") if definition.path else parts.path) + definition.path
    origin = f"{parts.scheme}://{parts.netloc}"
    path_names = set(PATH_PLACEHOLDER.findall(template))
    path = PATH_PLACEHOLDER.sub(lambda m: _path_value(m[1], arguments.get(m[1])), template)
    base = httpx2.URL(origin + (path or "/") + (f"?{parts.query}" if parts.query else ""))
    body_names = placeholders(definition.http_request_body) if definition.http_request_body else set()
    query = {
        name: _query_value(value)
        for name, value in arguments.items()
        if name not in path_names | body_names and value is not None
    }
    url = base.copy_merge_params(query) if query else base
    fence = Fence.of(origin, parts.path)
    # Checked against the whole path template too: arguments fill placeholders and nothing else.
    if not (Fence.of(origin, template).admits(url) and fence.admits(url)):
        raise ArgumentError("The arguments would change the URL's host or path prefix; nothing was sent.")
    headers = {"Accept": "application/json, text/*;q=0.9", "User-Agent": "toolwire"}
    body = content = None
    if method != "GET":
        body = render_body(definition.http_request_body or {}, arguments)
        try:
            content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
        except ValueError:
            raise ArgumentError(
                "An argument is NaN or Infinity, which JSON cannot carry; give a number."
            ) from None
        headers["Content-Type"] = "application/json"
    return _Resolved(method=method, url=url, headers=headers, body=body, content=content, fence=fence)


def prepare(
    definition: FunctionDefinition, connection: Connection, arguments: Mapping[str, Any]
) -> PreparedRequest:
    """Show the request a call with `arguments` would send, credentials masked; nothing is sent.

    Raises:
        ArgumentError: an argument cannot be placed in the request.
    """
    resolved = _resolve(definition, connection, arguments)
    url = str(resolved.url)
    for name in connection.auth.masked_params():
        marker = "TOOLWIRE-MASKED-CREDENTIAL"
        url = str(resolved.url.copy_set_param(name, marker)).replace(marker, REDACTED)
    return PreparedRequest(
        method=resolved.method,
        url=url,
        headers={**resolved.headers, **connection.auth.masked_headers()},
        body=resolved.body,
    )


class _HttpCall:
    """The handler of an HTTP function's Tool: resolve, send, read."""

    def __init__(self, definition: FunctionDefinition, connection: Connection, sender: Sender) -> None:
        self.definition = definition
        self.connection = connection
        self.sender = sender

    async def __call__(self, arguments: dict[str, Any], context: Context) -> str:
        resolved = _resolve(self.definition, self.connection, arguments)
        headers = dict(resolved.headers)
        key = context.extra.get("idempotency_key")
        if resolved.method != "GET" and isinstance(key, str) and key:
            # The API can then deduplicate a write that is sent again after a failure.
            headers["Idempotency-Key"] = key
        request = httpx2.Request(resolved.method, resolved.url, headers=headers, content=resolved.content)
        return await self.sender.send(request, allowed=resolved.fence.admits)


def http_tool(
    definition: FunctionDefinition,
    connection: Connection,
    *,
    client: httpx2.AsyncClient,
    auth: ConnectionAuth | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    retry_backoff: float = 0.2,
) -> Tool:
    """The Tool that calls `definition` through `connection`.

    Args:
        definition: The function; it is validated against the connection first.
        connection: The connection the function is bound to.
        client: The one pooled client all HTTP functions share. Requests are built without its
            cookies or default headers, and never follow redirects on their own.
        auth: The connection's auth flow, shared by every function of the connection so the OAuth2
            token cache is shared; built from the connection when not given.
        max_response_bytes: Longer responses are cut, with a marker, before the model sees them.
        retry_backoff: First delay in seconds between tries of a GET (doubled each try, jittered).

    Raises:
        DefinitionError: the definition or the connection has a problem.
    """
    definition.validate(connection)
    method = definition.method_for(connection)
    sender = Sender(
        client=client,
        auth=auth or connection_auth(connection.auth, timeout=connection.timeout),
        timeout=connection.timeout,
        max_response_bytes=max_response_bytes,
        tries=MAX_TRIES if method == "GET" else 1,
        backoff=lambda attempt: retry_backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.0),
        sleep=asyncio.sleep,
    )
    return Tool(
        name=definition.name,
        description=definition.description,
        parameters=definition.parameters,
        handler=_HttpCall(definition, connection, sender),
        effect="read" if method == "GET" else "write",
        # Every try may need a token request as well, and a GET is tried up to three times.
        timeout=connection.timeout * 2 * MAX_TRIES + 5,
        strict=definition.strict,
        retry_safe=method != "GET",
        metadata={"kind": "http", "connection": connection.name, "method": method},
    )


def http_tools(
    definitions: Iterable[FunctionDefinition],
    connections: Iterable[Connection],
    *,
    client: httpx2.AsyncClient,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> list[Tool]:
    """Tools for many definitions, one auth flow (and token cache) per connection.

    Raises:
        DefinitionError: a definition names no known connection, or fails validation.
    """
    by_name = {c.name: c for c in connections}
    auths = {c.name: connection_auth(c.auth, timeout=c.timeout) for c in by_name.values()}
    tools = []
    for definition in definitions:
        if definition.connection not in by_name:
            raise DefinitionError(
                [("connection", f"no connection named {definition.connection!r}; create it")]
            )
        connection = by_name[definition.connection]
        tools.append(
            http_tool(
                definition,
                connection,
                client=client,
                auth=auths[connection.name],
                max_response_bytes=max_response_bytes,
            )
        )
    return tools
