"""Between a proposal and an execution: check, authorize, run once, redact, audit.

The Gate checks every call, authorizes it, runs it under a deadline (a write at most once per
idempotency key, through the ledger), redacts the result and audits the call.
"""

from __future__ import annotations

from toolwire.gate.audit import AuditLog, AuditRecord
from toolwire.gate.gate import ERROR_CODES, CheckedCall, ErrorCode, Gate, error_result
from toolwire.gate.ledger import Ledger, OutcomeUnknown, idempotency_key, transactional
from toolwire.gate.policy import Check, Denial, Policy, ScopePolicy

__all__ = [
    "ERROR_CODES",
    "AuditLog",
    "AuditRecord",
    "Check",
    "CheckedCall",
    "Denial",
    "ErrorCode",
    "Gate",
    "Ledger",
    "OutcomeUnknown",
    "Policy",
    "ScopePolicy",
    "error_result",
    "idempotency_key",
    "transactional",
]
