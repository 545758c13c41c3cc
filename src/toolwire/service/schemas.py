"""The service's request and response bodies, as pydantic models (the edge; dataclasses inside).

Request models are strict: unknown fields and values of the wrong JSON type are refused with a 400
naming the field, instead of being ignored or coerced (`"stream": "yes"` is an error, not `True`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CONVERSATION_ID_PATTERN",
    "REQUEST_ID_PATTERN",
    "CallOut",
    "ChatMessageIn",
    "ChatRequest",
    "ChatResponse",
    "ErrorDetail",
    "ErrorResponse",
    "KeyIssued",
    "KeyOut",
    "UserCreate",
    "UserCreated",
    "UserList",
    "UserOut",
    "UserUpdate",
]

REQUEST_ID_PATTERN = r"^[\x21-\x7e]{1,128}$"
"""1-128 visible ASCII characters: a UUID, a ULID, `order-1234:retry`..."""
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

_STRICT = ConfigDict(extra="forbid", strict=True)


class ErrorDetail(BaseModel):
    """What went wrong, in OpenAI's shape."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorDetail


class ChatMessageIn(BaseModel):
    """One message of the application's request: what the user said (or, for context, the assistant)."""

    model_config = _STRICT

    role: Literal["user", "assistant"]
    content: str = Field(min_length=1)


class ChatRequest(BaseModel):
    """`POST /v1/chat`: new messages for a new or a stored conversation."""

    model_config = _STRICT

    messages: list[ChatMessageIn] = Field(min_length=1, max_length=100)
    """The new messages, oldest first; the last one is the user's."""
    request_id: str = Field(pattern=REQUEST_ID_PATTERN)
    """The application's id of this request: a repeat gets the stored outcome, never a second run."""
    conversation_id: str | None = Field(default=None, pattern=CONVERSATION_ID_PATTERN)
    """Continue this conversation of the same user; leave it out to start a new one."""
    stream: bool = False
    """Answer with Server-Sent Events: text deltas, calls as proposed and finished, then the result."""

    @model_validator(mode="after")
    def _ends_with_the_user(self) -> ChatRequest:
        if self.messages[-1].role != "user":
            raise ValueError("the last message must have role 'user': it is what the assistant answers")
        return self


class CallOut(BaseModel):
    """One call the model proposed and what became of it."""

    name: str
    arguments: Any
    """The arguments as JSON when they parse, else the raw text the model sent."""
    outcome: str
    """`ok` or the error code (`invalid_arguments`, `forbidden`, `timeout`...)."""
    result: Any
    """What the model saw, as JSON when it parses."""
    replayed: bool
    """True when a write was not executed again but its stored result returned."""
    call_id: str
    duration_ms: float


class ChatResponse(BaseModel):
    """The outcome of a run; also the data of the final `done` event of a stream."""

    answer: str
    calls: list[CallOut]
    rounds: int
    """How many model requests the run made."""
    route: str
    """The route that produced the answer (`chat`, `responses`, `jsonplan`...)."""
    conversation_id: str
    """Send it with the next message to continue the conversation."""


class KeyOut(BaseModel):
    """An API key as listings show it: never its secret."""

    id: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


class UserOut(BaseModel):
    """A user of the admin's tenant and its keys."""

    id: str
    name: str
    tenant_id: str
    scopes: list[str]
    created_at: dt.datetime
    keys: list[KeyOut]


class UserList(BaseModel):
    """The users of the admin's tenant, by name."""

    object: Literal["list"] = "list"
    data: list[UserOut]


class UserCreate(BaseModel):
    """`POST /admin/api/users`: a new user of the admin's own tenant."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=128)
    scopes: list[str] = Field(default_factory=list, max_length=64)


class UserUpdate(BaseModel):
    """`PATCH /admin/api/users/{id}`: replace the user's scopes."""

    model_config = _STRICT

    scopes: list[str] = Field(max_length=64)


class UserCreated(UserOut):
    """The new user, with its first key: `api_key` is shown this once."""

    api_key: str


class KeyIssued(BaseModel):
    """A new key: `api_key` is shown this once."""

    id: str
    api_key: str
