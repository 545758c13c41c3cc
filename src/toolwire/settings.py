"""Settings: from a TOML file, then the environment, then command-line flags, each overriding the last.

Every field can be set in the TOML file named by `TOOLWIRE_CONFIG` (or `--config`) under its own
name (`port = 8080`), or as `TOOLWIRE_<NAME>` in the environment (`TOOLWIRE_PORT=8080`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from toolwire.exceptions import ConfigError

__all__ = ["CONFIG_ENV", "ROUTES", "Settings"]

ROUTES = ("chat", "responses", "auto", "jsonplan")
"""The routes a user can choose for an OpenAI-compatible endpoint."""

CONFIG_ENV = "TOOLWIRE_CONFIG"
"""The environment variable naming the TOML settings file."""

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(kw_only=True, frozen=True)
class Settings:
    """Everything toolwire reads from its configuration, each field also from `TOOLWIRE_<NAME>`."""

    base_url: str | None = None
    """An OpenAI-compatible endpoint such as `http://127.0.0.1:8000/v1`; unset means the embedded model."""
    api_key: str | None = None
    model: str = "gpt-4.1-mini"
    route: str = "chat"
    upstream_models: str = ""
    """More model names the gateway forwards to `base_url`, comma-separated; `model` is always one."""
    database_url: str | None = None
    """SQLAlchemy URL; unset means a SQLite file in the user's data directory."""
    local_model: str | None = None
    """Path of a GGUF file to use instead of the packaged embedded model."""
    host: str = "127.0.0.1"
    """The address `toolwire serve` listens on."""
    port: int = 8000
    """The port `toolwire serve` listens on."""
    max_body_bytes: int = 1_048_576
    """The largest request body the service accepts; larger ones get 413."""
    shutdown_timeout: float = 30.0
    """Seconds a stopping service waits for in-flight runs (and their streams) to finish."""
    key_cache_seconds: float = 1.0
    """How long a server remembers an API key that passed; a key revoked elsewhere stops within this."""
    run_timeout: float = 600.0
    """Seconds one chat run may take; a run still marked running after that was lost with its process."""
    log_level: str = "info"
    """debug, info, warning, error or critical."""

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise ConfigError(f"Route {self.route!r} is not known: use one of {', '.join(ROUTES)}.")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"Port {self.port} is out of range: use a port between 0 and 65535.")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes is {self.max_body_bytes}: allow at least 1024 bytes.")
        if self.shutdown_timeout < 0 or self.run_timeout <= 0:
            raise ConfigError("shutdown_timeout must be at least 0 and run_timeout more than 0 seconds.")
        if not 0 <= self.key_cache_seconds <= 3600:
            raise ConfigError(
                f"key_cache_seconds is {self.key_cache_seconds}: use 0 (check every request) up to 3600."
            )
        if self.log_level not in _LOG_LEVELS:
            raise ConfigError(
                f"Log level {self.log_level!r} is not known: use one of {', '.join(_LOG_LEVELS)}."
            )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        config: str | Path | None = None,
        **overrides: Any,
    ) -> Settings:
        """Read the TOML file, then `TOOLWIRE_*` variables, then the non-`None` overrides (flags).

        Args:
            environ: The environment to read; `os.environ` when `None`.
            config: A TOML settings file; `TOOLWIRE_CONFIG` names one when this is `None`.
            **overrides: Field values from the command line; `None` means not given.

        Raises:
            ConfigError: the file cannot be read, names an unknown setting, or a value has the wrong type.
        """
        env = os.environ if environ is None else environ
        path = config if config is not None else env.get(CONFIG_ENV) or None
        values: dict[str, Any] = _read_file(Path(path)) if path is not None else {}
        for f in fields(cls):
            variable = f"TOOLWIRE_{f.name.upper()}"
            raw = env.get(variable)
            if raw:
                values[f.name] = _coerce(f.name, raw, variable)
        for name, value in overrides.items():
            if value is not None:
                values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)


_KINDS: dict[str, type] = {
    "port": int,
    "max_body_bytes": int,
    "shutdown_timeout": float,
    "key_cache_seconds": float,
    "run_timeout": float,
}


def _coerce(name: str, value: Any, source: str) -> Any:
    """`value` as the type of field `name`; strings from the environment are converted."""
    kind = _KINDS.get(name, str)
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            pass
    what = {int: "a whole number", float: "a number", str: "a string"}[kind]
    raise ConfigError(f"{source} is {value!r}: set it to {what}.")


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"Cannot read the settings file {path} ({exc.strerror}); "
            f"fix the path in {CONFIG_ENV} or --config."
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"The settings file {path} is not valid TOML ({exc}); fix it.") from None
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"The settings file {path} names unknown setting(s) {', '.join(unknown)}; "
            f"use only {', '.join(sorted(known))}."
        )
    return {name: _coerce(name, value, f"{name} in {path}") for name, value in data.items()}
