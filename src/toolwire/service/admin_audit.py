"""The admin API for the audit log: `GET /admin/api/audit`, the tool calls of the admin's tenant.

Records are read through `toolwire.gate.audit.AuditLog`, always filtered on the administrator's own
tenant, so no filter can reach another tenant's calls. Newest first.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import AwareDatetime, BaseModel

from toolwire.gate.audit import AuditLog
from toolwire.service.auth import Principal, require_admin
from toolwire.service.schemas import ErrorResponse
from toolwire.service.state import ServiceState, get_state

__all__ = ["AuditList", "AuditOut", "router"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": ErrorResponse,
        "description": "A filter has the wrong type (a `since` without time zone...).",
    },
    401: {"model": ErrorResponse, "description": "Missing, unknown or revoked API key."},
    403: {"model": ErrorResponse, "description": "The key lacks the admin scope."},
}

router = APIRouter(prefix="/admin/api", tags=["admin: audit"], responses=_ERRORS)


class AuditOut(BaseModel):
    """One proposed call and what became of it; never its result."""

    id: int
    at: dt.datetime
    tenant_id: str
    user_id: str
    request_id: str
    call_id: str
    tool: str
    arguments_digest: str
    """SHA-256 of the redacted canonical arguments: equal calls share it."""
    outcome: str
    """`ok` or the error code."""
    duration_ms: float
    replayed: bool
    idempotency_key: str | None
    arguments: str | None
    """The redacted arguments, only when the audit log keeps them."""


class AuditList(BaseModel):
    """Audit records, newest first."""

    object: Literal["list"] = "list"
    data: list[AuditOut]


@router.get("/audit", summary="The audit log of the admin's tenant, filtered")
async def audit(
    admin: Annotated[Principal, Depends(require_admin)],
    state: Annotated[ServiceState, Depends(get_state)],
    user_id: Annotated[str | None, Query(max_length=128, description="Only this user's calls.")] = None,
    tool: Annotated[str | None, Query(max_length=255, description="Only calls naming this tool.")] = None,
    outcome: Annotated[str | None, Query(max_length=32, description="`ok` or an error code.")] = None,
    request_id: Annotated[str | None, Query(max_length=255, description="Only one request's calls.")] = None,
    since: Annotated[
        AwareDatetime | None, Query(description="Only calls at or after this moment (with time zone).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many records.")] = 100,
) -> AuditList:
    """Calls of the tenant matching every given filter, newest first."""
    records = await AuditLog(state.db).query(
        tenant_id=admin.tenant_id,
        user_id=user_id,
        tool=tool,
        outcome=outcome,
        request_id=request_id,
        since=since,
        limit=limit,
    )
    return AuditList(data=[AuditOut.model_validate(record, from_attributes=True) for record in records])
