"""A small support-tickets API (seed 001's integration example), real enough to call over HTTP.

FastAPI on SQLite: `POST /tickets` answers `{"status": "success", "ticket_id": "SUP-1001"}`, errors
are `{"status": "error", "message": ...}`, and `GET /tickets`, `GET /tickets/{id}` read them back.
Every ticket route needs a credential, accepted in each form a connection can send: a bearer token
(the configured one, or one issued by `POST /oauth/token` for the client-credentials grant), the
same token as an `X-API-Key` header or `api_key` query parameter, or Basic auth with the OAuth
client id and secret. `/echo` answers with the request it received, headers included, which is
what a careless API does and what redaction must survive.

`TicketsServer` runs it with uvicorn on 127.0.0.1 in a background thread; `tickets_functions`
gives the connection and the three HTTP function definitions that call it.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, unquote

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from toolwire._serving import ThreadedServer
from toolwire.tools.auth import AuthConfig
from toolwire.tools.http import Connection, FunctionDefinition

__all__ = ["TicketsServer", "TicketsState", "create_tickets_app", "tickets_functions"]

Priority = Literal["Low", "Medium", "High"]


@dataclass
class TicketsState:
    """What the app knows besides its database: credentials, issued tokens, counters."""

    token: str
    client_id: str
    client_secret: str
    token_ttl: int
    token_requests: int = 0
    """How many times `POST /oauth/token` was called."""
    issued: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def revoke_tokens(self) -> None:
        """Forget every issued OAuth2 token, as a server restart or a key rotation would."""
        with self.lock:
            self.issued.clear()

    def accepts(self, authorization: str | None, api_key: str | None) -> bool:
        """Whether a request carries a valid credential, in any of the accepted forms."""
        scheme, _, credential = (authorization or "").partition(" ")
        if scheme.lower() == "bearer":
            with self.lock:
                expires = self.issued.get(credential)
            valid = expires is not None and time.monotonic() < expires
            return valid or secrets.compare_digest(credential, self.token)
        if scheme.lower() == "basic":
            return _basic_pair(credential) == (self.client_id, self.client_secret)
        return api_key is not None and secrets.compare_digest(api_key, self.token)

    def issue(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        """Answer a client-credentials token request: the status and the JSON body."""
        with self.lock:
            self.token_requests += 1
        scheme, _, credential = (authorization or "").partition(" ")
        pair = _basic_pair(credential) if scheme.lower() == "basic" else None
        if (pair or (form.get("client_id", ""), form.get("client_secret", ""))) != (
            self.client_id,
            self.client_secret,
        ):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        issued = secrets.token_urlsafe(24)
        with self.lock:
            self.issued[issued] = time.monotonic() + self.token_ttl
        return 200, {"access_token": issued, "token_type": "Bearer", "expires_in": self.token_ttl}


class TicketIn(BaseModel):
    """A new ticket."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=200)
    priority: Priority
    description: str = Field(default="", max_length=10_000)


class _Tickets:
    """The tickets table; one SQLite connection per operation (routes run in a thread pool)."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, title TEXT NOT NULL, "
                "priority TEXT NOT NULL, description TEXT NOT NULL, created_at TEXT NOT NULL, "
                "idempotency_key TEXT UNIQUE)"
            )

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path)) as db, db:
            db.row_factory = sqlite3.Row
            yield db

    def create(self, ticket: TicketIn, key: str | None) -> tuple[str, bool]:
        """Insert a ticket; a known idempotency key returns the earlier ticket. Gives (id, replayed)."""
        with self._db() as db:
            if key and (
                row := db.execute("SELECT id FROM tickets WHERE idempotency_key = ?", (key,)).fetchone()
            ):
                return f"SUP-{1000 + row['id']}", True
            cursor = db.execute(
                "INSERT INTO tickets (title, priority, description, created_at, idempotency_key) "
                "VALUES (?, ?, ?, datetime('now'), ?)",
                (ticket.title, ticket.priority, ticket.description, key),
            )
        return f"SUP-{1000 + (cursor.lastrowid or 0)}", False

    def select(self, priority: str | None, limit: int) -> list[dict[str, Any]]:
        with self._db() as db:
            if priority is None:
                rows = db.execute("SELECT * FROM tickets ORDER BY id LIMIT ?", (limit,)).fetchall()
            else:
                rows = db.execute(
                    "SELECT * FROM tickets WHERE priority = ? ORDER BY id LIMIT ?", (priority, limit)
                ).fetchall()
        return [_ticket(row) for row in rows]

    def get(self, ticket_id: str) -> dict[str, Any] | None:
        number = ticket_id.removeprefix("SUP-")
        if not number.isdigit():
            return None
        with self._db() as db:
            row = db.execute("SELECT * FROM tickets WHERE id = ?", (int(number) - 1000,)).fetchone()
        return None if row is None else _ticket(row)


def _ticket(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "ticket_id": f"SUP-{1000 + row['id']}",
        "title": row["title"],
        "priority": row["priority"],
        "description": row["description"],
        "created_at": row["created_at"],
    }


def _fail(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail=message)


def _basic_pair(header: str) -> tuple[str, str] | None:
    try:
        user, _, password = base64.b64decode(header, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return unquote(user), unquote(password)


async def _error(request: Request, exc: Exception) -> JSONResponse:
    """Every error in the standard shape `{"status": "error", "message": ...}`."""
    if isinstance(exc, RequestValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'][1:]) or 'body'}: {error['msg']}"
            for error in exc.errors()
        )
        return JSONResponse({"status": "error", "message": f"Invalid request: {problems}"}, status_code=422)
    assert isinstance(exc, HTTPException)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    return JSONResponse(
        {"status": "error", "message": exc.detail}, status_code=exc.status_code, headers=headers
    )


def create_tickets_app(
    db_path: str | Path,
    *,
    token: str = "demo-token",
    client_id: str = "demo-client",
    client_secret: str = "demo-secret",
    token_ttl: int = 3600,
) -> FastAPI:
    """Build the tickets API on the SQLite file `db_path` (created if missing).

    Args:
        db_path: The SQLite database file.
        token: The bearer token (also accepted as `X-API-Key` or `?api_key=`).
        client_id: The OAuth2 client id (also the Basic auth user name).
        client_secret: The OAuth2 client secret (also the Basic auth password).
        token_ttl: Seconds an issued OAuth2 token is valid.
    """
    state = TicketsState(token=token, client_id=client_id, client_secret=client_secret, token_ttl=token_ttl)
    tickets = _Tickets(db_path)

    def authenticated(request: Request) -> None:
        # Read from the request, not declared as parameters: credentials are not API arguments.
        api_key = request.headers.get("x-api-key") or request.query_params.get("api_key")
        if not state.accepts(request.headers.get("authorization"), api_key):
            raise _fail(401, "Missing or invalid credentials: send Authorization: Bearer <token>.")

    app = FastAPI(title="Support tickets", version="1.0")
    app.state.tickets = state
    app.add_exception_handler(HTTPException, _error)
    app.add_exception_handler(RequestValidationError, _error)
    guarded = [Depends(authenticated)]

    @app.post("/tickets", status_code=201, dependencies=guarded)
    def create_ticket(
        ticket: TicketIn, idempotency_key: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        ticket_id, replayed = tickets.create(ticket, idempotency_key)
        return {"status": "success", "ticket_id": ticket_id, "message": "Ticket created successfully"} | (
            {"replayed": True} if replayed else {}
        )

    @app.get("/tickets", dependencies=guarded)
    def list_tickets(
        priority: Priority | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 50
    ) -> dict[str, Any]:
        return {"status": "success", "tickets": tickets.select(priority, limit)}

    # `:path` so that an id holding an (encoded) slash still reaches this route and is reported.
    @app.get("/tickets/{ticket_id:path}", dependencies=guarded)
    def get_ticket(ticket_id: str) -> dict[str, Any]:
        if (ticket := tickets.get(ticket_id)) is None:
            raise _fail(404, f"Ticket {ticket_id} not found.")
        return {"status": "success", "ticket": ticket}

    @app.post("/oauth/token", include_in_schema=False)
    async def issue_token(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
        status, body = state.issue(form, authorization)
        headers = {"WWW-Authenticate": "Basic"} if status == 401 else None
        return JSONResponse(body, status_code=status, headers=headers)

    # A diagnostic, kept out of /openapi.json (one function on four methods has no unique ids).
    methods = ["GET", "POST", "PUT", "PATCH"]

    @app.api_route("/echo", methods=methods, dependencies=guarded, include_in_schema=False)
    @app.api_route("/echo/{tail:path}", methods=methods, dependencies=guarded, include_in_schema=False)
    async def echo(request: Request) -> dict[str, Any]:
        return {
            "method": request.method,
            "raw_path": request.scope["raw_path"].decode(),
            "query": dict(request.query_params),
            "headers": dict(request.headers),
            "body": (await request.body()).decode(errors="replace"),
        }

    return app


class TicketsServer:
    """The tickets API served by uvicorn on 127.0.0.1 (a free port) in a background thread.

    Example:
        >>> with TicketsServer(tmp_path / "tickets.db", token="t0k") as server:
        ...     connection, functions = tickets_functions(server.base_url, "t0k")
    """

    def __init__(self, db_path: str | Path, **options: Any) -> None:
        self.app = create_tickets_app(db_path, **options)
        self.state: TicketsState = self.app.state.tickets
        self._serving = ThreadedServer(self.app, name="tickets-api", graceful=5)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`, without a trailing slash."""
        return self._serving.url

    def start(self) -> TicketsServer:
        """Start serving; returns once the server accepts connections."""
        self._serving.start()
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        self._serving.stop(10)

    def __enter__(self) -> TicketsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def tickets_functions(base_url: str, token: str) -> tuple[Connection, list[FunctionDefinition]]:
    """The connection to the tickets API (bearer auth) and its functions.

    `create_ticket`, `list_tickets` and `get_ticket` share the one connection; each carries its
    own path and method below it.
    """
    connection = Connection(
        name="tickets",
        url=base_url.rstrip("/"),
        method="GET",
        auth=AuthConfig(type="bearer", secrets={"token": token}),
    )
    priority = {"type": "string", "enum": ["Low", "Medium", "High"], "description": "How urgent it is."}
    create = FunctionDefinition(
        name="create_ticket",
        description="Create a support ticket. Returns the new ticket id, or the API's error message.",
        parameters={
            "type": "object",
            "required": ["title", "priority"],
            "properties": {
                "title": {"type": "string", "description": "Short title of the ticket."},
                "priority": priority,
                "description": {"type": "string", "description": "What happened, in detail."},
            },
            "additionalProperties": False,
        },
        http_request_body={"title": "$title", "priority": "$priority", "description": "$description"},
        connection="tickets",
        method="POST",
        path="/tickets",
    )
    listing = FunctionDefinition(
        name="list_tickets",
        description="List support tickets, optionally only those of one priority.",
        parameters={
            "type": "object",
            "properties": {
                "priority": priority,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 500,
                    "description": "At most this many.",
                },
            },
            "additionalProperties": False,
        },
        connection="tickets",
        path="/tickets",
    )
    get = FunctionDefinition(
        name="get_ticket",
        description="Get one support ticket by its id, such as SUP-1001.",
        parameters={
            "type": "object",
            "required": ["ticket_id"],
            "properties": {"ticket_id": {"type": "string", "description": "The ticket id, e.g. SUP-1001."}},
            "additionalProperties": False,
        },
        connection="tickets",
        path="/tickets/{ticket_id}",
    )
    return connection, [create, listing, get]
