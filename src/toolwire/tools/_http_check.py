"""Checks an HTTP function definition and its connection when they are saved.

Each check returns `(json path, what to do)` pairs instead of raising, so one save reports every
problem at once; `toolwire.tools.http` raises them together as a `DefinitionError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from toolwire.tools.http import Connection, FunctionDefinition

__all__ = [
    "METHODS",
    "PATH_PLACEHOLDER",
    "PLACEHOLDER",
    "Method",
    "Problem",
    "join_path",
    "placeholders",
    "placement_problems",
    "properties_of",
    "schema_problems",
    "url_problems",
]

Method = Literal["GET", "POST", "PUT", "PATCH"]
"""The HTTP methods a connection may use."""

METHODS: Final[tuple[Method, ...]] = ("GET", "POST", "PUT", "PATCH")

Problem = tuple[str, str]
"""A JSON path and what to do about the problem found there."""

_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"
PLACEHOLDER: Final = re.compile(rf"^\$({_NAME})$")
"""A body template leaf that is a placeholder: `"$name"`, the whole string."""
_EMBEDDED = re.compile(rf"\$({_NAME})")
PATH_PLACEHOLDER: Final = re.compile(r"\{([^{}]*)\}")
"""A `{name}` placeholder in a URL path."""
_PATH_NAME = re.compile(rf"^{_NAME}$")
_PRINTABLE_ASCII = re.compile(r"^[!-~]*$")


def properties_of(parameters: Any) -> dict[str, Any]:
    """The `properties` of a parameters schema, or `{}` when it has none (or is malformed)."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    return props if isinstance(props, dict) else {}


def join_path(path: str, key: str) -> str:
    """`path.key`, or `path["key"]` when the key is not a plain name."""
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key) else f"{path}[{json.dumps(key)}]"


def url_problems(url: str, where: str) -> list[Problem]:
    """Problems of a connection URL: absolute http(s), no credentials, placeholders in the path only."""
    if not _PRINTABLE_ASCII.match(url):
        return [(where, "write the URL in ASCII without spaces (percent-encode other characters)")]
    parts = urlsplit(url)
    found: list[Problem] = []
    if parts.scheme not in ("http", "https") or not parts.hostname:
        found.append((where, "give an absolute http:// or https:// URL"))
    if "@" in parts.netloc:
        found.append((where, "move credentials out of the URL into the connection's auth settings"))
    if parts.fragment:
        found.append((where, "remove the #fragment"))
    if "{" in parts.netloc + parts.query or "}" in parts.netloc + parts.query:
        found.append((where, "placeholders are allowed in the path only"))
    return found + _template_path_problems(parts.path, where)


def _template_path_problems(path: str, where: str) -> list[Problem]:
    literal = PATH_PLACEHOLDER.sub("", path)
    found: list[Problem] = []
    if "{" in literal or "}" in literal:
        found.append((where, "write each path placeholder as {name}"))
    for name in PATH_PLACEHOLDER.findall(path):
        if not _PATH_NAME.match(name):
            found.append((where, f"path placeholder {{{name}}} is not a parameter name"))
    if any(segment in (".", "..") for segment in path.split("/")):
        found.append((where, "remove '.' and '..' segments from the path"))
    return found


def schema_problems(parameters: Any, strict: bool | None) -> list[Problem]:
    """Problems of the parameters schema: valid JSON Schema, `required` defined, strict-mode rules."""
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        return [("parameters", "give a JSON Schema of type 'object' describing the arguments")]
    found = [
        (
            "".join(["parameters", *(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)]),
            error.message,
        )
        for error in Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(parameters)
    ]
    properties = properties_of(parameters)
    required = parameters.get("required", [])
    for index, name in enumerate(required if isinstance(required, list) else []):
        if isinstance(name, str) and name not in properties:
            found.append(
                (
                    f"parameters.required[{index}]",
                    f"required parameter {name!r} has no definition in parameters.properties; add one",
                )
            )
    if strict:
        found += _strict_problems(parameters, "parameters")
    return found


def _strict_problems(schema: dict[str, Any], path: str) -> list[Problem]:
    """OpenAI's strict mode: every object closed and every property required, recursively."""
    found: list[Problem] = []
    props = properties_of(schema)
    types = schema.get("type")
    if "object" in ([types] if isinstance(types, str) else types or []) or props:
        if schema.get("additionalProperties") is not False:
            found.append((f"{path}.additionalProperties", "strict mode needs additionalProperties: false"))
        missing = [name for name in props if name not in schema.get("required", [])]
        if missing:
            found.append((f"{path}.required", f"strict mode needs every property required; add {missing}"))
    for name, sub in props.items():
        if isinstance(sub, dict):
            found += _strict_problems(sub, join_path(f"{path}.properties", name))
    if isinstance(schema.get("items"), dict):
        found += _strict_problems(schema["items"], f"{path}.items")
    return found


def placement_problems(
    definition: FunctionDefinition, connection: Connection, properties: dict[str, Any]
) -> list[Problem]:
    """Where arguments go: the body template, the path placeholders and the query must agree."""
    found: list[Problem] = []
    method = definition.method_for(connection)
    if definition.method is not None and definition.method not in METHODS:
        found.append(("method", f"use one of {', '.join(METHODS)}"))
    if definition.path and (
        not definition.path.startswith("/") or not _PRINTABLE_ASCII.match(definition.path)
    ):
        found.append(("path", "start the path with '/' and write it in ASCII without spaces"))
    elif any(c in definition.path for c in "?#") or "//" in definition.path:
        found.append(("path", "give a plain path below the connection's URL, without '?', '#' or '//'"))
    else:
        found += _template_path_problems(definition.path, "path")
    required = definition.parameters.get("required", []) if isinstance(definition.parameters, dict) else []
    in_url = [("connection.url", n) for n in PATH_PLACEHOLDER.findall(urlsplit(connection.url).path)]
    in_url += [("path", n) for n in PATH_PLACEHOLDER.findall(definition.path)]
    for where, name in in_url:
        schema = properties.get(name)
        types = schema.get("type") if isinstance(schema, dict) else None
        if schema is None:
            found.append(
                (where, f"path placeholder {{{name}}} has no parameter; add it to parameters.properties")
            )
        elif name not in required or types not in ("string", "integer"):
            found.append(
                (where, f"path placeholder {{{name}}} must be a required string or integer parameter")
            )
    body = definition.http_request_body
    if method == "GET" and body is not None:
        found.append(
            ("http_request_body", "a GET request sends its arguments as the query string; remove it")
        )
    elif method != "GET" and body is None:
        found.append(("http_request_body", f"a {method} request needs a body template with $placeholders"))
    elif body is not None and not isinstance(body, dict):
        found.append(("http_request_body", "make the body template a JSON object"))
    elif body is not None:
        found += _template_problems(body, "http_request_body", properties)
    auth = connection.auth
    if auth.type == "api_key_query" and auth.query_name in properties:
        found.append(
            (
                join_path("parameters.properties", auth.query_name or ""),
                "this name is the connection's API key query parameter; rename the parameter",
            )
        )
    return found


def _template_problems(node: Any, path: str, properties: Mapping[str, Any]) -> list[Problem]:
    if isinstance(node, dict):
        found: list[Problem] = []
        for key, value in node.items():
            if str(key).startswith("$"):
                found.append((join_path(path, str(key)), "keys cannot be placeholders; use a fixed key"))
            found += _template_problems(value, join_path(path, str(key)), properties)
        return found
    if isinstance(node, list):
        return [(path, "arrays are not supported in a body template; make the array one parameter ($name)")]
    if isinstance(node, str):
        if match := PLACEHOLDER.match(node):
            if match[1] not in properties:
                return [(path, f"placeholder ${match[1]} has no parameter; add it to parameters.properties")]
            return []
        embedded = [name for name in _EMBEDDED.findall(node) if name in properties]
        if embedded:
            return [(path, f"placeholder ${embedded[0]} must be the whole string value, without other text")]
    return []


def placeholders(node: Any) -> set[str]:
    """The names of the placeholders in a body template."""
    if isinstance(node, dict):
        return set().union(*(placeholders(v) for v in node.values()))
    if isinstance(node, str) and (match := PLACEHOLDER.match(node)):
        return {match[1]}
    return set()
