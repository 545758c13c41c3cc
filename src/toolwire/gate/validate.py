"""Argument checking: size, JSON parse and full JSON Schema validation, with cached validators.

Everything here treats the argument string as untrusted input from a model: its size is checked
before it is parsed, so a huge string is never parsed; only a JSON object is accepted; and the
parsed object is validated against the tool's schema (draft 2020-12, formats checked), collecting
every error with its JSON path so the model can correct all of them at once.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]
from jsonschema.protocols import Validator  # type: ignore[import-untyped]

from toolwire.tools.base import Tool

__all__ = [
    "DEFAULT_MAX_ARGUMENT_BYTES",
    "FORMAT_CHECKER",
    "Rejection",
    "compile_validator",
    "parse_arguments",
    "validate_arguments",
    "validator_for",
]

DEFAULT_MAX_ARGUMENT_BYTES = 64 * 1024
"""The default limit on the size of one call's argument string, in UTF-8 bytes."""

_MAX_DETAILS = 50
_MAX_MESSAGE = 300
_DATE_TIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:(?P<second>\d{2})(?:\.\d+)?(?P<offset>[Zz]|[+-]\d{2}:\d{2})$"
)
_JSON_TYPES: Mapping[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _is_date_time(instance: object) -> bool:
    """RFC 3339 `date-time`: a date, a time and an offset, all three required."""
    if not isinstance(instance, str):
        return True
    match = _DATE_TIME.match(instance)
    if match is None:
        return False
    text = instance.upper().replace("Z", "+00:00")
    if match["second"] == "60":  # a leap second is valid RFC 3339 but not a Python datetime
        text = text[:17] + "59" + text[19:]
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _format_checker() -> FormatChecker:
    checker = FormatChecker(Draft202012Validator.FORMAT_CHECKER.checkers)
    # jsonschema checks `date-time` only with an optional package installed; pydantic emits it for
    # every `datetime` parameter, so check it here either way.
    if "date-time" not in checker.checkers:
        checker.checks("date-time")(_is_date_time)
    return checker


FORMAT_CHECKER = _format_checker()
"""The formats checked during validation: date, date-time, email, uuid, ipv4, ipv6, regex..."""


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """Why a call's arguments were refused; nothing ran."""

    code: Literal["invalid_json", "too_large", "invalid_arguments"]
    """The stable error code the model sees."""
    message: str
    """One sentence the model can act on."""
    details: tuple[dict[str, str], ...] = ()
    """For `invalid_arguments`: one `{"path", "message"}` entry per schema error."""


def compile_validator(schema: Mapping[str, Any]) -> Validator:
    """A draft 2020-12 validator for `schema`, checking formats. Not cached: see `validator_for`."""
    return Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


# Keyed by the Tool object: a tool's schema is fixed once it is registered, and the entry goes away
# with the tool.
_VALIDATORS: weakref.WeakKeyDictionary[Tool, Validator] = weakref.WeakKeyDictionary()


def validator_for(tool: Tool) -> Validator:
    """The validator of `tool`'s parameters, compiled on first use and then reused."""
    validator = _VALIDATORS.get(tool)
    if validator is None:
        validator = compile_validator(tool.parameters)
        _VALIDATORS[tool] = validator
    return validator


def parse_arguments(raw: str, *, max_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES) -> dict[str, Any] | Rejection:
    """Parse a call's argument string into an object, refusing what is too large or not an object.

    A blank string counts as `{}` (some servers send it for a call without arguments).
    """
    if _exceeds(raw, max_bytes):
        return Rejection(
            code="too_large",
            message=f"The arguments are larger than the limit of {max_bytes} bytes: "
            "send less data, or split the work into several calls.",
        )
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        return Rejection(
            code="invalid_json", message="The arguments are nested too deeply: send flatter JSON."
        )
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers with too many digits
        return Rejection(
            code="invalid_json",
            message=f"The arguments are not valid JSON ({_clip(str(exc))}): send one JSON object.",
        )
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), "something else")
        return Rejection(
            code="invalid_json",
            message=f"The arguments must be a JSON object of named arguments, not {kind}.",
        )
    return value


def validate_arguments(validator: Validator, arguments: Mapping[str, Any]) -> Rejection | None:
    """Validate parsed arguments in full; `None` when they conform, else every error with its path."""
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (e.json_path, e.message))
    if not errors:
        return None
    details = tuple({"path": e.json_path, "message": _clip(_describe(e))} for e in errors[:_MAX_DETAILS])
    if len(errors) > _MAX_DETAILS:
        details += ({"path": "$", "message": f"...and {len(errors) - _MAX_DETAILS} more errors."},)
    count = "1 error" if len(errors) == 1 else f"{len(errors)} errors"
    return Rejection(
        code="invalid_arguments",
        message=f"The arguments do not match the tool's schema ({count}): "
        "fix each error listed in details and call the tool again.",
        details=details,
    )


def _exceeds(raw: str, max_bytes: int) -> bool:
    """Whether `raw` is longer than `max_bytes` in UTF-8, without encoding it when the length decides."""
    if len(raw) > max_bytes:
        return True
    if len(raw) * 4 <= max_bytes:  # no code point takes more than four bytes
        return False
    # surrogatepass: a lone surrogate is counted, not an error; the parser refuses it later if need be.
    return len(raw.encode("utf-8", "surrogatepass")) > max_bytes


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; use a number or null")


def _describe(error: ValidationError) -> str:
    """The error's message; for `anyOf`/`oneOf`, what each alternative expected."""
    if not error.context:
        return str(error.message)
    alternatives = list(dict.fromkeys(str(sub.message) for sub in error.context))
    return " or ".join(alternatives[:4])


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."
