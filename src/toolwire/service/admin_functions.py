"""The admin API for HTTP functions and their connections, under `/admin/api/`.

An administrator manages the functions and connections of its own tenant only; another tenant's
are answered 404, exactly like missing ones. Credentials are write-only: they are accepted in a
connection's `auth.secrets`, stored encrypted, and never returned; a response names the stored
ones in `secrets_set`. A definition with problems is answered 422 with code `invalid_definition`,
`param` naming the JSON path of the first problem and `problems` listing each. Every change is seen
by the next chat request of the tenant (see `Assistant.runner_for`).

`POST /admin/api/functions/{name}/test` runs a function once, for the web page's Test button, and
answers with the request exactly as sent (credentials masked) and the API's response.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.responses import Response

from toolwire.exceptions import ConfigError, UserError
from toolwire.service.auth import Principal, require_admin
from toolwire.service.errors import ApiError
from toolwire.service.schemas import ErrorResponse
from toolwire.service.schemas_functions import (
    ConnectionIn,
    ConnectionList,
    ConnectionOut,
    FunctionIn,
    FunctionList,
    FunctionOut,
    FunctionTestIn,
    FunctionTestOut,
    OpenAPIImportIn,
    OpenAPIImportOut,
    Skipped,
)
from toolwire.service.state import ServiceState, get_state
from toolwire.tools.http import DefinitionError
from toolwire.tools.openapi import OpenAPIError
from toolwire.tools.registry import (
    AlreadyExistsError,
    ConnectionInUseError,
    FunctionRegistry,
    NotFoundError,
    function_from_json,
)

__all__ = ["DefinitionProblems", "router"]

_DEFINITION_KEYS = ("strict", "parameters", "http_request_body", "method", "path")

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed JSON, wrong types or unknown fields."},
    401: {"model": ErrorResponse, "description": "Missing, unknown or revoked API key."},
    403: {"model": ErrorResponse, "description": "The key lacks the admin scope."},
    404: {"model": ErrorResponse, "description": "No such function or connection in the admin's tenant."},
    409: {"model": ErrorResponse, "description": "The name is taken, or the connection is in use."},
    422: {
        "model": ErrorResponse,
        "description": "The definition has problems; each is listed with its path.",
    },
}

router = APIRouter(prefix="/admin/api", tags=["admin: functions"], responses=_ERRORS)

Admin = Annotated[Principal, Depends(require_admin)]
State = Annotated[ServiceState, Depends(get_state)]


class DefinitionProblems(ApiError):
    """422 `invalid_definition`: every problem of a definition, each with its JSON path."""

    def __init__(self, exc: DefinitionError, *, in_definition: bool = False) -> None:
        self.problems = [(_param(path, in_definition), what) for path, what in exc.problems]
        listed = "; ".join(f"{path}: {what}" for path, what in self.problems)
        count = "1 problem" if len(self.problems) == 1 else f"{len(self.problems)} problems"
        super().__init__(
            422,
            f"Nothing was saved; the definition has {count}: {listed}. Fix them and send it again.",
            type="invalid_request_error",
            param=self.problems[0][0] if self.problems else None,
            code="invalid_definition",
        )

    def body(self) -> dict[str, Any]:
        body = super().body()
        body["error"]["problems"] = [{"param": path, "message": what} for path, what in self.problems]
        return body


def _param(path: str, in_definition: bool) -> str:
    """A problem's path as a path in the request body (definition fields sit under `definition`)."""
    head = path.split(".", 1)[0].split("[", 1)[0]
    return f"definition.{path}" if in_definition and head in _DEFINITION_KEYS else path


@contextmanager
def _refusals(*, in_definition: bool = False) -> Iterator[None]:
    """Answer the registry's refusals (bad definition, not found, in use...) with their API error."""
    try:
        yield
    except UserError as exc:
        raise _refused(exc, in_definition=in_definition) from None


def _refused(exc: UserError, *, in_definition: bool = False) -> ApiError:
    if isinstance(exc, DefinitionError):
        return DefinitionProblems(exc, in_definition=in_definition)
    if isinstance(exc, NotFoundError):
        return ApiError(404, str(exc), code="not_found")
    if isinstance(exc, AlreadyExistsError):
        return ApiError(409, str(exc), param="name", code="already_exists")
    if isinstance(exc, ConnectionInUseError):
        return ApiError(409, str(exc), code="connection_in_use")
    if isinstance(exc, OpenAPIError):
        return ApiError(422, str(exc), param="document", code="invalid_openapi")
    if isinstance(exc, ConfigError):  # the server's key cannot read the stored credentials
        return ApiError(500, str(exc), code="secret_key_error")
    return ApiError(400, str(exc), code="invalid_value")


def _registry(state: ServiceState) -> FunctionRegistry:
    return state.started.registry


def _connection_out(view: Any) -> ConnectionOut:
    return ConnectionOut.model_validate(view.to_json())


def _function_out(view: Any) -> FunctionOut:
    return FunctionOut.model_validate(view.to_json())


def _definition(body: FunctionIn) -> Any:
    document = {"name": body.name, "description": body.description, "connection": body.connection}
    return function_from_json({**document, "definition": body.definition})


@router.get("/connections", summary="List the connections of the admin's tenant")
async def list_connections(admin: Admin, state: State) -> ConnectionList:
    """Every connection, by name; credentials appear only as names in `secrets_set`."""
    views = await _registry(state).list_connections(admin.tenant_id)
    return ConnectionList(data=[_connection_out(view) for view in views])


@router.post("/connections", status_code=201, summary="Create a connection")
async def create_connection(body: ConnectionIn, admin: Admin, state: State) -> ConnectionOut:
    """The new connection; its credentials are stored encrypted and never returned."""
    with _refusals():
        view = await _registry(state).add_connection(admin.tenant_id, body.connection())
    return _connection_out(view)


@router.get("/connections/{name}", summary="Show one connection")
async def get_connection(name: str, admin: Admin, state: State) -> ConnectionOut:
    """The connection's settings and the names of its stored credentials."""
    with _refusals():
        return _connection_out(await _registry(state).get_connection(admin.tenant_id, name))


@router.put("/connections/{name}", summary="Replace a connection's settings")
async def update_connection(name: str, body: ConnectionIn, admin: Admin, state: State) -> ConnectionOut:
    """The updated connection; credentials left out of `auth.secrets` are kept when the auth type stays."""
    with _refusals():
        view = await _registry(state).update_connection(admin.tenant_id, name, body.connection())
    return _connection_out(view)


@router.delete("/connections/{name}", status_code=204, summary="Delete a connection")
async def delete_connection(name: str, admin: Admin, state: State) -> Response:
    """Delete the connection and its credentials; refused with 409 while functions use it."""
    with _refusals():
        await _registry(state).remove_connection(admin.tenant_id, name)
    return Response(status_code=204)


@router.get("/functions", summary="List the functions of the admin's tenant")
async def list_functions(admin: Admin, state: State) -> FunctionList:
    """Every function, by name."""
    views = await _registry(state).list_functions(admin.tenant_id)
    return FunctionList(data=[_function_out(view) for view in views])


@router.post("/functions", status_code=201, summary="Create a function")
async def create_function(body: FunctionIn, admin: Admin, state: State) -> FunctionOut:
    """The new function, checked against its connection; a tool of the assistant from the next chat on."""
    with _refusals(in_definition=True):
        view = await _registry(state).add_function(admin.tenant_id, _definition(body))
    return _function_out(view)


@router.post("/functions/import-openapi", status_code=201, summary="Import functions from OpenAPI 3")
async def import_openapi(body: OpenAPIImportIn, admin: Admin, state: State) -> OpenAPIImportOut:
    """One function per operation of the document, all bound to one connection; all or none are stored."""
    with _refusals():
        views, skipped = await _registry(state).import_openapi(
            admin.tenant_id, body.document, connection=body.connection, replace=body.replace
        )
    return OpenAPIImportOut(
        functions=[_function_out(view) for view in views],
        skipped=[Skipped(where=where, why=why) for where, why in skipped],
    )


@router.get("/functions/{name}", summary="Show one function")
async def get_function(name: str, admin: Admin, state: State) -> FunctionOut:
    """The function's definition, connection, and the request it sends."""
    with _refusals():
        return _function_out(await _registry(state).get_function(admin.tenant_id, name))


@router.put("/functions/{name}", summary="Replace a function")
async def update_function(name: str, body: FunctionIn, admin: Admin, state: State) -> FunctionOut:
    """The new version of the function (renamed when `name` in the body differs)."""
    with _refusals(in_definition=True):
        view = await _registry(state).update_function(admin.tenant_id, name, _definition(body))
    return _function_out(view)


@router.delete("/functions/{name}", status_code=204, summary="Delete a function")
async def delete_function(name: str, admin: Admin, state: State) -> Response:
    """Delete the function; the assistant no longer offers it."""
    with _refusals():
        await _registry(state).remove_function(admin.tenant_id, name)
    return Response(status_code=204)


@router.post("/functions/{name}/test", summary="Run a function once and show the request sent")
async def test_function(name: str, body: FunctionTestIn, admin: Admin, state: State) -> FunctionTestOut:
    """Execute it with `arguments`: the request exactly as sent (credentials masked), and the answer."""
    with _refusals():
        result = await _registry(state).test_function(admin.tenant_id, name, body.arguments)
    return FunctionTestOut.model_validate(result.to_json())
