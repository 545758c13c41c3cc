"""A test execution of one HTTP function, for an administrator: the request as sent, and the answer.

The request is recorded as it leaves the client, after the auth flow added the credentials, so
what is shown is what the API received; every credential in it (headers, query, body) is replaced
with `[redacted]` before it is returned. A token request of OAuth2 client credentials is not shown.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2

from toolwire.context import Context
from toolwire.gate.validate import compile_validator, validate_arguments
from toolwire.tools._http_send import DEFAULT_MAX_RESPONSE_BYTES, UpstreamError
from toolwire.tools._registry_views import FunctionTestResult
from toolwire.tools.auth import ConnectionAuth, connection_auth
from toolwire.tools.http import ArgumentError, Connection, FunctionDefinition, PreparedRequest, http_tool

__all__ = ["masked_request", "run_test"]


def masked_request(request: httpx2.Request, connection: Connection, auth: ConnectionAuth) -> PreparedRequest:
    """`request` as sent, with every credential value shown as `[redacted]`."""
    masked = {name.lower(): value for name, value in connection.auth.masked_headers().items()}
    redact = auth.redactor.redact
    headers = {}
    for raw_name, raw_value in request.headers.raw:
        name = raw_name.decode("latin-1")
        headers[name] = masked.get(name.lower()) or redact(raw_value.decode("latin-1"))
    body: Any = None
    if request.content:
        try:
            body = auth.redactor.redact_value(json.loads(request.content))
        except ValueError:
            body = None
    return PreparedRequest(
        method=request.method,  # type: ignore[arg-type]  # one of the connection's methods
        url=redact(str(request.url)),
        headers=headers,
        body=body if isinstance(body, dict) else None,
    )


async def run_test(
    definition: FunctionDefinition,
    connection: Connection,
    arguments: dict[str, Any],
    context: Context,
    max_response_bytes: int | None = None,
) -> FunctionTestResult:
    """Check `arguments`, execute the function once through its own client, and report what happened.

    Args:
        definition: The function.
        connection: Its connection, credentials included.
        arguments: The arguments, checked against the function's schema before anything is sent.
        context: The context of the call (its tenant).
        max_response_bytes: Cut longer answers, as for the model; the default limit when `None`.
    """
    rejection = validate_arguments(compile_validator(definition.parameters), arguments)
    if rejection is not None:
        refused = {"code": rejection.code, "message": rejection.message, "details": list(rejection.details)}
        return FunctionTestResult(request=None, status=None, response="", error=refused)
    auth = connection_auth(connection.auth, timeout=connection.timeout)
    token_url = httpx2.URL(connection.auth.token_url) if connection.auth.token_url else None
    sent: list[httpx2.Request] = []
    statuses: list[int] = []

    async def on_request(request: httpx2.Request) -> None:
        if request.url != token_url:
            sent.append(request)

    async def on_response(response: httpx2.Response) -> None:
        if response.request.url != token_url:
            statuses.append(response.status_code)

    hooks: dict[str, list[Any]] = {"request": [on_request], "response": [on_response]}
    body: str = ""
    error: dict[str, Any] | None = None
    async with httpx2.AsyncClient(event_hooks=hooks, trust_env=False) as client:
        tool = http_tool(
            definition,
            connection,
            client=client,
            auth=auth,
            max_response_bytes=max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES,
        )
        try:
            async with asyncio.timeout(tool.timeout):
                body = await tool.handler(arguments, context)
        except UpstreamError as exc:
            body, error = exc.body, {"code": exc.code, "message": str(exc), "details": exc.details}
        except ArgumentError as exc:
            error = {"code": "invalid_arguments", "message": str(exc), "details": []}
        except TimeoutError:
            error = {
                "code": "timeout",
                "message": f"The function did not finish within {tool.timeout:g} seconds.",
                "details": [],
            }
    return FunctionTestResult(
        request=masked_request(sent[0], connection, auth) if sent else None,
        status=statuses[-1] if statuses else None,
        response=body,
        error=error,
    )
