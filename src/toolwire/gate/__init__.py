"""Between a proposal and an execution: the Gate checks every call, then runs it under a deadline."""

from __future__ import annotations

from toolwire.gate.gate import ERROR_CODES, CheckedCall, ErrorCode, Gate, error_result

__all__ = ["ERROR_CODES", "CheckedCall", "ErrorCode", "Gate", "error_result"]
