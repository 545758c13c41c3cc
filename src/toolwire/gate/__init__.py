"""Between a proposal and an execution: check, authorize, run once, redact, audit.

The Gate checks every call, authorizes it, runs it under a deadline (a write at most once per
idempotency key, through the ledger), redacts the result and audits the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolwire.gate.gate import ERROR_CODES, CheckedCall, ErrorCode, Gate, error_result
from toolwire.gate.keys import OutcomeUnknown, idempotency_key, transactional
from toolwire.gate.policy import Check, Denial, Policy, ScopePolicy

if TYPE_CHECKING:
    from toolwire.gate.audit import AuditLog, AuditRecord
    from toolwire.gate.ledger import Ledger

# The database-backed parts load SQLAlchemy: imported on first use, so a Gate without a database
# (and `toolwire --help`) starts fast.
_LAZY = {
    "AuditLog": "toolwire.gate.audit",
    "AuditRecord": "toolwire.gate.audit",
    "Ledger": "toolwire.gate.ledger",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'toolwire.gate' has no attribute {name!r}")


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
