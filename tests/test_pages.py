"""The web pages in headless Chromium, against a real `toolwire serve` on 127.0.0.1.

The service runs as its own process (`python -m toolwire serve`) on a SQLite file, with the scripted
OpenAI-compatible server as its model and the demo tickets API as the system its functions call.
Chromium is Debian's `/usr/bin/chromium`, driven by Playwright for Python; where either is missing
the tests are skipped with the reason (and fail in CI, which must run them).

A screenshot of every page visited goes to `test-output/pages/` at the repository root (git-ignored),
so a person can look at what the pages show.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from cryptography.fernet import Fernet

from service_support import add_user, free_port, sqlite_url
from toolwire.demo.tickets import TicketsServer, tickets_functions
from toolwire.messages import ToolResult, UserMessage
from toolwire.testing.server import ScriptedServer, Step

T = TypeVar("T")
CHROMIUM = Path("/usr/bin/chromium")
_IN_CI = os.environ.get("CI") == "true"

if _IN_CI:
    # CI must run the browser tests: a missing Playwright or Chromium fails there instead of skipping.
    import playwright.sync_api as playwright_api

    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing; install Debian's chromium package (apt-get install chromium)"
    )
else:
    playwright_api = pytest.importorskip(
        "playwright.sync_api",
        reason="Playwright for Python is not installed; `make install` brings it with the dev extra",
    )
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing; install Debian's chromium package (apt-get install chromium as root)",
            allow_module_level=True,
        )

Browser = playwright_api.Browser
Page = playwright_api.Page
expect = playwright_api.expect

pytestmark = pytest.mark.browser

SHOTS = Path(__file__).resolve().parent.parent / "test-output" / "pages"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TICKETS_TOKEN = "tickets-token-7f3a-never-shown"
QUESTION = "The printer on floor 3 is on fire, please open a ticket."
FIRST_WORDS = "Let me open a ticket for that."


def _model_script(body: dict[str, Any], route: str) -> Step:
    """The scripted model: opens a ticket when asked, then reports its id; counts the user's messages."""
    transcript = ScriptedServer.read_transcript(body, route)
    last = transcript[-1]
    if isinstance(last, ToolResult):
        answer = json.loads(last.content)
        # The delay keeps the run open after its call finished, so the page shows a run in progress.
        return Step.reply(
            f"Ticket {answer['ticket_id']} is open with priority High; facilities will see it first.",
            latency=1.5,
        )
    said = [m for m in transcript if isinstance(m, UserMessage)]
    if "refuse" in said[-1].content:
        return Step.error(400, "The scripted model refuses this request.")
    if "printer" in said[-1].content:
        arguments = {"title": "Printer on fire", "priority": "High", "description": "Floor 3."}
        return Step.text_and_call(FIRST_WORDS, "create_ticket", arguments)
    return Step.reply(f"You have sent {len(said)} messages in this conversation.")


@dataclass
class Service:
    url: str
    admin_key: str
    """An administrator of tenant acme."""
    story_key: str
    """An administrator of tenant story, whose functions, connections and calls only one test makes."""
    user_key: str
    """A user of tenant acme without the admin scope."""
    tickets: TicketsServer

    def api(self, method: str, path: str, body: Any = None) -> httpx2.Response:
        """A call to the admin API as the administrator, for setting up what a test does not show."""
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        return httpx2.request(method, self.url + path, json=body, headers=headers, timeout=10)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    # In a thread of its own: Playwright's synchronous API keeps an event loop running in this one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("pages")
    database = sqlite_url(folder)
    _, admin_key = _run(add_user(database, "root", scopes=("admin",)))
    _, story_key = _run(add_user(database, "dana", tenant="story", scopes=("admin",)))
    _, user_key = _run(add_user(database, "alice"))
    port = free_port()
    with (
        TicketsServer(folder / "tickets.db", token=TICKETS_TOKEN) as tickets,
        ScriptedServer(_model_script) as model,
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
        env |= {
            "TOOLWIRE_DATABASE_URL": database,
            "TOOLWIRE_BASE_URL": model.base_url,
            "TOOLWIRE_MODEL": "scripted",
            "TOOLWIRE_API_KEY": "sk-model-key",
            "TOOLWIRE_PORT": str(port),
            "TOOLWIRE_SECRET_KEY": Fernet.generate_key().decode(),
            "TOOLWIRE_SHUTDOWN_TIMEOUT": "5",
        }
        log = (folder / "serve.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "toolwire", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, process, folder / "serve.log")
            yield Service(url, admin_key, story_key, user_key, tickets)
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"toolwire serve stopped: {log.read_text()}"
        try:
            if httpx2.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"toolwire serve did not become ready: {log.read_text()}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Tab:
    page: Page
    service: Service
    problems: list[str]
    """Script errors and Content-Security-Policy refusals seen in the page."""

    def go(self, path: str) -> None:
        self.page.goto(self.service.url + path)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def sign_in(self, key: str | None = None) -> None:
        self.go("/login")
        self.page.fill("#api-key", key or self.service.admin_key)
        self.page.press("#api-key", "Enter")
        self.page.wait_for_url(re.compile(r"/chat$"))


def _tab(browser: Browser, service: Service, **context: Any) -> Iterator[Tab]:
    ctx = browser.new_context(**({"viewport": {"width": 1280, "height": 900}} | context))
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on(
        "console",
        lambda message: problems.append(message.text) if "Content Security Policy" in message.text else None,
    )
    yield Tab(page, service, problems)
    ctx.close()
    assert problems == []


@pytest.fixture
def tab(browser: Browser, service: Service) -> Iterator[Tab]:
    yield from _tab(browser, service)


@pytest.fixture
def narrow_tab(browser: Browser, service: Service) -> Iterator[Tab]:
    yield from _tab(browser, service, viewport={"width": 390, "height": 844}, is_mobile=True)


def _ensure_connection(service: Service, name: str) -> None:
    body = {
        "name": name,
        "url": service.tickets.base_url,
        "auth": {"type": "bearer", "secrets": {"token": TICKETS_TOKEN}},
    }
    response = service.api("POST", "/admin/api/connections", body)
    assert response.status_code in (201, 409), response.text


# --- signing in ----------------------------------------------------------------------------------


def test_sign_in_shows_the_server_sentence_for_a_wrong_key_and_keeps_the_key_in_the_tab(tab: Tab) -> None:
    page = tab.page
    tab.go("/chat")
    page.wait_for_url(re.compile(r"/login\?next=%2Fchat$"))
    expect(page.locator("#api-key")).to_be_focused()
    page.keyboard.type("tw_not-a-real-key")
    page.keyboard.press("Enter")
    error = page.locator("#api-key-error")
    expect(error).to_have_text(re.compile(r"^The API key is not valid \(unknown, revoked or mistyped\)"))
    expect(page.locator("#api-key")).to_have_attribute("aria-invalid", "true")
    tab.shot("login-refused")

    page.fill("#api-key", tab.service.admin_key)
    page.keyboard.press("Enter")
    page.wait_for_url(tab.service.url + "/chat")
    assert tab.service.admin_key not in page.url
    assert page.evaluate("document.cookie") == ""
    assert page.evaluate("sessionStorage.getItem('toolwire.key')") == tab.service.admin_key
    assert tab.service.admin_key not in page.content()
    expect(page.get_by_role("link", name="Functions")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(tab.service.url + "/login")
    expect(page.locator("#flash")).to_have_text("You are signed out.")
    assert page.evaluate("sessionStorage.getItem('toolwire.key')") is None


def test_a_user_without_the_admin_scope_sees_the_chat_and_the_refusal_of_admin_pages(tab: Tab) -> None:
    page = tab.page
    tab.sign_in(tab.service.user_key)
    expect(page.get_by_role("link", name="Chat")).to_be_visible()
    expect(page.get_by_role("link", name="Functions")).to_be_hidden()
    tab.go("/admin/functions")
    expect(page.locator("#page-error")).to_have_text(
        "This API key lacks the 'admin' scope; use an administrator's key for the admin API."
    )
    tab.shot("functions-not-admin")


# --- the administrator's work, then the chat that uses it -------------------------------------------


def test_a_function_made_in_the_pages_is_called_from_the_chat(tab: Tab) -> None:
    page, service = tab.page, tab.service
    tab.sign_in(service.story_key)

    # Empty states say what to do.
    tab.go("/admin/functions")
    expect(page.locator("#functions-empty")).to_have_text(
        "No functions yet — add one or import an OpenAPI document."
    )
    tab.shot("functions-empty")
    tab.go("/admin/connections")
    expect(page.locator("#connections-empty")).to_contain_text("No connections yet — add one")
    tab.shot("connections-empty")

    # A connection with a bearer token, typed and saved from the keyboard.
    page.get_by_role("link", name="Add a connection").click()
    page.wait_for_url(service.url + "/admin/connections/new")
    page.fill("#cn-name", "tickets")
    page.fill("#cn-url", service.tickets.base_url)
    page.select_option("#cn-auth-type", "bearer")
    expect(page.locator("#cn-secret-label")).to_have_text("Token")
    page.fill("#cn-secret", TICKETS_TOKEN)
    tab.shot("connection-new")
    page.press("#cn-secret", "Enter")
    page.wait_for_url(service.url + "/admin/connections/tickets")
    expect(page.locator("#flash")).to_have_text("Connection tickets was saved.")
    expect(page.locator("#cn-secret-status")).to_contain_text("A token is set. It is never shown")
    assert page.input_value("#cn-secret") == ""
    assert TICKETS_TOKEN not in page.content()
    tab.shot("connection-edit")
    tab.go("/admin/connections")
    row = page.get_by_role("row", name=re.compile("tickets"))
    expect(row).to_contain_text("Bearer token")
    expect(row.locator(".badge")).to_have_text("set")
    assert TICKETS_TOKEN not in page.content()
    tab.shot("connections-list")

    # The function, with seed 001's JSON definition edited as text.
    _, definitions = tickets_functions(service.tickets.base_url, TICKETS_TOKEN)
    create = next(d for d in definitions if d.name == "create_ticket")
    tab.go("/admin/functions/new")
    page.fill("#fn-name", "create_ticket")
    page.fill("#fn-description", create.description)
    page.select_option("#fn-connection", "tickets")
    page.fill("#fn-definition", json.dumps(create.to_json(), indent=2))
    page.get_by_role("button", name="Create function").click()
    page.wait_for_url(service.url + "/admin/functions/create_ticket")
    expect(page.locator("#flash")).to_have_text("Function create_ticket was saved.")
    expect(page.locator("#fn-request")).to_have_text(f"Calls send: POST {service.tickets.base_url}/tickets")
    tab.shot("function-edit")

    # Test: the exact request sent, its credential masked, and the API's answer.
    page.fill("#test-arguments", json.dumps({"title": "Tested from the page", "priority": "Low"}))
    page.get_by_role("button", name="Run test").click()
    sent = page.locator("#test-request")
    expect(sent).to_contain_text(f"POST {service.tickets.base_url}/tickets")
    expect(sent).to_contain_text("Authorization: Bearer [redacted]")
    expect(sent).to_contain_text('"title": "Tested from the page"')
    expect(page.locator("#test-response")).to_contain_text("HTTP 201")
    expect(page.locator("#test-response")).to_contain_text('"ticket_id": "SUP-')
    assert TICKETS_TOKEN not in page.content()
    tab.shot("function-test")

    tab.go("/admin/functions")
    expect(page.get_by_role("row", name=re.compile("create_ticket"))).to_contain_text(
        f"POST {service.tickets.base_url}/tickets"
    )
    tab.shot("functions-list")

    # The chat: the call shows while the run goes on, then the answer under which it stays.
    page.get_by_role("link", name="Chat").click()
    page.wait_for_url(service.url + "/chat")
    tab.shot("chat-empty")
    page.fill("#chat-input", QUESTION)
    page.press("#chat-input", "Enter")
    answer = page.locator(".message.assistant").last
    call = answer.locator(".call")
    expect(answer).to_have_attribute("data-state", "streaming")
    expect(call).to_have_attribute("data-state", "ok")
    expect(answer.locator(".text")).to_have_text(FIRST_WORDS)
    tab.shot("chat-streaming")
    expect(answer).to_have_attribute("data-state", "done", timeout=15_000)
    expect(answer.locator(".text")).to_have_text(
        re.compile(r"^Ticket SUP-\d+ is open with priority High; facilities will see it first\.$")
    )
    summary = call.locator("summary")
    expect(summary.locator(".call-name")).to_have_text("create_ticket")
    expect(summary.locator(".call-args")).to_contain_text('"title":"Printer on fire"')
    expect(summary.locator("[data-outcome]")).to_have_text("ok")
    expect(summary.locator(".duration")).to_have_text(re.compile(r"^\d+ ms$|^\d+\.\d\d s$"))
    expect(summary.locator(".replayed")).to_have_count(0)
    expect(call.locator(".call-result")).to_be_hidden()
    summary.focus()
    page.keyboard.press("Enter")
    result = call.locator(".call-result")
    expect(result).to_be_visible()
    ticket = re.search(r"SUP-\d+", answer.locator(".text").inner_text())
    assert ticket is not None
    expect(result).to_contain_text(f'"ticket_id": "{ticket.group()}"')
    expect(result).to_contain_text('"status": "success"')
    tab.shot("chat-answer")

    # The conversation goes on, and survives a reload.
    page.fill("#chat-input", "How many messages have I sent?")
    page.press("#chat-input", "Enter")
    second = page.locator(".message.assistant").nth(1)
    expect(second).to_have_attribute("data-state", "done")
    expect(second.locator(".text")).to_have_text("You have sent 2 messages in this conversation.")
    page.reload()
    expect(page.locator(".message")).to_have_count(4)
    expect(page.locator(".message.user").first).to_have_text(re.compile(re.escape(QUESTION)))
    expect(page.locator(".message.assistant").first.locator(".call [data-outcome]")).to_have_text("ok")
    tab.shot("chat-after-reload")

    # The audit page lists the call, and its filters narrow the list.
    tab.go("/admin/audit")
    rows = page.locator("#audit-rows tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("dana")
    expect(rows.first).to_contain_text("create_ticket")
    tab.shot("audit")
    page.select_option("#f-outcome", "timeout")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url(re.compile(r"outcome=timeout"))
    expect(page.locator("#audit-empty")).to_have_text("No calls match these filters — change or clear them.")
    tab.shot("audit-filtered-empty")
    page.fill("#f-tool", "create_ticket")
    page.select_option("#f-outcome", "ok")
    page.select_option("#f-user", label="dana")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url(re.compile(r"tool=create_ticket"))
    expect(rows).to_have_count(1)
    expect(page.locator("#f-user")).to_have_value(re.compile(r".+"))


# --- refusals shown next to their field ---------------------------------------------------------------


BROKEN = {
    "unknown placeholder": (
        {
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            "http_request_body": {"title": "$title", "owner": "$owner"},
            "method": "POST",
        },
        "$owner",
    ),
    "missing parameter": (
        {
            "parameters": {"type": "object", "required": ["title"], "properties": {}},
            "method": "GET",
        },
        "title",
    ),
    "invalid JSON Schema": (
        {"parameters": {"type": "object", "properties": {"title": {"type": "text"}}}},
        "parameters",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_definition_shows_its_error_next_to_the_field_and_keeps_the_input(
    tab: Tab, case: str
) -> None:
    page, service = tab.page, tab.service
    definition, mentioned = BROKEN[case]
    _ensure_connection(service, "tickets_for_errors")
    tab.sign_in()
    tab.go("/admin/functions/new")
    page.fill("#fn-name", "broken_function")
    page.fill("#fn-description", "Never saved.")
    page.select_option("#fn-connection", "tickets_for_errors")
    text = json.dumps(definition, indent=2)
    page.fill("#fn-definition", text)
    page.get_by_role("button", name="Create function").click()

    error = page.locator("#fn-definition-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text(mentioned)
    assert "{" not in error.inner_text()  # a sentence per problem, never the JSON of the answer
    expect(page.locator("#fn-definition")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#fn-definition")).to_be_focused()
    expect(page.locator("#form-error")).to_contain_text("Nothing was saved")
    assert page.input_value("#fn-definition") == text
    assert page.input_value("#fn-name") == "broken_function"
    assert page.url == service.url + "/admin/functions/new"
    assert service.api("GET", "/admin/api/functions/broken_function").status_code == 404
    tab.shot(f"function-error-{case.replace(' ', '-').lower()}")


def test_a_definition_that_is_not_json_is_refused_in_the_page(tab: Tab) -> None:
    page = tab.page
    _ensure_connection(tab.service, "tickets_for_errors")
    tab.sign_in()
    tab.go("/admin/functions/new")
    page.fill("#fn-name", "not_json")
    page.fill("#fn-description", "Never saved.")
    page.select_option("#fn-connection", "tickets_for_errors")
    page.fill("#fn-definition", '{"parameters": {"type": "object",}')
    page.press("#fn-definition", "Control+Enter")
    expect(page.locator("#fn-definition-error")).to_contain_text("This is not valid JSON")
    assert page.input_value("#fn-definition") == '{"parameters": {"type": "object",}'


def test_a_connection_in_use_cannot_be_deleted_and_the_page_says_why(tab: Tab) -> None:
    page, service = tab.page, tab.service
    _ensure_connection(service, "tickets_in_use")
    body = {
        "name": "list_tickets_in_use",
        "description": "List tickets.",
        "connection": "tickets_in_use",
        "definition": {"parameters": {"type": "object", "properties": {}}, "path": "/tickets"},
    }
    assert service.api("POST", "/admin/api/functions", body).status_code == 201
    tab.sign_in()
    tab.go("/admin/connections/tickets_in_use")
    expect(page.locator("#cn-functions")).to_have_text("list_tickets_in_use")
    page.get_by_role("button", name="Delete connection").click()
    expect(page.locator("#delete-no")).to_be_focused()
    page.get_by_role("button", name="Yes, delete it").click()
    error = page.locator("#delete-error")
    expect(error).to_be_visible()
    assert error.inner_text() == error.inner_text().strip() and not error.inner_text().startswith("{")
    expect(error).to_contain_text("list_tickets_in_use")
    tab.shot("connection-in-use")

    # Deleting the function first lets the connection go.
    tab.go("/admin/functions/list_tickets_in_use")
    page.get_by_role("button", name="Delete function").click()
    page.get_by_role("button", name="Yes, delete it").click()
    page.wait_for_url(service.url + "/admin/functions")
    expect(page.locator("#flash")).to_have_text("Function list_tickets_in_use was deleted.")
    assert service.api("GET", "/admin/api/functions/list_tickets_in_use").status_code == 404


def test_a_connection_without_its_credential_shows_the_refusal_next_to_the_credential(tab: Tab) -> None:
    page, service = tab.page, tab.service
    tab.sign_in()
    tab.go("/admin/connections/new")
    page.fill("#cn-name", "no_token")
    page.fill("#cn-url", service.tickets.base_url)
    page.select_option("#cn-auth-type", "bearer")
    page.get_by_role("button", name="Create connection").click()
    error = page.locator("#cn-secret-error")
    expect(error).to_be_visible()
    assert not error.inner_text().startswith("{")
    expect(page.locator("#cn-secret")).to_have_attribute("aria-invalid", "true")
    assert page.input_value("#cn-name") == "no_token"
    assert service.api("GET", "/admin/api/connections/no_token").status_code == 404
    tab.shot("connection-error")


def test_an_openapi_document_is_imported_from_the_functions_page(tab: Tab) -> None:
    page, service = tab.page, tab.service
    _ensure_connection(service, "tickets_imported")
    document = {
        "openapi": "3.0.3",
        "info": {"title": "Tickets", "version": "1"},
        "paths": {
            "/tickets/{ticket_id}": {
                "get": {
                    "operationId": "read_ticket",
                    "summary": "Read one ticket.",
                    "parameters": [
                        {"name": "ticket_id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                },
                "delete": {"operationId": "drop_ticket", "summary": "Delete one ticket."},
            }
        },
    }
    tab.sign_in()
    tab.go("/admin/functions")
    page.get_by_text("Import an OpenAPI document", exact=True).click()
    page.select_option("#import-connection", "tickets_imported")
    page.fill("#import-document", '{"openapi": "3.0.3", "paths": ')
    page.get_by_role("button", name="Import").click()
    expect(page.locator("#import-document-error")).to_contain_text("This is not valid JSON")

    page.fill("#import-document", json.dumps(document))
    page.get_by_role("button", name="Import").click()
    result = page.locator("#import-result")
    expect(result).to_contain_text("Imported 1 function(s): read_ticket.")
    expect(result).to_contain_text("delete")
    expect(page.get_by_role("row", name=re.compile("read_ticket"))).to_contain_text(
        f"GET {service.tickets.base_url}/tickets/{{ticket_id}}"
    )
    tab.shot("functions-imported")


def test_the_test_button_reports_invalid_arguments_without_sending(tab: Tab) -> None:
    page, service = tab.page, tab.service
    _ensure_connection(service, "tickets_tested")
    body = {
        "name": "get_ticket_tested",
        "description": "Get one ticket.",
        "connection": "tickets_tested",
        "definition": {
            "parameters": {
                "type": "object",
                "required": ["ticket_id"],
                "properties": {"ticket_id": {"type": "string"}},
            },
            "path": "/tickets/{ticket_id}",
        },
    }
    assert service.api("POST", "/admin/api/functions", body).status_code == 201
    tab.sign_in()
    tab.go("/admin/functions/get_ticket_tested")
    # The arguments start as an example from the schema: every required property.
    expect(page.locator("#test-arguments")).to_have_value('{\n  "ticket_id": ""\n}')
    page.fill("#test-arguments", '{"ticket_id": 7}')
    page.get_by_role("button", name="Run test").click()
    outcome = page.locator(".test-outcome")
    expect(outcome).to_contain_text("invalid_arguments")
    expect(page.locator("#test-result")).to_contain_text("Nothing was sent.")
    expect(page.locator("#test-request")).to_have_count(0)
    tab.shot("function-test-invalid")


def test_a_failing_model_shows_its_sentence_and_a_new_conversation_starts_empty(tab: Tab) -> None:
    page = tab.page
    tab.sign_in()
    page.fill("#chat-input", "Please refuse this.")
    page.press("#chat-input", "Enter")
    answer = page.locator(".message.assistant").last
    expect(answer).to_have_attribute("data-state", "error")
    error = answer.locator(".error-box")
    expect(error).to_contain_text("The scripted model refuses this request.")
    assert not error.inner_text().startswith("{")
    tab.shot("chat-error")
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator(".message")).to_have_count(0)
    expect(page.locator("#chat-empty")).to_be_visible()
    expect(page.locator("#chat-input")).to_be_focused()


# --- narrow windows -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/chat", "/admin/functions", "/admin/connections", "/admin/audit", "/admin/functions/new"]
)
def test_pages_fit_a_narrow_window(narrow_tab: Tab, path: str) -> None:
    page, service = narrow_tab.page, narrow_tab.service
    # Something in every table, so the narrow layout of a filled table is what is checked.
    _ensure_connection(service, "tickets_narrow")
    function = {
        "name": "list_tickets_narrow",
        "description": "List the support tickets, optionally only those of one priority.",
        "connection": "tickets_narrow",
        "definition": {"parameters": {"type": "object", "properties": {}}, "path": "/tickets"},
    }
    assert service.api("POST", "/admin/api/functions", function).status_code in (201, 409)
    narrow_tab.sign_in()
    narrow_tab.go(path)
    expect(page.locator(".loading")).to_have_count(0)
    # Wide tables scroll inside their frame; the page itself never scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    expect(page.get_by_role("link", name="Chat")).to_be_visible()
    narrow_tab.shot("narrow" + path.replace("/", "-"))
