"""The machine-readable form of a run, shared by `toolwire chat --json` and the chat API."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolwire.messages import CallTrace
    from toolwire.runner import RunResult

__all__ = ["call_json", "result_json"]


def _parsed(text: str) -> Any:
    """JSON text as its value; anything that is not JSON stays the text it is."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def call_json(trace: CallTrace) -> dict[str, Any]:
    """One answered call: name, arguments and result as JSON values where they parse, and its outcome."""
    return {
        "name": trace.name,
        "arguments": _parsed(trace.arguments) if trace.arguments else {},
        "outcome": trace.outcome,
        "result": _parsed(trace.result),
        "replayed": trace.replayed,
        "call_id": trace.call_id,
        "duration_ms": round(trace.duration_ms, 3),
    }


def result_json(result: RunResult) -> dict[str, Any]:
    """`{"answer", "calls", "rounds", "route"}` for a finished run."""
    return {
        "answer": result.answer,
        "calls": [call_json(trace) for trace in result.calls],
        "rounds": result.rounds,
        "route": result.route,
    }
