"""The admin API for users and their API keys, under `/admin/api/users`.

An administrator (a key with the `admin` scope) manages the users of its own tenant only: a user
of another tenant is answered 404, exactly like one that does not exist. A key's text is returned
once, when it is issued; listings show only key ids and dates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from toolwire.exceptions import UserError
from toolwire.service.auth import Principal, require_admin
from toolwire.service.errors import ApiError
from toolwire.service.schemas import (
    ErrorResponse,
    KeyIssued,
    KeyOut,
    UserCreate,
    UserCreated,
    UserList,
    UserOut,
    UserUpdate,
)
from toolwire.service.state import ServiceState, get_state
from toolwire.store import principals
from toolwire.store.tables_principals import ApiKey, User

__all__ = ["router"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed JSON, wrong types or unknown fields."},
    401: {"model": ErrorResponse, "description": "Missing, unknown or revoked API key."},
    403: {"model": ErrorResponse, "description": "The key lacks the admin scope."},
    404: {"model": ErrorResponse, "description": "No such user (or key) in the admin's tenant."},
    409: {
        "model": ErrorResponse,
        "description": "The name is taken, or the change would lock the admin out.",
    },
}

router = APIRouter(prefix="/admin/api", tags=["admin: users"], responses=_ERRORS)

Admin = Annotated[Principal, Depends(require_admin)]
State = Annotated[ServiceState, Depends(get_state)]


def _user_out(user: User, keys: Sequence[ApiKey]) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "tenant_id": user.tenant_id,
        "scopes": list(user.scopes),
        "created_at": user.created_at,
        "keys": [KeyOut(id=k.id, created_at=k.created_at, revoked_at=k.revoked_at) for k in keys],
    }


def _refused(exc: UserError) -> ApiError:
    if isinstance(exc, principals.UserNotFoundError):
        return ApiError(404, str(exc), code="not_found")
    if isinstance(exc, principals.UserExistsError):
        return ApiError(409, str(exc), param="name", code="user_exists")
    return ApiError(400, str(exc), code="invalid_value")


async def _user(session: AsyncSession, admin: Principal, user_id: str) -> User:
    try:
        return await principals.get_user(session, tenant_id=admin.tenant_id, user_id=user_id)
    except UserError as exc:
        raise _refused(exc) from None


@router.get("/users", summary="List the users of the admin's tenant")
async def list_users(admin: Admin, state: State) -> UserList:
    """Every user of the tenant, by name, with its keys."""
    async with state.db.transaction() as session:
        users = await principals.list_users(session, tenant_id=admin.tenant_id)
        keys = await principals.keys_of(session, [u.id for u in users])
    return UserList(data=[UserOut(**_user_out(u, keys[u.id])) for u in users])


@router.post("/users", status_code=201, summary="Create a user and its first API key")
async def create_user(body: UserCreate, admin: Admin, state: State) -> UserCreated:
    """The new user, in the admin's tenant; `api_key` is shown only in this answer."""
    try:
        async with state.db.transaction(write=True) as session:
            user, issued = await principals.create_user(
                session, tenant_id=admin.tenant_id, name=body.name, scopes=body.scopes
            )
            keys = await principals.keys_of(session, [user.id])
    except UserError as exc:
        raise _refused(exc) from None
    return UserCreated(**_user_out(user, keys[user.id]), api_key=issued.key)


@router.get("/users/{user_id}", summary="Show one user")
async def get_user(user_id: str, admin: Admin, state: State) -> UserOut:
    """The user and its keys."""
    async with state.db.transaction() as session:
        user = await _user(session, admin, user_id)
        keys = await principals.keys_of(session, [user.id])
    return UserOut(**_user_out(user, keys[user.id]))


@router.patch("/users/{user_id}", summary="Replace a user's scopes")
async def update_user(user_id: str, body: UserUpdate, admin: Admin, state: State) -> UserOut:
    """The user with its new scopes; an admin cannot take `admin` away from itself."""
    if user_id == admin.user_id and principals.ADMIN_SCOPE not in _scopes(body.scopes):
        raise ApiError(
            409,
            "Removing the admin scope from yourself would lock you out; let another admin do it.",
            param="scopes",
            code="self_lockout",
        )
    try:
        async with state.db.transaction(write=True) as session:
            user = await _user(session, admin, user_id)
            await principals.set_scopes(session, user, body.scopes)
            keys = await principals.keys_of(session, [user.id])
    except UserError as exc:
        raise _refused(exc) from None
    state.keys.clear()
    return UserOut(**_user_out(user, keys[user.id]))


def _scopes(scopes: Sequence[str]) -> list[str]:
    """Scopes normalized, a 400 when one is not allowed."""
    try:
        return principals.normalize_scopes(scopes)
    except UserError as exc:
        raise _refused(exc) from None


@router.delete("/users/{user_id}", status_code=204, summary="Delete a user and its keys")
async def delete_user(user_id: str, admin: Admin, state: State) -> Response:
    """Delete the user; its conversations and bookkeeping data stay. An admin cannot delete itself."""
    if user_id == admin.user_id:
        raise ApiError(
            409, "You cannot delete yourself; let another admin do it.", param="user_id", code="self_lockout"
        )
    async with state.db.transaction(write=True) as session:
        user = await _user(session, admin, user_id)
        await principals.delete_user(session, user)
    state.keys.clear()
    return Response(status_code=204)


@router.post("/users/{user_id}/keys", status_code=201, summary="Issue another API key for a user")
async def issue_key(user_id: str, admin: Admin, state: State) -> KeyIssued:
    """A new key; the user's other keys keep working. `api_key` is shown only in this answer."""
    async with state.db.transaction(write=True) as session:
        user = await _user(session, admin, user_id)
        issued = await principals.issue_key(session, user)
    return KeyIssued(id=issued.key_id, api_key=issued.key)


@router.delete("/users/{user_id}/keys/{key_id}", status_code=204, summary="Revoke one API key")
async def revoke_key(user_id: str, key_id: str, admin: Admin, state: State) -> Response:
    """The key stops working at once on this server, and within `key_cache_seconds` on the others."""
    try:
        async with state.db.transaction(write=True) as session:
            user = await _user(session, admin, user_id)
            await principals.revoke_keys(session, user, key_id=key_id)
    except UserError as exc:
        raise _refused(exc) from None
    state.keys.clear()
    return Response(status_code=204)
