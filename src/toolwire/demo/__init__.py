"""Demonstrations: the bookkeeping assistant of the specification."""

from __future__ import annotations

__all__: list[str] = []
