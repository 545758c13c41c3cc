"""Every error toolwire raises, under one root.

```
ToolwireError
├── UserError                  misconfiguration: something the user must change
│   ├── ConfigError            a missing or invalid setting
│   ├── ToolDefinitionError    a tool that cannot be offered to a model
│   └── WireFormatError        a request in a wire format that cannot be read or mapped (param)
└── RunError                   a failure while a run is under way
    ├── ModelError             the model endpoint failed or answered nonsense
    │   ├── ModelHTTPError     an HTTP status >= 400 from the endpoint (status_code, body)
    │   ├── ModelConnectionError   the endpoint could not be reached or the connection broke
    │   ├── ModelResponseError     a response or stream that cannot be read as a turn
    │   ├── ToolsUnsupportedError  the endpoint refuses `tools` for this model
    │   └── RouteUnsupportedError  the endpoint does not serve this wire route
    └── StorageError           the database failed (locked, unreachable, migration missing)
```

Errors a *model* can cause (unknown tool, invalid arguments, a tool that fails) are never raised:
they become a `ToolResult` with a code, so the model can correct itself. Everything here carries a
message that is one sentence saying what to do.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponseError",
    "RouteUnsupportedError",
    "RunError",
    "StorageError",
    "ToolDefinitionError",
    "ToolsUnsupportedError",
    "ToolwireError",
    "UserError",
    "WireFormatError",
]


class ToolwireError(Exception):
    """The root of every error toolwire raises."""


class UserError(ToolwireError):
    """Something the user must change: a setting, a tool definition, an argument."""


class ConfigError(UserError):
    """A missing or invalid setting."""


class ToolDefinitionError(UserError):
    """A tool that cannot be offered to a model (bad name, schema, or signature)."""


class WireFormatError(UserError):
    """A request or item in a wire format that cannot be read, or cannot be mapped to the other format."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        """The request field at fault, as OpenAI's error bodies name it (`messages[2].content`)."""


class RunError(ToolwireError):
    """A failure while a run is under way."""


class ModelError(RunError):
    """The model endpoint failed or answered something that cannot be used."""


class ModelHTTPError(ModelError):
    """The model endpoint answered with an HTTP error status."""

    def __init__(self, message: str, *, status_code: int, body: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        """The HTTP status the endpoint answered."""
        self.body = body
        """The response body, as text (possibly cut)."""


class ModelConnectionError(ModelError):
    """The model endpoint could not be reached, or the connection broke mid-response."""


class ModelResponseError(ModelError):
    """A response or stream that cannot be read as a turn (malformed JSON, cut-off stream...)."""


class ToolsUnsupportedError(ModelHTTPError):
    """The endpoint refuses `tools` for this model; the JSON-plan route can take over."""


class RouteUnsupportedError(ModelHTTPError):
    """The endpoint does not serve the requested wire route (404/405 or a 400 saying so)."""


class StorageError(RunError):
    """The database failed: locked, unreachable, or missing its migrations."""
