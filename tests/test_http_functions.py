"""HTTP functions: definition checks, templates, URL safety, response rules, retries, redirects.

Requests go to real servers on 127.0.0.1: the demo tickets API, and a raw asyncio server that
misbehaves on purpose (drops connections, answers huge or binary bodies, redirects).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest

from toolwire.context import Context
from toolwire.demo.tickets import TicketsServer, tickets_functions
from toolwire.tools.auth import AuthConfig
from toolwire.tools.base import Tool
from toolwire.tools.http import (
    ArgumentError,
    Connection,
    DefinitionError,
    FunctionDefinition,
    UpstreamError,
    http_tool,
    prepare,
    render_body,
)

TOKEN = "fn-token-0815"
LONG_SECRET = "0123456789abcdefghij0123456789ABCDEFGHIJ"


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TicketsServer]:
    with TicketsServer(tmp_path_factory.mktemp("tickets") / "t.db", token=TOKEN) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(trust_env=False) as http:
        yield http


class RawServer:
    """Answers by path: /drop closes the connection unanswered, /big, /binary, /redirect-*."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.base_url = ""
        self.release = asyncio.Event()
        self.last_method = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ", 2)[1].decode().split("?")[0]
        self.last_method = head.split(b" ", 1)[0].decode()
        self.hits[path] += 1
        if path == "/api/drop":
            writer.close()
            return
        if path == "/api/hang":
            await self.release.wait()
            writer.close()
            return
        status, headers, body = self.answer(path)
        lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close", *headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        writer.close()

    def answer(self, path: str) -> tuple[int, list[str], bytes]:
        if path == "/api/big":
            return 200, ["Content-Type: text/plain"], b"0123456789" * 100_000
        if path == "/api/secrets":
            return 200, ["Content-Type: text/plain"], LONG_SECRET.encode() * 100
        if path == "/api/binary":
            return 200, ["Content-Type: image/png"], b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
        if path == "/api/unlabelled":
            return 200, [], b"\x00\x01\x02binary"
        if path == "/api/redirect-away":
            return 302, ["Location: http://elsewhere.invalid/api/ok"], b""
        if path == "/api/redirect-out":
            return 302, [f"Location: {self.base_url}/admin"], b""
        if path == "/api/redirect-same":
            return 302, ["Location: /api/ok"], b""
        if path in ("/api/redirect-303", "/api/redirect-302"):
            return int(path[-3:]), ["Location: /api/ok"], b""
        if path == "/api/redirect-307":
            return 307, ["Location: /api/echo-method"], b""
        if path == "/api/echo-method":
            return 200, ["Content-Type: text/plain"], self.last_method.encode()
        if path == "/api/ok":
            return 200, ["Content-Type: application/json"], b'{"ok": true}'
        return 404, ["Content-Type: text/plain"], b"no such thing"


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    handler = RawServer()
    server = await asyncio.start_server(handler.handle, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    handler.base_url = f"http://{host}:{port}"
    async with server:
        yield handler
        handler.release.set()


def schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }


def echo_function(method: str = "POST", **changes: Any) -> FunctionDefinition:
    fields = {
        "name": "echo",
        "description": "Echo the request.",
        "parameters": schema(
            {
                "title": {"type": "string"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "urgent": {"type": "boolean"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "description": {"type": "string"},
                "project_key": {"type": "string"},
            },
            ["title"],
        ),
        "connection": "tickets",
        "method": method,
        "path": "/echo",
        "http_request_body": None
        if method == "GET"
        else {
            "fields": {
                "summary": "$title",
                "count": "$count",
                "ratio": "$ratio",
                "urgent": "$urgent",
                "labels": "$labels",
                "description": "$description",
                "project": {"key": "$project_key"},
                "source": "toolwire",
            }
        },
    }
    return FunctionDefinition(**(fields | changes))


def connection_to(url: str, **changes: Any) -> Connection:
    fields: dict[str, Any] = {
        "name": "tickets",
        "url": url,
        "auth": AuthConfig(type="bearer", secrets={"token": TOKEN}),
    }
    return Connection(**(fields | changes))


async def call(tool: Tool, arguments: dict[str, Any], context: Context | None = None) -> Any:
    return await tool.handler(arguments, context or Context())


# --- Body templates -------------------------------------------------------------------------------


async def test_placeholders_keep_the_json_type_and_missing_optionals_vanish_with_their_key(
    tickets: TicketsServer, client: httpx2.AsyncClient
) -> None:
    tool = http_tool(echo_function(), connection_to(tickets.base_url), client=client)
    arguments = {"title": "Login", "count": 3, "ratio": 0.5, "urgent": False, "labels": ["a", "b"]}
    echoed = json.loads(await call(tool, arguments))
    assert echoed["method"] == "POST" and echoed["headers"]["content-type"] == "application/json"
    # No "$description" and no empty project object: the optional ones not given are gone.
    assert json.loads(echoed["body"]) == {
        "fields": {
            "summary": "Login",
            "count": 3,
            "ratio": 0.5,
            "urgent": False,
            "labels": ["a", "b"],
            "source": "toolwire",
        }
    }
    assert echoed["query"] == {}


def test_render_body_keeps_null_and_literals_and_copies_values() -> None:
    labels = ["x"]
    body = render_body(
        {"a": "$a", "b": {"c": "$labels"}, "lit": "$5 fee", "n": 7}, {"a": None, "labels": labels}
    )
    assert body == {"a": None, "b": {"c": ["x"]}, "lit": "$5 fee", "n": 7}
    body["b"]["c"].append("y")
    assert labels == ["x"]
    assert render_body({"only": {"x": "$missing"}}, {}) == {}


async def test_a_value_that_json_cannot_carry_is_refused_before_sending(
    tickets: TicketsServer, client: httpx2.AsyncClient
) -> None:
    tool = http_tool(echo_function(), connection_to(tickets.base_url), client=client)
    with pytest.raises(ArgumentError, match="NaN") as refused:
        await call(tool, {"title": "x", "ratio": math.nan})
    assert refused.value.code == "invalid_arguments"


# --- Query string, path placeholders, headers -----------------------------------------------------


async def test_get_sends_the_arguments_as_an_encoded_query_string(
    tickets: TicketsServer, client: httpx2.AsyncClient
) -> None:
    tool = http_tool(echo_function("GET"), connection_to(tickets.base_url), client=client)
    assert tool.effect == "read" and tool.retry_safe is False
    assert tool.spec.effect == "read"
    echoed = json.loads(
        await call(
            tool, {"title": "a&b=c #d", "count": 2, "urgent": True, "labels": ["x", "y"], "ratio": None}
        )
    )
    assert echoed["method"] == "GET" and echoed["body"] == ""
    assert "content-type" not in echoed["headers"]
    assert echoed["query"] == {"title": "a&b=c #d", "count": "2", "urgent": "true", "labels": "y"}
    assert echoed["raw_path"] == "/echo"


def test_prepare_shows_the_seed_weather_request() -> None:
    weather = FunctionDefinition(
        name="get_weather",
        description="Current weather for a city.",
        parameters=schema({"city": {"type": "string"}, "units": {"enum": ["metric", "imperial"]}}, ["city"]),
        connection="weather",
    )
    connection = Connection(name="weather", url="https://api.open-meteo.com/v1/forecast")
    prepared = prepare(weather, connection, {"city": "Berlin", "units": "metric"})
    assert (prepared.method, prepared.url, prepared.body) == (
        "GET",
        "https://api.open-meteo.com/v1/forecast?city=Berlin&units=metric",
        None,
    )


async def test_path_placeholders_are_encoded_and_cannot_leave_their_segment(
    tickets: TicketsServer, client: httpx2.AsyncClient
) -> None:
    definition = echo_function("GET", path="/echo/{title}")
    tool = http_tool(definition, connection_to(tickets.base_url), client=client)
    echoed = json.loads(await call(tool, {"title": "../../tickets/x?y=1#z"}))
    assert echoed["raw_path"] == "/echo/..%2F..%2Ftickets%2Fx%3Fy%3D1%23z"
    assert echoed["query"] == {}
    second_url = json.loads(await call(tool, {"title": "http://evil.example/steal"}))
    assert second_url["raw_path"] == "/echo/http%3A%2F%2Fevil.example%2Fsteal"

    # The demo API receives the whole value as one ticket id.
    connection, functions = tickets_functions(tickets.base_url, TOKEN)
    get_ticket = http_tool(functions[2], connection, client=client)
    with pytest.raises(UpstreamError) as missing:
        await call(get_ticket, {"ticket_id": "../../echo"})
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == "Ticket ../../echo not found."


@pytest.mark.parametrize("value", ["..", ".", "", True, 1.5, None])
def test_path_values_that_could_move_the_path_are_refused(value: Any) -> None:
    definition = echo_function("GET", path="/echo/{title}")
    with pytest.raises(ArgumentError, match="path segment"):
        prepare(definition, connection_to("http://127.0.0.1:9/api"), {"title": value})


def test_integer_path_values_and_the_connection_prefix_are_kept() -> None:
    definition = FunctionDefinition(
        name="get_ticket",
        description="Get a ticket.",
        parameters=schema({"key": {"type": "integer"}}, ["key"]),
        connection="jira",
    )
    connection = Connection(name="jira", url="https://jira.example.com/rest/api/2/issue/{key}?expand=names")
    prepared = prepare(definition, connection, {"key": 42})
    assert prepared.url == "https://jira.example.com/rest/api/2/issue/42?expand=names"


async def test_arguments_never_become_headers(tickets: TicketsServer, client: httpx2.AsyncClient) -> None:
    definition = echo_function(
        "GET",
        parameters={"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
    )
    tool = http_tool(definition, connection_to(tickets.base_url), client=client)
    injected = "x\r\nX-Injected: 1\r\nAuthorization: Bearer attacker"
    echoed = json.loads(
        await call(tool, {"title": injected, "Authorization": "Bearer attacker", "Host": "evil"})
    )
    assert "x-injected" not in echoed["headers"]
    assert echoed["headers"]["host"] == tickets.base_url.removeprefix("http://")
    assert echoed["query"] == {"title": injected, "Authorization": "Bearer attacker", "Host": "evil"}
    assert "attacker" not in echoed["headers"]["authorization"]


async def test_a_write_carries_the_idempotency_key_and_a_read_does_not(
    tickets: TicketsServer, client: httpx2.AsyncClient
) -> None:
    context = Context(extra={"idempotency_key": "req-9:echo:0"})
    write = http_tool(echo_function(), connection_to(tickets.base_url), client=client)
    read = http_tool(echo_function("GET"), connection_to(tickets.base_url), client=client)
    assert write.effect == "write" and write.retry_safe is True
    assert write.spec.effect == "write"
    assert (
        json.loads(await call(write, {"title": "t"}, context))["headers"]["idempotency-key"] == "req-9:echo:0"
    )
    assert "idempotency-key" not in json.loads(await call(read, {"title": "t"}, context))["headers"]
    assert "idempotency-key" not in json.loads(await call(write, {"title": "t"}))["headers"]


# --- Responses ------------------------------------------------------------------------------------


def raw_function(path: str, method: str = "GET") -> FunctionDefinition:
    return FunctionDefinition(
        name="raw",
        description="Call the raw server.",
        parameters=schema({}),
        connection="raw",
        method=method,  # type: ignore[arg-type]
        path=path,
        http_request_body=None if method == "GET" else {"fixed": True},
    )


def raw_tool(
    server: RawServer, path: str, client: httpx2.AsyncClient, method: str = "GET", **options: Any
) -> Tool:
    connection = Connection(name="raw", url=f"{server.base_url}/api", timeout=2.0)
    return http_tool(raw_function(path, method), connection, client=client, retry_backoff=0.001, **options)


async def test_a_gigantic_response_is_cut_with_a_marker(raw: RawServer, client: httpx2.AsyncClient) -> None:
    text = await call(raw_tool(raw, "/big", client), {})
    kept, marker = text.split("\n[truncated", 1)
    assert kept == ("0123456789" * 100_000)[: 256 * 1024]
    assert "longer than 262144 bytes" in marker
    small = await call(raw_tool(raw, "/big", client, max_response_bytes=100), {})
    assert small.startswith("0123456789" * 10 + "\n[truncated") and len(small) < 200


async def test_no_part_of_a_secret_survives_where_the_response_is_cut(
    raw: RawServer, client: httpx2.AsyncClient
) -> None:
    connection = Connection(
        name="raw", url=f"{raw.base_url}/api", auth=AuthConfig(type="bearer", secrets={"token": LONG_SECRET})
    )
    tool = http_tool(raw_function("/secrets"), connection, client=client, max_response_bytes=100)
    text = await call(tool, {})
    kept, _ = text.split("\n[truncated", 1)
    assert set(kept.split("[redacted]")[:-1]) == {""} and "[redacted]" in kept
    assert LONG_SECRET[:4] not in text


@pytest.mark.parametrize(
    ("path", "shown"),
    [("/binary", "2056 bytes (content-type image/png)"), ("/unlabelled", "9 bytes (content-type not given)")],
)
async def test_a_binary_response_is_refused(
    raw: RawServer, client: httpx2.AsyncClient, path: str, shown: str
) -> None:
    with pytest.raises(UpstreamError) as refused:
        await call(raw_tool(raw, path, client), {})
    assert str(refused.value) == f"binary response of {shown} not passed to the model"
    assert refused.value.code == "upstream_error" and refused.value.status == 200


async def test_an_error_status_becomes_upstream_error_with_the_body(
    raw: RawServer, client: httpx2.AsyncClient
) -> None:
    with pytest.raises(UpstreamError) as failed:
        await call(raw_tool(raw, "/missing", client), {})
    assert (failed.value.code, failed.value.status, failed.value.body) == (
        "upstream_error",
        404,
        "no such thing",
    )
    assert failed.value.details == [{"status": 404, "body": "no such thing"}]


async def test_redirects_to_another_host_or_outside_the_prefix_are_not_followed(
    raw: RawServer, client: httpx2.AsyncClient
) -> None:
    with pytest.raises(UpstreamError, match=r"redirecting to http://elsewhere\.invalid/api/ok; not followed"):
        await call(raw_tool(raw, "/redirect-away", client), {})
    with pytest.raises(UpstreamError, match="not followed") as outside:
        await call(raw_tool(raw, "/redirect-out", client), {})
    assert outside.value.status == 302 and raw.hits["/admin"] == 0
    assert json.loads(await call(raw_tool(raw, "/redirect-same", client), {})) == {"ok": True}
    assert raw.hits["/api/ok"] == 1


async def test_a_write_follows_only_redirects_that_keep_or_settle_its_method(
    raw: RawServer, client: httpx2.AsyncClient
) -> None:
    # 303 See Other: the write is done, the result is read with a GET.
    assert json.loads(await call(raw_tool(raw, "/redirect-303", client, method="POST"), {})) == {"ok": True}
    assert raw.last_method == "GET"
    # 307 sends the same method again.
    assert await call(raw_tool(raw, "/redirect-307", client, method="PATCH"), {}) == "PATCH"
    with pytest.raises(UpstreamError, match="method would change") as refused:
        await call(raw_tool(raw, "/redirect-302", client, method="PUT"), {})
    assert refused.value.status == 302 and raw.hits["/api/ok"] == 1


# --- Failures and retries -------------------------------------------------------------------------


async def test_get_is_tried_three_times_on_connection_errors_and_post_once(
    raw: RawServer, client: httpx2.AsyncClient
) -> None:
    with pytest.raises(UpstreamError, match=r"Could not reach 127\.0\.0\.1: .*\(3 tries\)"):
        await call(raw_tool(raw, "/drop", client), {})
    assert raw.hits["/api/drop"] == 3
    with pytest.raises(UpstreamError, match=r"\(1 try\)"):
        await call(raw_tool(raw, "/drop", client, method="POST"), {})
    assert raw.hits["/api/drop"] == 4


async def test_a_silent_api_times_out_after_bounded_tries(raw: RawServer, client: httpx2.AsyncClient) -> None:
    connection = Connection(name="raw", url=f"{raw.base_url}/api", timeout=0.2)
    for method, tries in (("GET", 3), ("POST", 1)):
        before = raw.hits["/api/hang"]
        tool = http_tool(raw_function("/hang", method), connection, client=client, retry_backoff=0.001)
        with pytest.raises(UpstreamError, match=r"did not answer within 0\.2s") as failed:
            await call(tool, {})
        assert failed.value.code == "timeout" and raw.hits["/api/hang"] - before == tries


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_host_that_does_not_resolve_is_a_clear_error(client: httpx2.AsyncClient, method: str) -> None:
    connection = Connection(name="raw", url="http://nonexistent.invalid/api")
    tool = http_tool(raw_function("/x", method), connection, client=client, retry_backoff=0.001)
    with pytest.raises(UpstreamError) as failed:
        await call(tool, {})
    tries = "3 tries" if method == "GET" else "1 try"
    assert str(failed.value).startswith("The host name nonexistent.invalid does not resolve")
    assert tries in str(failed.value) and failed.value.status is None


# --- Checks when a definition is saved ------------------------------------------------------------

JIRA = {
    "strict": False,
    "parameters": {
        "type": "object",
        "required": ["summary", "project_key", "issue_type"],
        "properties": {
            "summary": {"type": "string"},
            "project_key": {"type": "string"},
            "issue_type": {"type": "string"},
            "description": {"type": "string"},
        },
        "additionalProperties": False,
    },
    "http_request_body": {
        "fields": {
            "project": {"key": "$project_key"},
            "summary": "$summary",
            "issuetype": {"name": "$issue_type"},
            "description": "$description",
        }
    },
}
JIRA_CONNECTION = Connection(
    name="jira",
    url="https://jira.example.com/rest/api/2/issue",
    method="POST",
    auth=AuthConfig(type="basic", username="bot", secrets={"password": "pw"}),
)


def jira(**changes: Any) -> FunctionDefinition:
    definition = json.loads(json.dumps(JIRA))
    for path, value in changes.items():
        node = definition
        *parents, last = path.split("__")
        for parent in parents:
            node = node[parent]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return FunctionDefinition.from_json(
        name="create_jira_ticket",
        description="Create a Jira ticket.",
        definition=definition,
        connection="jira",
    )


def problems(
    definition: FunctionDefinition, connection: Connection = JIRA_CONNECTION
) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as failed:
        definition.validate(connection)
    return failed.value.problems


def test_the_seed_jira_definition_is_valid_and_renders_the_seed_request() -> None:
    definition = jira()
    definition.validate(JIRA_CONNECTION)
    arguments = {"summary": "Login-Fehler beheben", "project_key": "KEY", "issue_type": "Bug"}
    prepared = prepare(
        definition, JIRA_CONNECTION, arguments | {"description": "Nutzer können sich nicht einloggen."}
    )
    assert (prepared.method, prepared.url) == ("POST", "https://jira.example.com/rest/api/2/issue")
    assert prepared.headers["Authorization"] == "Basic [redacted]"
    assert prepared.body == {
        "fields": {
            "project": {"key": "KEY"},
            "summary": "Login-Fehler beheben",
            "issuetype": {"name": "Bug"},
            "description": "Nutzer können sich nicht einloggen.",
        }
    }
    assert (
        FunctionDefinition.from_json(
            name=definition.name,
            description=definition.description,
            definition=definition.to_json(),
            connection="jira",
        )
        == definition
    )


def test_a_placeholder_without_a_parameter_is_named_by_its_json_path() -> None:
    found = problems(jira(parameters__properties__project_key=None, parameters__required=["summary"]))
    assert found == [("http_request_body.fields.project.key", found[0][1])]
    with pytest.raises(
        DefinitionError, match=r"^http_request_body\.fields\.project\.key: placeholder \$project_key"
    ):
        jira(parameters__properties__project_key=None, parameters__required=["summary"]).validate(
            JIRA_CONNECTION
        )


def test_a_required_parameter_without_a_definition_is_named_by_its_index() -> None:
    found = problems(jira(parameters__required=["summary", "priority"]))
    assert [path for path, _ in found] == ["parameters.required[1]"]
    assert "'priority' has no definition" in found[0][1]


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"http_request_body__fields__labels": ["$summary"]}, "http_request_body.fields.labels", "arrays"),
        ({"http_request_body__fields__$summary": "x"}, 'http_request_body.fields["$summary"]', "keys"),
        (
            {"http_request_body__fields__summary": "Bug: $summary"},
            "http_request_body.fields.summary",
            "whole",
        ),
        ({"http_request_body": None}, "http_request_body", "needs a body template"),
        ({"http_request_body": "$summary"}, "http_request_body", "JSON object"),
        ({"parameters__properties__summary__type": "strin"}, "parameters.properties.summary.type", "strin"),
        ({"parameters__type": "array"}, "parameters", "type 'object'"),
    ],
)
def test_template_and_schema_problems_name_their_path(changes: dict[str, Any], path: str, words: str) -> None:
    found = problems(jira(**changes))
    assert any(p == path and words in what for p, what in found), found


def test_a_get_with_a_body_and_a_bad_name_are_reported_together() -> None:
    definition = FunctionDefinition.from_json(
        name="get weather!", description=" ", definition=JIRA, connection="other"
    )
    connection = Connection(name="jira", url="https://jira.example.com/x")
    paths = [p for p, _ in problems(definition, connection)]
    assert paths == ["name", "description", "connection", "http_request_body"]


def test_path_placeholders_must_be_required_strings_or_integers() -> None:
    base = FunctionDefinition(
        name="get_ticket",
        description="Get a ticket.",
        parameters=schema({"key": {"type": "string"}, "n": {"type": "number"}}, ["n"]),
        connection="jira",
    )
    connection = Connection(name="jira", url="https://jira.example.com/ticket/{key}/{n}/{ghost}")
    assert problems(base, connection) == [
        ("connection.url", "path placeholder {key} must be a required string or integer parameter"),
        ("connection.url", "path placeholder {n} must be a required string or integer parameter"),
        ("connection.url", "path placeholder {ghost} has no parameter; add it to parameters.properties"),
    ]
    ok = FunctionDefinition(
        name="get_ticket",
        description="Get a ticket.",
        parameters=schema({"key": {"type": "string"}}, ["key"]),
        connection="jira",
        path="/{key}",
    )
    ok.validate(Connection(name="jira", url="https://jira.example.com/ticket"))


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://host/x", "absolute http"),
        ("https://{tenant}.example.com/x", "path only"),
        ("https://user:pw@example.com/x", "credentials"),
        ("https://example.com/a/../b", "'..'"),
        ("https://example.com/a b", "ASCII"),
    ],
)
def test_connection_urls_are_checked(url: str, words: str) -> None:
    with pytest.raises(DefinitionError, match=r"^url: .*" + words.replace(".", r"\.")):
        Connection(name="c", url=url).validate()


def test_strict_mode_needs_closed_objects_and_every_property_required() -> None:
    assert problems(jira(strict=True)) == [
        ("parameters.required", "strict mode needs every property required; add ['description']")
    ]
    nested = jira(
        strict=True,
        parameters__required=["summary", "project_key", "issue_type", "description"],
        parameters__properties__description={"type": "object", "properties": {"text": {"type": "string"}}},
    )
    assert [p for p, _ in problems(nested)] == [
        "parameters.properties.description.additionalProperties",
        "parameters.properties.description.required",
    ]


def test_a_parameter_cannot_shadow_the_api_key_query_parameter() -> None:
    connection = Connection(
        name="weather",
        url="https://api.example.com/forecast",
        auth=AuthConfig(type="api_key_query", query_name="appid", secrets={"api_key": "k"}),
    )
    definition = FunctionDefinition(
        name="get_weather",
        description="Weather.",
        parameters=schema({"appid": {"type": "string"}}),
        connection="weather",
    )
    assert [p for p, _ in problems(definition, connection)] == ["parameters.properties.appid"]
