"""OpenAPI 3 import: one HTTP function definition per operation, bound to one connection.

Each GET, POST, PUT or PATCH operation becomes a `FunctionDefinition`: path and query parameters
become arguments (path ones required), the top-level properties of a JSON request body become
arguments too, and the body template maps each of them to its placeholder
(`{"title": "$title"}`). The operation's path and method are kept on the definition, below the
connection's URL. Header and cookie parameters are left out, since arguments never become
headers; operations that cannot be expressed (another method, a non-JSON body, a body that is not
an object) are skipped with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolwire.exceptions import UserError
from toolwire.tools.http import METHODS, Connection, FunctionDefinition, Method

__all__ = ["OpenAPIError", "OpenAPIImport", "import_openapi", "load_openapi"]

_JSON_MEDIA = re.compile(r"^application/(?:[\w.+-]+\+)?json$")
_MAX_DESCRIPTION = 1024


class OpenAPIError(UserError):
    """A document that is not an OpenAPI 3 description this import can read."""


@dataclass(kw_only=True)
class OpenAPIImport:
    """What an import produced: the definitions, and each operation left out with the reason."""

    functions: list[FunctionDefinition] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """`(where, why)`, e.g. `("paths./tickets/{id}.delete", "method DELETE is not supported")`."""


def load_openapi(path: str | Path) -> dict[str, Any]:
    """Read an OpenAPI document from a JSON file (or YAML, when PyYAML is installed).

    Raises:
        OpenAPIError: the file cannot be read or parsed.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        if Path(path).suffix.lower() in (".yaml", ".yml"):
            import yaml  # type: ignore[import-untyped]  # optional: only for YAML documents

            document = yaml.safe_load(text)
        else:
            document = json.loads(text)
    except ImportError:
        raise OpenAPIError(f"{path} is YAML: install PyYAML, or convert it to JSON.") from None
    except ValueError as exc:
        raise OpenAPIError(f"{path} is not valid JSON ({exc}); fix the document.") from None
    if not isinstance(document, dict):
        raise OpenAPIError(f"{path} does not hold an OpenAPI object; check the file.")
    return document


class _Refs:
    """Inlines local `$ref`s (`#/components/...`); a reference cycle becomes an open schema `{}`."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document

    def target(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise OpenAPIError(f"Reference {ref!r} points outside the document; inline it.")
        node: Any = self.document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise OpenAPIError(f"Reference {ref!r} does not resolve; fix the document.")
            node = node[part]
        return node

    def inline(self, node: Any, seen: tuple[str, ...] = ()) -> Any:
        if isinstance(node, Mapping):
            if isinstance(ref := node.get("$ref"), str):
                return {} if ref in seen else self.inline(self.target(ref), (*seen, ref))
            return {k: self.inline(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [self.inline(v, seen) for v in node]
        return node


def _json_schema(node: Any) -> Any:
    """An (inlined) OpenAPI 3.0 schema rewritten in JSON Schema 2020-12 terms, recursively."""
    if not isinstance(node, Mapping):
        return node
    out = {k: v for k, v in node.items() if k not in ("example", "xml", "externalDocs", "discriminator")}
    if out.pop("nullable", False) is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        # 3.0 writes a flag next to the bound; 2020-12 writes the bound itself.
        if isinstance(out.get(exclusive), bool) and out.pop(exclusive) and bound in out:
            out[exclusive] = out.pop(bound)
    for keyword in ("items", "additionalProperties", "not"):
        if keyword in out:
            out[keyword] = _json_schema(out[keyword])
    for keyword in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(keyword), list):
            out[keyword] = [_json_schema(v) for v in out[keyword]]
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: _json_schema(v) for k, v in out["properties"].items()}
    return out


def _function_name(operation: Mapping[str, Any], method: str, path: str, taken: set[str]) -> str:
    raw = operation.get("operationId") or "_".join([method, *re.findall(r"[A-Za-z0-9]+", path)])
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", str(raw)).strip("_")[:64] or method
    unique, n = name, 2
    while unique in taken:
        suffix = f"_{n}"
        unique, n = name[: 64 - len(suffix)] + suffix, n + 1
    taken.add(unique)
    return unique


def _description(operation: Mapping[str, Any], method: str, path: str) -> str:
    parts = [str(operation[k]).strip() for k in ("summary", "description") if operation.get(k)]
    text = "\n\n".join(dict.fromkeys(p for p in parts if p)) or f"{method.upper()} {path}"
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 3] + "..."


def _body_schema(operation: Mapping[str, Any], refs: _Refs) -> tuple[dict[str, Any] | None, bool]:
    """The JSON request body's object schema and whether the body is required; raise if unusable."""
    body = refs.inline(operation.get("requestBody") or {})
    content = body.get("content") or {}
    if not content:
        return None, False
    media = next((m for m in content if _JSON_MEDIA.match(m.split(";")[0].strip())), None)
    if media is None:
        raise ValueError(f"the request body is {', '.join(content)}, not JSON")
    schema = _json_schema(content[media].get("schema") or {})
    for part in schema.pop("allOf", []):  # the common way to extend a shared schema
        schema.setdefault("properties", {}).update(part.get("properties", {}))
        schema["required"] = [*schema.get("required", []), *part.get("required", [])]
    if schema.get("type", "object") != "object" or not isinstance(schema.get("properties", {}), dict):
        raise ValueError("the request body is not a JSON object, which a body template needs")
    return schema, bool(body.get("required"))


def _operation(
    path: str, method: str, item: Mapping[str, Any], refs: _Refs, connection: Connection, taken: set[str]
) -> FunctionDefinition:
    operation = item[method]
    properties: dict[str, Any] = {}
    required: list[str] = []
    merged = {(p.get("in"), p.get("name")): p for p in refs.inline(item.get("parameters", []))}
    merged |= {(p.get("in"), p.get("name")): p for p in refs.inline(operation.get("parameters", []))}
    for (where, name), parameter in merged.items():
        if where not in ("path", "query") or not isinstance(name, str):
            continue  # arguments never become headers or cookies
        schema = _json_schema(parameter.get("schema") or {"type": "string"})
        if parameter.get("description"):
            schema.setdefault("description", parameter["description"])
        properties[name] = schema
        if where == "path" or parameter.get("required"):
            required.append(name)
    template: dict[str, Any] | None = None
    if method != "get":
        body, body_required = _body_schema(operation, refs)
        template = {}
        for key, schema in ((body or {}).get("properties") or {}).items():
            if schema.get("readOnly"):
                continue
            argument = key if key not in properties and re.fullmatch(r"[A-Za-z_][\w.-]*", key) else None
            argument = argument or re.sub(r"\W+", "_", f"body_{key}")
            properties[argument] = {k: v for k, v in schema.items() if k not in ("readOnly", "writeOnly")}
            template[key] = f"${argument}"
            if body_required and key in (body or {}).get("required", []):
                required.append(argument)
    definition = FunctionDefinition(
        name=_function_name(operation, method, path, taken),
        description=_description(operation, method, path),
        parameters={
            "type": "object",
            "properties": properties,
            "required": list(dict.fromkeys(required)),
            "additionalProperties": False,
        },
        connection=connection.name,
        http_request_body=template,
        method=_method(method),
        path=path,
    )
    definition.validate(connection)
    return definition


def _method(name: str) -> Method:
    for method in METHODS:
        if method == name.upper():
            return method
    raise ValueError(f"method {name.upper()} is not supported (use {', '.join(METHODS)})")


def import_openapi(document: Mapping[str, Any], *, connection: Connection) -> OpenAPIImport:
    """Create one function definition per operation of an OpenAPI 3 document.

    Args:
        document: The parsed OpenAPI document (see `load_openapi`).
        connection: The connection every function is bound to; its URL is the base the
            operations' paths are appended to, usually the document's server URL.

    Raises:
        OpenAPIError: the document is not OpenAPI 3, or has no paths.
    """
    if not str(document.get("openapi", "")).startswith("3."):
        raise OpenAPIError("This is not an OpenAPI 3 document (its 'openapi' field is not 3.x); convert it.")
    paths = document.get("paths")
    if not isinstance(paths, Mapping) or not paths:
        raise OpenAPIError("The document has no paths to import; check that it is the right file.")
    refs, result, taken = _Refs(document), OpenAPIImport(), set[str]()
    for path, raw_item in paths.items():
        try:
            item = refs.inline(raw_item) if isinstance(raw_item, Mapping) else {}
        except OpenAPIError as exc:
            result.skipped.append((f"paths.{path}", str(exc)))
            continue
        for method in item:
            if method in ("parameters", "summary", "description", "servers"):
                continue
            try:
                _method(method)
                result.functions.append(_operation(path, method, item, refs, connection, taken))
            except (UserError, ValueError) as exc:  # a DefinitionError names what to change
                result.skipped.append((f"paths.{path}.{method}", str(exc)))
    return result
