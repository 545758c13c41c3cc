"""The evidence suite of seed 003, runnable against any OpenAI-compatible endpoint.

`run_suite(Target(base_url=..., model=...))` runs one row per test of the evidence table and
returns `Row`s with PASS, FAIL or SKIP and the evidence or reason; `toolwire conformance` prints
them and exits non-zero on any FAIL.
"""

from __future__ import annotations

from toolwire.conformance.probe import Row, Status, Target
from toolwire.conformance.report import render_json, render_lines
from toolwire.conformance.suite import ROWS, run_suite

__all__ = ["ROWS", "Row", "Status", "Target", "render_json", "render_lines", "run_suite"]
