"""The web pages of `toolwire serve`: sign-in, chat, and the administrator's functions, connections and audit.

Every page is static HTML rendered from a Jinja2 template (autoescaped) plus plain JavaScript and
CSS from `/static`; the scripts call the JSON APIs (`/v1/chat`, `/admin/api/...`) like any other
client. The browser keeps the API key in `sessionStorage` and sends it only as
`Authorization: Bearer` to those APIs: it is never in a cookie or a URL, so the page requests carry
no credential, need no authentication of their own, and nothing secret is ever rendered into HTML.

Each page answer carries a strict Content-Security-Policy (everything from this server only, no
inline script or style), so the pages load nothing from elsewhere and injected markup cannot run.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader
from starlette.responses import HTMLResponse, RedirectResponse, Response

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_PATHS", "router"]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
)
"""Sent with every page: scripts, styles, images and connections from this server only."""

PAGE_PATHS = (
    "/login",
    "/chat",
    "/admin/functions",
    "/admin/functions/new",
    "/admin/connections",
    "/admin/connections/new",
    "/admin/audit",
)
"""The pages without a path parameter (`/admin/functions/{name}` and `/admin/connections/{name}` edit one)."""

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The pages are the same for everyone, but a fresh copy picks up a new version at once.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)
router.mount("/static", StaticFiles(packages=[("toolwire.service", "static")]), name="static")


@cache
def _templates() -> Environment:
    return Environment(
        loader=PackageLoader("toolwire.service", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _page(template: str, *, title: str, section: str, **values: Any) -> HTMLResponse:
    """A rendered page with the security headers.

    Args:
        template: The template's file name.
        title: The page title (before "· toolwire").
        section: The navigation entry to mark as current.
        **values: More template variables.
    """
    from toolwire import __version__

    html = (
        _templates()
        .get_template(template)
        .render(title=title, section=section, version=__version__, **values)
    )
    return HTMLResponse(html, headers=_HEADERS)


@router.get("/")
async def home() -> Response:
    """The chat: what most visitors come for (the sign-in page sends them on from there)."""
    return RedirectResponse("/chat", status_code=303)


@router.get("/favicon.ico")
async def favicon() -> Response:
    """Nothing, so browsers stop asking (and no 404 lands in the console)."""
    return Response(status_code=204, headers={"Cache-Control": "max-age=86400"})


@router.get("/login")
async def login() -> HTMLResponse:
    """Sign in with an API key."""
    return _page("login.html", title="Sign in", section="login")


@router.get("/chat")
async def chat() -> HTMLResponse:
    """Ask the assistant and watch its answer and tool calls stream in."""
    return _page("chat.html", title="Chat", section="chat")


@router.get("/admin")
async def admin_home() -> Response:
    """The first admin page."""
    return RedirectResponse("/admin/functions", status_code=303)


@router.get("/admin/functions")
async def functions() -> HTMLResponse:
    """The functions, and the OpenAPI import."""
    return _page("functions.html", title="Functions", section="functions")


@router.get("/admin/functions/new")
async def new_function() -> HTMLResponse:
    """A form for a new function."""
    return _page("function_edit.html", title="New function", section="functions", name=None)


@router.get("/admin/functions/{name}")
async def edit_function(name: str) -> HTMLResponse:
    """One function: edit, test, delete."""
    return _page("function_edit.html", title=f"Function {name}", section="functions", name=name)


@router.get("/admin/connections")
async def connections() -> HTMLResponse:
    """The connections."""
    return _page("connections.html", title="Connections", section="connections")


@router.get("/admin/connections/new")
async def new_connection() -> HTMLResponse:
    """A form for a new connection."""
    return _page("connection_edit.html", title="New connection", section="connections", name=None)


@router.get("/admin/connections/{name}")
async def edit_connection(name: str) -> HTMLResponse:
    """One connection: edit, delete; its credential shows only as set or not."""
    return _page("connection_edit.html", title=f"Connection {name}", section="connections", name=name)


@router.get("/admin/audit")
async def audit() -> HTMLResponse:
    """The audit log, filtered by user, tool, outcome and time."""
    return _page("audit.html", title="Audit", section="audit")
