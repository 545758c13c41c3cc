"""The conformance table as a person reads it (one line per row) and as a machine reads it (JSON)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from toolwire.conformance.probe import Row, Target

__all__ = ["failed", "render_json", "render_lines", "summary"]

_WIDTH = max(len(name) for name in ("read-only call", "invalid arguments", "repeated request"))


def summary(rows: Sequence[Row]) -> dict[str, int]:
    """How many rows passed, failed and were skipped."""
    counts = Counter(row.status for row in rows)
    return {"passed": counts["PASS"], "failed": counts["FAIL"], "skipped": counts["SKIP"]}


def failed(rows: Sequence[Row]) -> bool:
    """Whether any row failed (the command then exits non-zero)."""
    return any(row.status == "FAIL" for row in rows)


def render_lines(rows: Sequence[Row], target: Target) -> list[str]:
    """A heading, one line per row (`PASS  name  evidence`), and a closing count."""
    lines = [f"toolwire conformance: model {target.model!r} at {target.base_url}, route {target.route}"]
    for row in rows:
        route = f" [{row.route}]" if row.route else ""
        lines.append(f"{row.status:<4}  {row.name:<{_WIDTH}}  {row.detail}{route}")
    counts = summary(rows)
    lines.append(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return lines


def render_json(rows: Sequence[Row], target: Target) -> dict[str, Any]:
    """`{"target", "rows", "summary", "ok"}`; the API key is never included."""
    return {
        "target": {"base_url": target.base_url, "model": target.model, "route": target.route},
        "rows": [
            {
                "name": row.name,
                "status": row.status,
                "detail": row.detail,
                "route": row.route,
                "evidence": row.evidence,
            }
            for row in rows
        ],
        "summary": summary(rows),
        "ok": not failed(rows),
    }
