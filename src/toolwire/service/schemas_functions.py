"""The admin API's request and response bodies for functions and connections (pydantic, at the edge).

Request bodies are strict: unknown fields and values of the wrong JSON type are refused with a 400
naming the field. Credentials appear only in requests (`auth.secrets`); responses name the stored
ones in `secrets_set`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolwire.tools.auth import AuthConfig, AuthType
from toolwire.tools.http import Connection

__all__ = [
    "AuthIn",
    "ConnectionIn",
    "ConnectionList",
    "ConnectionOut",
    "FunctionAnswer",
    "FunctionIn",
    "FunctionList",
    "FunctionOut",
    "FunctionTestIn",
    "FunctionTestOut",
    "OpenAPIImportIn",
    "OpenAPIImportOut",
    "RequestOut",
    "SentRequest",
    "Skipped",
]

_STRICT = ConfigDict(extra="forbid", strict=True)


class AuthIn(BaseModel):
    """How a connection authenticates; `secrets` are write-only."""

    model_config = _STRICT

    type: AuthType = "none"
    header_name: str | None = None
    query_name: str | None = None
    username: str | None = None
    token_url: str | None = None
    client_id: str | None = None
    scopes: list[str] = Field(default_factory=list, max_length=64)
    token_auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    secrets: dict[str, str] = Field(default_factory=dict, max_length=8)
    """`api_key`, `password`, `token` or `client_secret`; when updating, omitted ones are kept."""


class ConnectionIn(BaseModel):
    """A connection to create, or the new settings of one (which may rename it)."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=64)
    url: str = Field(min_length=1, max_length=2048)
    method: Literal["GET", "POST", "PUT", "PATCH"] = "GET"
    auth: AuthIn = Field(default_factory=AuthIn)
    timeout: float = Field(default=10.0, gt=0, le=300)

    def connection(self) -> Connection:
        """The `Connection` this body describes."""
        auth = self.auth.model_dump(exclude={"scopes"})
        return Connection(
            name=self.name,
            url=self.url,
            method=self.method,
            auth=AuthConfig(**auth, scopes=tuple(self.auth.scopes)),
            timeout=self.timeout,
        )


class ConnectionOut(BaseModel):
    """A stored connection: its settings and the names of its stored credentials, never their values."""

    name: str
    url: str
    method: str
    auth: dict[str, Any]
    """`type` and the non-secret settings."""
    timeout: float
    secrets_set: list[str]
    functions: list[str]
    """The functions bound to the connection."""
    created_at: dt.datetime
    updated_at: dt.datetime


class ConnectionList(BaseModel):
    """The admin's tenant's connections, by name."""

    object: Literal["list"] = "list"
    data: list[ConnectionOut]


class FunctionIn(BaseModel):
    """A function to create, or the new version of one (which may rename it)."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=64)
    description: str = Field(min_length=1, max_length=4096)
    connection: str = Field(min_length=1, max_length=64)
    definition: dict[str, Any]
    """Seed 001's JSON definition: `strict`, `parameters`, `http_request_body`, `method`, `path`."""


class RequestOut(BaseModel):
    """What a function's call sends to."""

    method: str
    url: str


class FunctionOut(BaseModel):
    """A stored function."""

    name: str
    description: str
    connection: str
    definition: dict[str, Any]
    request: RequestOut
    created_at: dt.datetime
    updated_at: dt.datetime


class FunctionList(BaseModel):
    """The admin's tenant's functions, by name."""

    object: Literal["list"] = "list"
    data: list[FunctionOut]


class FunctionTestIn(BaseModel):
    """`POST /admin/api/functions/{name}/test`: the arguments to run the function with."""

    model_config = _STRICT

    arguments: dict[str, Any] = Field(default_factory=dict)


class SentRequest(BaseModel):
    """The request exactly as sent, every credential shown as `[redacted]`."""

    method: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any] | None


class FunctionAnswer(BaseModel):
    """The API's answer, as the model would read it."""

    status: int | None
    body: str


class FunctionTestOut(BaseModel):
    """One test run: `ok` false with an `error` when the call was refused or failed."""

    ok: bool
    request: SentRequest | None
    """`null` when nothing was sent (invalid arguments)."""
    response: FunctionAnswer
    error: dict[str, Any] | None


class OpenAPIImportIn(BaseModel):
    """`POST /admin/api/functions/import-openapi`: an OpenAPI 3 document and the connection to bind to."""

    model_config = _STRICT

    connection: str = Field(min_length=1, max_length=64)
    document: dict[str, Any]
    replace: bool = False
    """Replace functions of the same names instead of refusing the import."""


class Skipped(BaseModel):
    """An operation that was not imported, and why."""

    where: str
    why: str


class OpenAPIImportOut(BaseModel):
    """What an import stored, and what it left out."""

    functions: list[FunctionOut]
    skipped: list[Skipped]
