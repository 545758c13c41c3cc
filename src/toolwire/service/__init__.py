"""The HTTP service: `create_app(settings)` builds it, `toolwire serve` runs it."""

from __future__ import annotations

from toolwire.service.app import create_app

__all__ = ["create_app"]
