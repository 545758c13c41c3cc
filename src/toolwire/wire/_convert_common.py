"""What both halves of the Chat <-> Responses mapping share: the refusal, and the field tables.

`toolwire.wire.convert` re-exports `ConversionError`; the request and response mapping lives
there, the stream bridges in `_convert_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from toolwire.wire._responses_shapes import JSON, WireFormatError

__all__ = [
    "ConversionError",
    "check_skippable",
    "converting",
    "finish_of_status",
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
