"""Settings from the environment: where the model is, which route, which database."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from toolwire.exceptions import ConfigError

__all__ = ["ROUTES", "Settings"]

ROUTES = ("chat", "responses", "auto", "jsonplan")
"""The routes a user can choose for an OpenAI-compatible endpoint."""


@dataclass(kw_only=True, frozen=True)
class Settings:
    """Everything toolwire reads from its environment, each field from `TOOLWIRE_<NAME>`."""

    base_url: str | None = None
    """An OpenAI-compatible endpoint such as `http://127.0.0.1:8000/v1`; unset means the embedded model."""
    api_key: str | None = None
    model: str = "gpt-4.1-mini"
    route: str = "chat"
    database_url: str | None = None
    """SQLAlchemy URL; unset means a SQLite file in the user's data directory."""
    local_model: str | None = None
    """Path of a GGUF file to use instead of the packaged embedded model."""

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise ConfigError(f"Route {self.route!r} is not known: use one of {', '.join(ROUTES)}.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read `TOOLWIRE_*` variables, then apply the non-`None` overrides (command-line flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"TOOLWIRE_{f.name.upper()}")
            if raw:
                values[f.name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)
