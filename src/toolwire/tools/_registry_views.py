"""What the function registry shows and reads: views without secrets, and JSON documents parsed with paths.

A view is what every API and CLI returns about a stored connection or function: credential values
never appear in one, only the names of the credentials that are set (`secrets_set`). A function
document is the seed's JSON definition, optionally with `name`, `description` and `connection`
beside it (or the definition nested under `definition`, as `functions show --json` prints it);
every type error in it is reported with its JSON path.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from toolwire.tools._http_check import METHODS, Method, Problem
from toolwire.tools.auth import AuthConfig
from toolwire.tools.http import DefinitionError, FunctionDefinition, PreparedRequest

__all__ = [
    "AUTH_SETTINGS",
    "ConnectionView",
    "FunctionTestResult",
    "FunctionView",
    "auth_config",
    "auth_settings",
    "function_from_json",
    "request_url",
]

AUTH_SETTINGS = (
    "header_name",
    "query_name",
    "username",
    "token_url",
    "client_id",
    "scopes",
    "token_auth_method",
)
"""The non-secret fields of an `AuthConfig`, stored in plain JSON."""

_DEFINITION_KEYS = ("strict", "parameters", "http_request_body", "method", "path")
_OUTER_KEYS = ("name", "description", "connection")
# Shown by `functions show --json`; accepted back, and ignored, so a shown function can be re-added.
_READ_ONLY_KEYS = ("request", "created_at", "updated_at")


def auth_settings(config: AuthConfig) -> dict[str, Any]:
    """The non-secret settings of `config` that differ from their defaults, as JSON."""
    out: dict[str, Any] = {}
    for name in AUTH_SETTINGS:
        value = getattr(config, name)
        if name == "scopes":
            if value:
                out[name] = list(value)
        elif name == "token_auth_method":
            if config.type == "oauth2_client_credentials":
                out[name] = value
        elif value is not None:
            out[name] = value
    return out


def auth_config(auth_type: str, settings: Mapping[str, Any], secrets: Mapping[str, str]) -> AuthConfig:
    """The `AuthConfig` of stored settings and decrypted secrets."""
    return AuthConfig(
        type=auth_type,  # type: ignore[arg-type]  # checked by AuthConfig.problems when it was saved
        header_name=settings.get("header_name"),
        query_name=settings.get("query_name"),
        username=settings.get("username"),
        token_url=settings.get("token_url"),
        client_id=settings.get("client_id"),
        scopes=tuple(settings.get("scopes", ())),
        token_auth_method=settings.get("token_auth_method", "client_secret_basic"),
        secrets=dict(secrets),
    )


def request_url(connection_url: str, path: str) -> str:
    """The URL template a function calls: the connection's URL with the function's `path` appended."""
    if not path:
        return connection_url
    parts = urlsplit(connection_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat()


@dataclass(kw_only=True, frozen=True)
class ConnectionView:
    """A stored connection as it is shown: everything but the credential values."""

    name: str
    url: str
    method: Method
    auth: dict[str, Any]
    """`type` and the non-secret settings (`header_name`, `username`, `client_id`...)."""
    timeout: float
    secrets_set: list[str]
    """The names of the credentials that are stored (`token`, `password`...), never their values."""
    functions: list[str]
    """The functions bound to this connection, by name."""
    created_at: dt.datetime
    updated_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        """The view as JSON, for the CLI and the admin API."""
        return {
            "name": self.name,
            "url": self.url,
            "method": self.method,
            "auth": self.auth,
            "timeout": self.timeout,
            "secrets_set": self.secrets_set,
            "functions": self.functions,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


@dataclass(kw_only=True, frozen=True)
class FunctionView:
    """A stored function as it is shown: its definition, connection, and the request it sends."""

    name: str
    description: str
    connection: str
    definition: dict[str, Any]
    """The seed's JSON definition: `strict`, `parameters`, `http_request_body`, `method`, `path`."""
    method: Method
    """The method a call sends (the definition's own, else the connection's)."""
    url: str
    """The URL template a call sends to (the connection's URL and the definition's path)."""
    created_at: dt.datetime
    updated_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        """The view as JSON; `functions add` accepts it back (`request` and the dates are ignored)."""
        return {
            "name": self.name,
            "description": self.description,
            "connection": self.connection,
            "definition": self.definition,
            "request": {"method": self.method, "url": self.url},
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


@dataclass(kw_only=True, frozen=True)
class FunctionTestResult:
    """One test execution of a function: the request as it was sent (credentials masked) and the answer."""

    request: PreparedRequest | None
    """The first request sent, with `[redacted]` for every credential; `None` when nothing was sent."""
    status: int | None
    """The HTTP status of the answer; `None` when no answer came."""
    response: str
    """The answer as the model would read it (redacted, size-capped); the API's error body on failure."""
    error: dict[str, Any] | None = None
    """`{"code", "message", "details"}` when the call failed or was refused; `None` on success."""

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        """The result as JSON, for the CLI and the admin API."""
        request = self.request
        return {
            "ok": self.ok,
            "request": None
            if request is None
            else {
                "method": request.method,
                "url": request.url,
                "headers": request.headers,
                "body": request.body,
            },
            "response": {"status": self.status, "body": self.response},
            "error": self.error,
        }


def _string(doc: Mapping[str, Any], key: str, where: str, found: list[Problem]) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        found.append((where, "give a string"))
        return None
    return value


def _definition_part(definition: Mapping[str, Any], prefix: str, found: list[Problem]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in definition.items():
        where = f"{prefix}{key}"
        if key not in _DEFINITION_KEYS:
            found.append((where, f"unknown field; a definition has {', '.join(_DEFINITION_KEYS)}"))
        elif key == "strict" and value is not None and not isinstance(value, bool):
            found.append((where, "give true, false or null"))
        elif key in ("parameters", "http_request_body") and value is not None and not isinstance(value, dict):
            found.append((where, "give a JSON object"))
        elif key == "method" and value is not None and value not in METHODS:
            found.append((where, f"use one of {', '.join(METHODS)}"))
        elif key == "path" and not isinstance(value, str):
            found.append((where, "give a path such as /tickets/{ticket_id}"))
        else:
            out[key] = value
    return out


def function_from_json(
    document: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    connection: str | None = None,
    fallback: FunctionDefinition | None = None,
) -> FunctionDefinition:
    """A `FunctionDefinition` from a JSON document, the given values overriding the document's.

    Args:
        document: The seed's definition (`parameters`, `http_request_body`...), with `name`,
            `description` and `connection` optionally beside it, or the definition nested under
            `definition`.
        name: The function name, overriding the document's.
        description: The description, overriding the document's.
        connection: The connection name, overriding the document's.
        fallback: Where `name`, `description` and `connection` come from when neither the
            arguments nor the document give them (the stored function, when editing).

    Raises:
        DefinitionError: the document has wrong types, unknown fields, or lacks a name,
            description or connection; each problem with its JSON path.
    """
    if not isinstance(document, Mapping):
        raise DefinitionError([("$", "give the definition as a JSON object")])
    found: list[Problem] = []
    outer = {key: _string(document, key, key, found) for key in _OUTER_KEYS}
    nested = "definition" in document
    if nested and not isinstance(document["definition"], Mapping):
        found.append(("definition", "give the definition as a JSON object"))
    inner: Mapping[str, Any] = document["definition"] if nested and not found else {}
    if nested:
        strays = [k for k in document if k not in (*_OUTER_KEYS, *_READ_ONLY_KEYS, "definition")]
        found += [(k, "unknown field; put the definition's fields under 'definition'") for k in strays]
    else:
        inner = {k: v for k, v in document.items() if k not in (*_OUTER_KEYS, *_READ_ONLY_KEYS)}
    parts = _definition_part(inner, "definition." if nested else "", found)
    chosen = {
        "name": name or outer["name"] or (fallback.name if fallback else None),
        "description": description or outer["description"] or (fallback.description if fallback else None),
        "connection": connection or outer["connection"] or (fallback.connection if fallback else None),
    }
    for key, value in chosen.items():
        if not value:
            found.append((key, f"give the function's {key}"))
    if found:
        raise DefinitionError(found)
    return FunctionDefinition(
        name=chosen["name"] or "",
        description=chosen["description"] or "",
        connection=chosen["connection"] or "",
        parameters=parts.get("parameters") or {},
        strict=parts.get("strict"),
        http_request_body=parts.get("http_request_body"),
        method=parts.get("method"),
        path=parts.get("path", ""),
    )
