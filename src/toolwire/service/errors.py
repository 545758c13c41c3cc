"""Errors over HTTP: every failure answers with OpenAI's error body, never with a traceback.

```
{"error": {"message": str, "type": str, "param": str | null, "code": str | null}}
```

Routers raise `ApiError(status, message, ...)`; `install_error_handlers` renders it and translates
what FastAPI, Starlette and toolwire raise themselves: malformed JSON and schema violations become
400 `invalid_request_error` naming the offending field, unknown paths 404, a too-large body 413,
a failing model 502, an unreachable database 503 `service_unavailable` (its cause goes to the
log, not to the client). Unexpected exceptions are answered 500 by the request middleware in
`toolwire.service.ops`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from toolwire.exceptions import ModelError, StorageError, UserError

__all__ = ["ApiError", "BodyTooLargeError", "error_body", "error_for", "install_error_handlers"]

logger = logging.getLogger("toolwire.service")

_TYPES = {401: "invalid_request_error", 403: "permission_error", 404: "invalid_request_error"}
_MAX_LISTED = 3


class ApiError(UserError):
    """A request the service refuses, rendered as an OpenAI-style error body with its HTTP status.

    Args:
        status: The HTTP status (4xx for the caller's mistakes, 5xx for ours).
        message: One sentence saying what went wrong and what to do.
        type: OpenAI's error type; `invalid_request_error` for 4xx, `server_error` for 5xx by default.
        param: The request field at fault, as a dotted path (`messages[0].role`).
        code: A stable machine-readable code (`invalid_api_key`, `conversation_not_found`...).
        headers: Extra response headers (`WWW-Authenticate`, `Retry-After`...).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body of the response."""
        return error_body(self.message, self.type, param=self.param, code=self.code)

    def response(self) -> JSONResponse:
        """The whole response: status, body and headers."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class BodyTooLargeError(HTTPException):
    """Raised while reading a request body that passes the configured limit (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The request body is larger than {limit} bytes; send a smaller one.")


def error_body(
    message: str, type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """`{"error": {"message", "type", "param", "code"}}`, all four keys always present."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_for(exc: BaseException) -> ApiError:
    """The API error that answers an exception raised while serving a request or running a run."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, asyncio.CancelledError):
        return ApiError(
            503,
            "The run was stopped because the service is shutting down; repeat the request.",
            code="cancelled",
        )
    if isinstance(exc, ModelError):
        return ApiError(502, f"The model endpoint failed: {exc}", code="model_error")
    if isinstance(exc, StorageError):
        # The cause (host, port, driver message) is for the operator's log, not for API clients.
        return ApiError(
            503,
            "The service cannot reach its database right now; retry in a few seconds.",
            code="service_unavailable",
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, TimeoutError):
        return ApiError(
            504, "The run took longer than the service allows; try a simpler request.", code="timeout"
        )
    return ApiError(
        500, "The service failed unexpectedly; retry, and report the x-request-id if it persists."
    )


def _param(loc: Sequence[Any]) -> str | None:
    # The first element says where the value was (body, query, path, header), not which field.
    path = ""
    for part in loc[1:]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


def _validation_error(exc: RequestValidationError) -> ApiError:
    errors = list(exc.errors())
    first = errors[0] if errors else {"type": "value_error", "loc": (), "msg": "Invalid request"}
    kind = str(first.get("type", ""))
    if kind == "json_invalid":
        context = first.get("ctx")
        detail = (
            context.get("error", "JSON decode error") if isinstance(context, dict) else "JSON decode error"
        )
        return ApiError(
            400, f"The request body is not valid JSON ({detail}); send a JSON object.", code="invalid_json"
        )
    if kind == "missing" and tuple(first.get("loc", ())) == ("body",):
        return ApiError(400, "The request body is missing; send a JSON object.", code="missing_body")
    listed = []
    for error in errors[:_MAX_LISTED]:
        where = _param(error.get("loc", ())) or "body"
        listed.append(f"{where}: {error.get('msg', 'invalid')}")
    more = f" (and {len(errors) - _MAX_LISTED} more)" if len(errors) > _MAX_LISTED else ""
    codes = {"missing": "missing_required_parameter", "extra_forbidden": "unknown_parameter"}
    code = codes.get(kind, "invalid_type" if kind.endswith("_type") else "invalid_value")
    message = f"Invalid request: {'; '.join(listed)}{more}. Fix the request to match /openapi.json."
    return ApiError(400, message, param=_param(first.get("loc", ())), code=code)


def _http_error(request: Request, exc: HTTPException) -> ApiError:
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = f"There is no {request.url.path}; see /openapi.json for the paths this service has."
        return ApiError(404, message, code="not_found", headers=headers)
    if exc.status_code == 405:
        allowed = headers.get("allow") or headers.get("Allow") or "another method"
        message = f"{request.method} is not allowed on {request.url.path}; use {allowed}."
        return ApiError(405, message, code="method_not_allowed", headers=headers)
    if exc.status_code == 413:
        return ApiError(413, str(exc.detail), code="request_too_large", headers=headers)
    return ApiError(exc.status_code, str(exc.detail), headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error the app can meet with the OpenAI error body."""

    async def on_api_error(request: Request, exc: Exception) -> Response:
        return error_for(exc).response()

    async def on_storage_error(request: Request, exc: Exception) -> Response:
        logger.warning("Answered 503 to %s %s: %s", request.method, request.url.path, exc)
        return error_for(exc).response()

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _validation_error(exc).response()

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _http_error(request, exc).response()

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(ModelError, on_api_error)
    app.add_exception_handler(StorageError, on_storage_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
