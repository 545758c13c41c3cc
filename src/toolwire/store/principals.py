"""Users and API keys: create, list, remove, issue and revoke keys, and check a presented key.

A key reads `tw_<id>_<secret>`: `id` is 16 public hex digits that find the row, `secret` is 32 random
bytes (`secrets.token_urlsafe`). Only HMAC-SHA256(salt, secret) is stored, with a random salt per
key. A fast hash is enough here, unlike for passwords: the secret has 256 bits of entropy, so no
dictionary or brute-force search of the digest is feasible, while a slow hash (scrypt, bcrypt)
would cost tens of milliseconds of CPU on every request. The salt makes equal digests of two keys
impossible to correlate. Digests are compared in constant time.

The functions take an `AsyncSession`, so the CLI and the admin API run them inside their own
transaction. Scopes are plain strings; `admin` opens the admin API.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from toolwire.exceptions import UserError
from toolwire.store.tables import utc_now
from toolwire.store.tables_principals import ApiKey, User

__all__ = [
    "ADMIN_SCOPE",
    "KEY_PREFIX",
    "IssuedKey",
    "UserExistsError",
    "UserNotFoundError",
    "check_key",
    "create_user",
    "delete_user",
    "find_user",
    "get_user",
    "issue_key",
    "keys_of",
    "list_users",
    "normalize_scopes",
    "revoke_keys",
    "set_scopes",
    "validate_name",
]

ADMIN_SCOPE = "admin"
"""The scope that opens the admin API."""

KEY_PREFIX = "tw_"
"""Every toolwire API key starts with this, so secret scanners can recognise one."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SCOPE = re.compile(r"^[a-z][a-z0-9_.:*-]{0,63}$")
_KEY = re.compile(r"^tw_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


class UserExistsError(UserError):
    """A user of that name already exists in the tenant."""


class UserNotFoundError(UserError):
    """No user (or key) matches in the tenant."""


@dataclass(kw_only=True, frozen=True)
class IssuedKey:
    """A key just issued: the only moment its full text exists outside the caller."""

    key: str
    """The whole key, `tw_<id>_<secret>`; show it once, it cannot be recovered."""
    key_id: str
    """The public id, shown in listings and used to revoke the key."""


def _digest(salt: str, secret: str) -> str:
    return hmac.new(bytes.fromhex(salt), secret.encode(), hashlib.sha256).hexdigest()


def validate_name(name: str, tenant_id: str) -> None:
    """Check a user name and tenant id.

    Raises:
        UserError: either has characters other than letters, digits and `_.-@`, or is too long.
    """
    if not _NAME.match(name):
        raise UserError(
            f"User name {name!r} is not allowed: use 1-128 letters, digits or _.-@, starting with a "
            "letter or digit."
        )
    if not _TENANT.match(tenant_id):
        raise UserError(
            f"Tenant {tenant_id!r} is not allowed: use 1-64 letters, digits or _.-, starting with a "
            "letter or digit."
        )


def normalize_scopes(scopes: Iterable[str]) -> list[str]:
    """Scopes sorted and without duplicates; each may also be a comma- or space-separated list.

    Raises:
        UserError: a scope has characters other than lower-case letters, digits and `_.:*-`.
    """
    found: set[str] = set()
    for entry in scopes:
        for scope in entry.replace(",", " ").split():
            if not _SCOPE.match(scope):
                raise UserError(
                    f"Scope {scope!r} is not allowed: use lower-case letters, digits and _.:*- "
                    "(for example admin or items:write)."
                )
            found.add(scope)
    return sorted(found)


async def issue_key(session: AsyncSession, user: User) -> IssuedKey:
    """Create a new key for `user` and return its text, which is not stored anywhere."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    session.add(ApiKey(id=key_id, user_id=user.id, salt=salt, digest=_digest(salt, secret)))
    await session.flush()
    return IssuedKey(key=f"{KEY_PREFIX}{key_id}_{secret}", key_id=key_id)


async def create_user(
    session: AsyncSession, *, tenant_id: str, name: str, scopes: Iterable[str] = ()
) -> tuple[User, IssuedKey]:
    """Create a user with a first API key.

    Raises:
        UserError: the name, tenant or a scope is not allowed.
        UserExistsError: the tenant already has a user of that name.
    """
    validate_name(name, tenant_id)
    clean = normalize_scopes(scopes)
    if await find_user(session, tenant_id=tenant_id, name=name) is not None:
        raise UserExistsError(
            f"Tenant {tenant_id!r} already has a user named {name!r}; choose another name, "
            "or rotate that user's key."
        )
    user = User(id=f"usr_{secrets.token_hex(8)}", tenant_id=tenant_id, name=name, scopes=clean)
    session.add(user)
    await session.flush()
    return user, await issue_key(session, user)


async def find_user(session: AsyncSession, *, tenant_id: str, name: str) -> User | None:
    """The tenant's user of that name, if any."""
    return await session.scalar(select(User).where(User.tenant_id == tenant_id, User.name == name))


async def get_user(session: AsyncSession, *, tenant_id: str, user_id: str) -> User:
    """The tenant's user with that id.

    Raises:
        UserNotFoundError: the tenant has no such user (a user of another tenant is not found either).
    """
    user = await session.scalar(select(User).where(User.tenant_id == tenant_id, User.id == user_id))
    if user is None:
        raise UserNotFoundError(f"There is no user {user_id!r}; list the users to find the right id.")
    return user


async def list_users(session: AsyncSession, *, tenant_id: str | None = None) -> Sequence[User]:
    """Users ordered by tenant and name; only one tenant's when `tenant_id` is given."""
    query = select(User).order_by(User.tenant_id, User.name)
    if tenant_id is not None:
        query = query.where(User.tenant_id == tenant_id)
    return (await session.scalars(query)).all()


async def keys_of(session: AsyncSession, user_ids: Sequence[str]) -> dict[str, list[ApiKey]]:
    """The keys of each user, oldest first, revoked ones included."""
    keys: dict[str, list[ApiKey]] = {user_id: [] for user_id in user_ids}
    if user_ids:
        query = select(ApiKey).where(ApiKey.user_id.in_(user_ids)).order_by(ApiKey.created_at, ApiKey.id)
        for key in await session.scalars(query):
            keys[key.user_id].append(key)
    return keys


async def set_scopes(session: AsyncSession, user: User, scopes: Iterable[str]) -> None:
    """Replace the user's scopes.

    Raises:
        UserError: a scope is not allowed.
    """
    user.scopes = normalize_scopes(scopes)
    await session.flush()


async def revoke_keys(session: AsyncSession, user: User, *, key_id: str | None = None) -> int:
    """Revoke one key of the user, or all its working keys; returns how many were revoked.

    Raises:
        UserNotFoundError: `key_id` is not a working key of this user.
    """
    query = update(ApiKey).where(ApiKey.user_id == user.id, ApiKey.revoked_at.is_(None))
    if key_id is not None:
        query = query.where(ApiKey.id == key_id)
    result = cast(CursorResult[Any], await session.execute(query.values(revoked_at=utc_now())))
    revoked = result.rowcount
    if key_id is not None and not revoked:
        raise UserNotFoundError(f"User {user.name!r} has no working key {key_id!r}; list the keys first.")
    return revoked


async def delete_user(session: AsyncSession, user: User) -> None:
    """Delete the user and its keys (its conversations and bookkeeping data stay)."""
    # Explicit, not only ON DELETE CASCADE: a SQLite connection without foreign keys would keep them.
    await session.execute(delete(ApiKey).where(ApiKey.user_id == user.id))
    await session.delete(user)
    await session.flush()


async def check_key(session: AsyncSession, presented: str) -> tuple[User, ApiKey] | None:
    """The user and key row of a working key, or `None` for a malformed, unknown or revoked key."""
    match = _KEY.match(presented)
    if match is None:
        return None
    key_id, secret = match.groups()
    row = await session.execute(
        select(ApiKey, User)
        .join(User, User.id == ApiKey.user_id)
        .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
    )
    found = row.first()
    if found is None:
        return None
    key, user = found[0], found[1]
    if not hmac.compare_digest(_digest(key.salt, secret), key.digest):
        return None
    return user, key
