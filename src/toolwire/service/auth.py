"""Principals: who calls the service, from the API key in `Authorization: Bearer <key>`.

The key's user, tenant and scopes become a `Principal`, and from it the Context of every run, so
the policy and the tools see the caller's identity, never anything the request body claims. Keys
are checked against the salted hashes in the database; a key that passed is remembered by this
process for `key_cache_seconds` (default 1 s) so a busy client does not pay a database round trip
on every request. A change made through this process's admin API (revoking a key, deleting a user,
new scopes) empties that memory at once; a change made elsewhere (`toolwire users`, another
server) takes effect within `key_cache_seconds` on every server. `key_cache_seconds = 0` checks the
database on every request. A key that fails is never remembered, so a new key works at once. How
keys are made and stored is described in `toolwire.store.principals`.

Routers depend on `require_principal` (any valid key) or `require_admin` (a key with the `admin`
scope); both answer 401 / 403 with OpenAI's error body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from toolwire.service.errors import ApiError
from toolwire.service.state import ServiceState, get_state
from toolwire.store import Database
from toolwire.store.principals import ADMIN_SCOPE, check_key

__all__ = ["Principal", "authenticate", "require_admin", "require_principal"]

_bearer = HTTPBearer(auto_error=False, description="An API key made with `toolwire users add`.")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


@dataclass(kw_only=True, frozen=True)
class Principal:
    """The caller behind an API key."""

    user_id: str
    tenant_id: str
    name: str
    """The user's name within the tenant."""
    scopes: frozenset[str]
    key_id: str
    """The public id of the key that was presented."""

    @property
    def is_admin(self) -> bool:
        """Whether the key opens the admin API."""
        return ADMIN_SCOPE in self.scopes

    def context_values(self) -> dict[str, Any]:
        """The identity fields of a `Context` for a run on this principal's behalf."""
        return {"user_id": self.user_id, "tenant_id": self.tenant_id, "scopes": self.scopes}


async def authenticate(db: Database, key: str) -> Principal | None:
    """The principal of a working key, or `None` when the key is malformed, unknown or revoked."""
    async with db.transaction() as session:
        found = await check_key(session, key)
    if found is None:
        return None
    user, row = found
    return Principal(
        user_id=user.id,
        tenant_id=user.tenant_id,
        name=user.name,
        scopes=frozenset(user.scopes),
        key_id=row.id,
    )


async def require_principal(
    request: Request,
    state: Annotated[ServiceState, Depends(get_state)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Principal:
    """The FastAPI dependency for every `/v1` route: the caller, or 401.

    Raises:
        ApiError: 401 when the key is missing, malformed, unknown or revoked.
    """
    return await principal_of(request, state, credentials.credentials if credentials else None)


async def principal_of(request: Request, state: ServiceState, key: str | None = None) -> Principal:
    """The caller of `request` from its bearer key (or the `key` given), or 401.

    `require_principal` without FastAPI's dependency resolution, for the gateway's hot path; a
    route calling it documents its security with `BEARER_SECURITY` in `openapi_extra`.

    Raises:
        ApiError: 401 when the key is missing, malformed, unknown or revoked.
    """
    if key is None:
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            key = ""
    key = key.strip()
    if not key:
        raise ApiError(
            401,
            "No API key was sent; send one as 'Authorization: Bearer <key>' "
            "(an administrator makes one with toolwire users add).",
            code="missing_api_key",
            headers=_CHALLENGE,
        )
    principal = state.keys.get(key)
    if principal is None:
        principal = await authenticate(state.db, key)
        if principal is not None:
            state.keys.put(key, principal)
    if principal is None:
        raise ApiError(
            401,
            "The API key is not valid (unknown, revoked or mistyped); check it or ask an administrator "
            "for a new one.",
            code="invalid_api_key",
            headers=_CHALLENGE,
        )
    # The access log names the caller; the key itself is never logged.
    request.state.principal = principal
    return principal


async def require_admin(principal: Annotated[Principal, Depends(require_principal)]) -> Principal:
    """The FastAPI dependency for the admin API: a caller whose key has the `admin` scope, or 403.

    Raises:
        ApiError: 401 as for `require_principal`; 403 when the key lacks the `admin` scope.
    """
    if not principal.is_admin:
        raise ApiError(
            403,
            f"This API key lacks the '{ADMIN_SCOPE}' scope; use an administrator's key for the admin API.",
            code="insufficient_scope",
        )
    return principal
