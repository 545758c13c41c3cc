"""`@tool`: turn a typed Python function into a Tool.

The JSON Schema of the arguments comes from the type hints, through a pydantic model built once from
the signature; the tool description and the argument descriptions come from the Google-style
docstring. A parameter annotated with `Context` is filled in by the runtime and never shown to the
model, so a model cannot forge who is asking.

At call time the handler receives arguments the Gate already validated against the schema; the
pydantic model turns them into Python values (a `date`, a nested model, an `Enum` member) before the
function runs. Sync functions run in a worker thread so they cannot block the event loop; a thread
cannot be stopped, so a sync tool that overruns its deadline finishes in the background while the
model is already told it timed out.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, overload

import pydantic
from pydantic.fields import FieldInfo

from toolwire.context import Context
from toolwire.exceptions import ToolDefinitionError
from toolwire.tools.base import ArgumentError, Check, Effect, Handler, Tool, validate_tool_name

__all__ = ["tool"]

_ARG_SECTIONS = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "other parameters"}
)
_OTHER_SECTIONS = frozenset(
    {
        "returns", "return", "yields", "yield", "raises", "except", "exceptions", "examples", "example",
        "note", "notes", "attributes", "see also", "todo", "warning", "warnings", "warns", "references",
    }
)  # fmt: skip
_ARG_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")

# Schema keywords whose value maps names to subschemas: their keys are names, not keywords.
_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
# Schema keywords whose value is data, never a schema.
_DATA_KEYWORDS = frozenset({"default", "enum", "const", "examples"})


@dataclass(frozen=True, kw_only=True)
class _Docstring:
    description: str
    arguments: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class _Binding:
    """What the handler needs, computed once at decoration time."""

    model: type[pydantic.BaseModel]
    fields: tuple[tuple[str, str], ...]
    """(parameter name, model field name) for each schema parameter."""
    context_parameters: tuple[str, ...]


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "read",
    timeout: float | None = 30.0,
    strict: bool | None = None,
    requires: Iterable[str | Check] = (),
    retry_safe: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "read",
    timeout: float | None = 30.0,
    strict: bool | None = None,
    requires: Iterable[str | Check] = (),
    retry_safe: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function (sync or async) into a Tool; use bare (`@tool`) or with keywords.

    Args:
        func: The function, when used bare.
        name: The tool name; defaults to the function's name.
        description: What the model is told; defaults to the docstring's text before its sections.
        effect: `read` tools may run concurrently; `write` tools run alone, in proposed order.
        timeout: Deadline for one execution in seconds; `None` means none.
        strict: Ask the provider for schema-conformant arguments (the Gate validates either way).
        requires: Scopes a principal needs to call the tool.
        retry_safe: A write whose earlier attempt died may be run again.

    Returns:
        The Tool, or a decorator that makes one.

    Raises:
        ToolDefinitionError: the signature cannot be offered to a model (`*args`, `**kwargs`,
            positional-only or unannotated parameters, types without a JSON Schema).
    """
    # Types named in string annotations may live in the decorating scope (a function body), which
    # `get_type_hints` cannot see on its own.
    namespace = dict(sys._getframe(1).f_locals)

    def decorate(fn: Callable[..., Any]) -> Tool:
        return _build(
            fn,
            namespace=namespace,
            name=name,
            description=description,
            effect=effect,
            timeout=timeout,
            strict=strict,
            requires=tuple(requires),
            retry_safe=retry_safe,
        )

    return decorate if func is None else decorate(func)


def _build(
    fn: Callable[..., Any],
    *,
    namespace: Mapping[str, Any],
    name: str | None,
    description: str | None,
    effect: Effect,
    timeout: float | None,
    strict: bool | None,
    requires: tuple[str | Check, ...],
    retry_safe: bool,
) -> Tool:
    tool_name = validate_tool_name(name if name is not None else getattr(fn, "__name__", ""))
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise ToolDefinitionError(f"Tool {tool_name!r} is a generator: make it return its result instead.")
    docstring = _parse_docstring(inspect.getdoc(fn))
    binding = _bind(fn, tool_name, docstring.arguments, namespace)
    return Tool(
        name=tool_name,
        description=description if description is not None else docstring.description,
        parameters=_schema(binding.model),
        handler=_handler(fn, binding),
        effect=effect,
        timeout=timeout,
        strict=strict,
        requires=requires,
        retry_safe=retry_safe,
        metadata={"function": fn, "arguments_model": binding.model},
    )


def _parse_docstring(doc: str | None) -> _Docstring:
    """Split a Google-style docstring into its description and its `Args:` entries."""
    if not doc:
        return _Docstring(description="", arguments={})
    description: list[str] = []
    arguments: dict[str, list[str]] = {}
    section: str | None = None
    entry_indent: int | None = None
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = stripped[:-1].lower() if indent == 0 and stripped.endswith(":") else None
        if header in _ARG_SECTIONS or header in _OTHER_SECTIONS:
            section, entry_indent, current = header, None, None
            continue
        if section is None:
            description.append(stripped)
            continue
        if section not in _ARG_SECTIONS or not stripped:
            continue
        if indent == 0:  # text back at the margin ends the section
            section = "other"
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_ENTRY.match(stripped) if indent <= entry_indent else None
        if match:
            current = arguments.setdefault(match["name"], [])
            current.append(match["text"])
        elif current is not None:
            current.append(stripped)
    return _Docstring(
        description=_paragraphs(description),
        arguments={key: " ".join(part for part in text if part) for key, text in arguments.items()},
    )


def _paragraphs(lines: list[str]) -> str:
    """Join wrapped lines into paragraphs separated by one blank line."""
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line:
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return "\n\n".join(" ".join(p) for p in paragraphs if p)


def _bind(
    fn: Callable[..., Any], tool_name: str, docs: Mapping[str, str], namespace: Mapping[str, Any]
) -> _Binding:
    """Build the arguments model from the signature: one aliased field per parameter."""
    try:
        signature = inspect.signature(fn)
        hints = _parameter_hints(fn, namespace)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"Tool {tool_name!r}: its type hints cannot be resolved ({exc}); "
            "define the types they name before decorating."
        ) from exc
    definitions: dict[str, Any] = {}
    fields: list[tuple[str, str]] = []
    contexts: list[str] = []
    for index, param in enumerate(signature.parameters.values()):
        _check_kind(param, tool_name)
        if param.name not in hints:
            raise ToolDefinitionError(
                f"Tool {tool_name!r}: parameter {param.name!r} has no type annotation; annotate it."
            )
        hint = hints[param.name]
        if _is_context(hint):
            contexts.append(param.name)
            continue
        # Internal field names with the parameter as alias: a parameter called `json` or
        # `model_config` must not collide with BaseModel's own attributes.
        field = f"p{index}"
        extra = pydantic.Field(alias=param.name)
        if param.name in docs and not _has_description(hint, param):
            extra = pydantic.Field(alias=param.name, description=docs[param.name])
        default = ... if param.default is inspect.Parameter.empty else param.default
        definitions[field] = (Annotated[hint, extra], default)
        fields.append((param.name, field))
    model = _create_model(tool_name, definitions, fields, hints)
    return _Binding(model=model, fields=tuple(fields), context_parameters=tuple(contexts))


def _parameter_hints(fn: Callable[..., Any], namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters' type hints, evaluated; the return annotation is not needed, so not evaluated."""
    annotations = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != "return"}
    holder = types.SimpleNamespace(__annotations__=annotations)
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    return typing.get_type_hints(holder, globalns=globalns, localns=dict(namespace), include_extras=True)


def _check_kind(param: inspect.Parameter, tool_name: str) -> None:
    kind = param.kind
    if kind is inspect.Parameter.VAR_POSITIONAL:
        problem = f"*{param.name} cannot be described to a model; list the arguments one by one"
    elif kind is inspect.Parameter.VAR_KEYWORD:
        problem = f"**{param.name} cannot be described to a model; list the arguments one by one"
    elif kind is inspect.Parameter.POSITIONAL_ONLY:
        problem = f"parameter {param.name!r} is positional-only; remove the '/' so it can be passed by name"
    else:
        return
    raise ToolDefinitionError(f"Tool {tool_name!r}: {problem}.")


def _is_context(hint: Any) -> bool:
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return hint is Context or Context in typing.get_args(hint)


def _has_description(hint: Any, param: inspect.Parameter) -> bool:
    """Whether the user already described the parameter with `Field(description=...)`."""
    infos = list(typing.get_args(hint)[1:]) if typing.get_origin(hint) is Annotated else []
    infos.append(param.default)
    return any(isinstance(info, FieldInfo) and info.description for info in infos)


def _create_model(
    tool_name: str, definitions: dict[str, Any], fields: list[tuple[str, str]], hints: Mapping[str, Any]
) -> type[pydantic.BaseModel]:
    try:
        model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **definitions
        )
        model.model_json_schema()
    except (pydantic.PydanticUserError, TypeError) as exc:
        # Find the parameter at fault, so the message can name it.
        for param_name, _field in fields:
            try:
                pydantic.TypeAdapter(hints[param_name]).json_schema()
            except (pydantic.PydanticUserError, TypeError):
                raise ToolDefinitionError(
                    f"Tool {tool_name!r}: parameter {param_name!r} has a type without a JSON Schema; "
                    "use str, int, float, bool, Literal, Enum, list, dict, a pydantic model or a dataclass."
                ) from exc
        raise ToolDefinitionError(
            f"Tool {tool_name!r}: its arguments have no JSON Schema ({exc}); use JSON-compatible types."
        ) from exc
    return model


def _schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema without pydantic's titles, with closed objects throughout."""
    schema = _clean(model.model_json_schema())
    schema.setdefault("properties", {})
    return schema


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
            cleaned[key] = {
                name: _clean(sub) if isinstance(sub, dict) else sub for name, sub in value.items()
            }
        elif key in _DATA_KEYWORDS:
            cleaned[key] = value
        elif isinstance(value, dict):
            cleaned[key] = _clean(value)
        elif isinstance(value, list):
            cleaned[key] = [_clean(item) if isinstance(item, dict) else item for item in value]
        else:
            cleaned[key] = value
    # Nested models and dataclasses ignore unknown keys in pydantic; the model should hear about
    # them instead, as it does at the top level. A model configured with extra="allow" says so.
    if cleaned.get("type") == "object" and "properties" in cleaned:
        cleaned.setdefault("additionalProperties", False)
    return cleaned


def _handler(fn: Callable[..., Any], binding: _Binding) -> Handler:
    model = binding.model
    fields = binding.fields
    contexts = binding.context_parameters
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(arguments: dict[str, Any], context: Context) -> Any:
        try:
            parsed = model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ArgumentError(f"The arguments cannot be used: {problems}; send other values.") from None
        kwargs = {param: getattr(parsed, field) for param, field in fields}
        for param in contexts:
            kwargs[param] = context
        if is_async:
            return await fn(**kwargs)
        return await asyncio.to_thread(fn, **kwargs)

    return handler
