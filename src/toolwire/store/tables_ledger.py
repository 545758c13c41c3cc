"""Tables: The idempotency ledger and the audit log."""

from __future__ import annotations

from toolwire.store.tables import Base

__all__ = ["Base"]
