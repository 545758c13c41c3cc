"""What both halves of the Chat <-> Responses mapping share: the refusal, the field tables, content parts.

`toolwire.wire.convert` re-exports `ConversionError`; the request and response mapping lives
there, the stream bridges in `_convert_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from toolwire.exceptions import WireFormatError
from toolwire.wire._responses_shapes import JSON

__all__ = [
    "ConversionError",
    "chat_text",
    "check_skippable",
    "content_to_chat",
    "content_to_responses",
    "converting",
    "finish_of_status",
    "kind_of",
    "refuse",
    "responses_text",
    "status_of_finish",
    "usage_to_chat",
    "usage_to_responses",
]

_INCOMPLETE_OF_FINISH = {"length": "max_output_tokens", "content_filter": "content_filter"}
_FINISH_OF_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


class ConversionError(WireFormatError):
    """Something with no equivalent on the other wire: refused with its name, never dropped.

    Hosted tools (web_search, file_search, code_interpreter, computer_use, image_generation, mcp...),
    their call items, reasoning items with `encrypted_content`, tool results with images, and Chat
    parameters that Responses lacks (`stop`, `n`, `seed`...) all end here. `param` names the field.
    """


@contextmanager
def converting() -> Iterator[None]:
    """Re-raise a `WireFormatError` of the shared shapes as a `ConversionError`."""
    try:
        yield
    except ConversionError:
        raise
    except WireFormatError as exc:
        raise ConversionError(str(exc), param=exc.param) from exc


def check_skippable(item: Any, at: str) -> None:
    """Accept an item without a counterpart only if it is plain reasoning; refuse anything else.

    Reasoning without `encrypted_content` is the model's own notes: Chat has no place for it and
    the loop does not need it, so it is skipped. Encrypted reasoning and every other item type
    (hosted tool calls, item references, custom tools) are refused.

    Raises:
        ConversionError: naming the item type and its position.
    """
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "reasoning" and isinstance(item, dict):
        if not item.get("encrypted_content"):
            return
        raise ConversionError(
            f"{at} is a 'reasoning' item with encrypted_content, which cannot survive Chat Completions; "
            "drop it, or keep this conversation on the Responses route.",
            param=at,
        )
    raise ConversionError(
        f"{at} is a {kind!r} item, which has no Chat Completions equivalent; "
        "remove it, or keep this conversation on the Responses route.",
        param=at,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_to_responses(usage: Any) -> JSON | None:
    """Chat `usage` (`prompt_tokens`...) as Responses `usage` (`input_tokens`...)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    cached = _int((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
    reasoning = _int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
    }


def usage_to_chat(usage: Any) -> JSON | None:
    """Responses `usage` (`input_tokens`...) as Chat `usage` (`prompt_tokens`...)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    cached = _int((usage.get("input_tokens_details") or {}).get("cached_tokens"))
    reasoning = _int((usage.get("output_tokens_details") or {}).get("reasoning_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def status_of_finish(finish_reason: Any) -> tuple[str, str | None]:
    """Chat `finish_reason` as Responses (`status`, `incomplete_details.reason`)."""
    reason = _INCOMPLETE_OF_FINISH.get(str(finish_reason))
    return ("incomplete" if reason else "completed"), reason


def finish_of_status(status: Any, incomplete: Any, has_calls: bool) -> str:
    """Responses `status` as Chat `finish_reason`; calls decide between `tool_calls` and `stop`."""
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
        return _FINISH_OF_INCOMPLETE.get(str(reason), "length")
    return "tool_calls" if has_calls else "stop"


def refuse(at: str, what: str, *, quote: bool = False) -> ConversionError:
    """The error for `at` (a position, or a parameter name to quote), saying what is wrong with it."""
    name = f"'{at}'" if quote else at
    return ConversionError(f"{name} {what}; remove it, or keep this request on its own route.", param=at)


def kind_of(value: Any) -> Any:
    """The `type` of a wire object, or the Python type name of anything else."""
    return value.get("type") if isinstance(value, dict) else type(value).__name__


def content_to_responses(content: Any, at: str) -> str | list[JSON]:
    """Chat message content (a string, or text and image parts) as Responses input content."""
    if isinstance(content, str):
        return content
    parts: list[JSON] = []
    for j, part in enumerate(content if isinstance(content, list) else [content]):
        if kind_of(part) == "text":
            parts.append({"type": "input_text", "text": part.get("text") or ""})
        elif kind_of(part) == "image_url" and isinstance(part.get("image_url"), dict):
            image = part["image_url"]
            parts.append(
                {
                    "type": "input_image",
                    "image_url": image.get("url"),
                    "detail": image.get("detail") or "auto",
                }
            )
        else:
            raise refuse(f"{at}.content[{j}]", f"is a {kind_of(part)!r} part with no Responses equivalent")
    return parts


def chat_text(content: Any, at: str) -> tuple[str, str]:
    """(text, refusal) of Chat assistant content, a string or a list of text and refusal parts."""
    if content is None or isinstance(content, str):
        return content or "", ""
    text: list[str] = []
    refusal: list[str] = []
    for j, part in enumerate(content if isinstance(content, list) else [content]):
        if kind_of(part) not in ("text", "refusal"):
            raise refuse(f"{at}.content[{j}]", f"is a {kind_of(part)!r} part with no Responses equivalent")
        (text if part["type"] == "text" else refusal).append(str(part.get(part["type"]) or ""))
    return "".join(text), "".join(refusal)


def content_to_chat(content: Any, at: str) -> str | list[JSON]:
    """Responses input content (a string, or text and image parts) as Chat message content."""
    if isinstance(content, str):
        return content
    parts: list[JSON] = []
    for j, part in enumerate(content if isinstance(content, list) else [content]):
        if kind_of(part) in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text") or ""})
        elif kind_of(part) == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": part["image_url"], "detail": part.get("detail") or "auto"},
                }
            )
        else:
            raise refuse(
                f"{at}.content[{j}]", f"is a {kind_of(part)!r} part with no Chat Completions equivalent"
            )
    return parts


def responses_text(content: Any, at: str) -> tuple[str, str]:
    """(text, refusal) of Responses assistant content, a string or a list of parts."""
    if isinstance(content, str):
        return content, ""
    text: list[str] = []
    refusal: list[str] = []
    for j, part in enumerate(content if isinstance(content, list) else [content]):
        if kind_of(part) in ("output_text", "input_text", "text"):
            text.append(str(part.get("text") or ""))
        elif kind_of(part) == "refusal":
            refusal.append(str(part.get("refusal") or ""))
        else:
            raise refuse(
                f"{at}.content[{j}]", f"is a {kind_of(part)!r} part with no Chat Completions equivalent"
            )
    return "".join(text), "".join(refusal)
