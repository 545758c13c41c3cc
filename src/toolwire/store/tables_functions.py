"""Tables: HTTP functions and their connections, credentials encrypted."""

from __future__ import annotations

from toolwire.store.tables import Base

__all__ = ["Base"]
