"""The web pages on the server side, without a browser: each renders with a strict CSP, from package files.

The pages need no database or model (the browser's scripts call the APIs), so the app is served here
without its startup; `tests/test_pages.py` runs them in Chromium against a real `toolwire serve`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path

import httpx2
import pytest

from toolwire.service import create_app
from toolwire.service.pages import CONTENT_SECURITY_POLICY, PAGE_PATHS
from toolwire.settings import Settings
from toolwire.testing import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(str(files("toolwire.service")))
ASSETS = sorted(
    path for folder in ("templates", "static") for path in (PACKAGE / folder).rglob("*") if path.is_file()
)
EDIT_PAGES = ("/admin/functions/create_ticket", "/admin/connections/tickets")
ALL_PAGES = (*PAGE_PATHS, *EDIT_PAGES)
KEY = "tw_0123456789abcdef_the-key-the-browser-holds"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'pages.db'}"), model=ScriptedModel())
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://toolwire") as http:
        yield http


class _Tags(HTMLParser):
    """Every start tag of a page with its attributes, and the text inside each `<script>`."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def _tags(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


@pytest.mark.parametrize("path", ALL_PAGES)
async def test_every_page_renders_with_a_strict_content_security_policy(
    client: httpx2.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY and "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert re.search(r"<title>[^<]+ · toolwire</title>", response.text)
    assert '<main id="main"' in response.text


async def test_the_home_page_leads_to_the_chat(client: httpx2.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 303
    assert response.headers["location"] == "/chat"


async def test_the_browser_asking_for_an_icon_gets_an_empty_answer(client: httpx2.AsyncClient) -> None:
    response = await client.get("/favicon.ico")
    assert response.status_code == 204 and response.content == b""


@pytest.mark.parametrize("path", ALL_PAGES)
async def test_pages_load_only_their_own_files_and_nothing_the_policy_would_block(
    client: httpx2.AsyncClient, path: str
) -> None:
    page = _tags((await client.get(path)).text)
    loaded = [a.get("src") or a.get("href") for tag, a in page.tags if tag in ("script", "link", "img")]
    assert loaded and all(url and url.startswith("/static/") for url in loaded), loaded
    for url in loaded:
        assert url is not None
        answer = await client.get(url)
        assert answer.status_code == 200, url
        kind = "text/css" if ".css" in url else "text/javascript"
        assert answer.headers["content-type"].startswith(kind)
    # Inline code and styles would be refused by the policy: there must be none.
    assert page.script_text == []
    for tag, attributes in page.tags:
        assert tag != "style"
        assert "style" not in attributes, tag
        assert not [name for name in attributes if name.startswith("on")], (tag, attributes)


@pytest.mark.parametrize("asset", ASSETS, ids=lambda p: p.name)
def test_templates_and_scripts_name_no_outside_address(asset: Path) -> None:
    text = asset.read_text()
    # Only the documentation domain appears, as an example in a hint; nothing is loaded from it.
    hosts = re.findall(r"\b(?:https?|wss?|ftp)://([^/\s\"'<>)]+)", text)
    assert all(host == "example.com" or host.endswith(".example.com") for host in hosts), hosts
    loads = r"""(?:src|href|action)=["']?\s*//|url\(\s*["']?//|fetch\(\s*["'`]//|import\s*\(?\s*["']//"""
    assert not re.search(loads, text), asset.name  # protocol-relative addresses
    assert "@import" not in text


@pytest.mark.parametrize("asset", [a for a in ASSETS if a.suffix == ".js"], ids=lambda p: p.name)
def test_scripts_keep_the_key_in_the_tab_only(asset: Path) -> None:
    text = asset.read_text()
    assert "document.cookie" not in text
    assert "localStorage" not in text
    assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "eval(" not in text


@pytest.mark.parametrize("path", ALL_PAGES)
async def test_the_key_never_appears_in_a_page(client: httpx2.AsyncClient, path: str) -> None:
    response = await client.get(
        path, headers={"Authorization": f"Bearer {KEY}", "Cookie": f"key={KEY}"}, params={"key": KEY}
    )
    assert response.status_code == 200
    assert KEY not in response.text
    assert "set-cookie" not in response.headers


async def test_a_name_in_the_address_is_escaped_in_the_page(client: httpx2.AsyncClient) -> None:
    response = await client.get('/admin/functions/x"><img src=x onerror=alert(1)>')
    assert response.status_code == 200
    assert "<img src=x" not in response.text
    assert 'data-name="x&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"' in response.text


@pytest.mark.parametrize("path", ALL_PAGES)
async def test_every_form_field_has_a_label(client: httpx2.AsyncClient, path: str) -> None:
    page = _tags((await client.get(path)).text)
    labelled = {a.get("for") for tag, a in page.tags if tag == "label"}
    for tag, attributes in page.tags:
        if tag in ("input", "select", "textarea") and attributes.get("type") != "hidden":
            assert attributes.get("id") in labelled or attributes.get("aria-label"), (tag, attributes)


async def test_a_missing_or_escaping_static_path_is_answered_404_as_json(client: httpx2.AsyncClient) -> None:
    for path in ("/static/missing.js", "/static/%2e%2e/pages.py", "/static/..%2fpages.py"):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_templates_and_static_files_ship_in_the_package() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {
        pattern.removeprefix("**/*") for pattern in patterns["toolwire"] if pattern.startswith("**/*.")
    }
    names = {asset.name for asset in ASSETS}
    assert {
        "base.html",
        "app.css",
        "app.js",
        "chat.js",
        "admin.js",
        "functions.js",
        "connections.js",
    } <= names
    for asset in ASSETS:
        assert asset.suffix in shipped, f"{asset.name} would be left out of the package"


@pytest.mark.parametrize("path", EDIT_PAGES)
async def test_delete_waits_until_the_page_has_loaded_what_it_deletes(
    client: httpx2.AsyncClient, path: str
) -> None:
    # The script enables it once the item is loaded and the confirmation is wired up; a click
    # before that would do nothing at all.
    page = (await client.get(path)).text
    assert re.search(r'<button[^>]*id="delete-start"[^>]*\bdisabled\b', page), page
    script = (await client.get("/static/admin.js")).text
    assert "start.disabled = false" in script
