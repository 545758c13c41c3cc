"""Principals: API keys stored hashed, 401 for a wrong or missing key, and tenants kept apart."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pg import postgres_database
from service_support import add_user, bearer, chat_body, serving, sqlite_url
from toolwire.context import Context
from toolwire.gate.audit import AuditLog
from toolwire.messages import ToolCall, ToolResult
from toolwire.service.auth import Principal
from toolwire.service.key_cache import KeyCache
from toolwire.settings import Settings
from toolwire.store import Database
from toolwire.store.principals import check_key, create_user, revoke_keys
from toolwire.store.tables_principals import User
from toolwire.testing import FunctionModel, ModelRequest, call, reply
from toolwire.tools import tool


def echo(request: ModelRequest) -> str:
    return "hello"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    async with postgres_database() as url:
        yield url


# --- keys --------------------------------------------------------------------------------------------


async def test_a_key_is_stored_only_as_a_salted_hash(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, first = await add_user(url, "alice", scopes=("admin",))
    _, second = await add_user(url, "bob")

    assert first.startswith("tw_") and second.startswith("tw_")
    secret = first.split("_", 2)[2]
    dump = "\n".join(sqlite3.connect(tmp_path / "service.db").iterdump())
    assert secret not in dump and first not in dump
    with sqlite3.connect(tmp_path / "service.db") as db:
        salts = {salt for (salt,) in db.execute("SELECT salt FROM api_keys")}
    assert len(salts) == 2


async def test_a_key_finds_its_user_and_a_changed_or_revoked_one_does_not(tmp_path: Path) -> None:
    db = await Database.open(sqlite_url(tmp_path))
    try:
        async with db.transaction(write=True) as session:
            user, issued = await create_user(session, tenant_id="acme", name="alice", scopes=["items:write"])
        async with db.transaction() as session:
            found = await check_key(session, issued.key)
            tampered = issued.key[:-1] + ("A" if issued.key[-1] != "A" else "B")
            assert await check_key(session, tampered) is None
            assert await check_key(session, "tw_nonsense") is None
        assert found is not None
        assert (found[0].id, found[0].tenant_id, found[0].scopes) == (user.id, "acme", ["items:write"])
        async with db.transaction(write=True) as session:
            assert await revoke_keys(session, user) == 1
        async with db.transaction() as session:
            assert await check_key(session, issued.key) is None
    finally:
        await db.aclose()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer "},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer tw_0123456789abcdef_" + "x" * 43},
        {"Authorization": "Bearer not-a-key"},
    ],
    ids=["missing", "empty", "basic", "unknown", "malformed"],
)
async def test_a_missing_or_wrong_key_gets_401_with_an_openai_error(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    await add_user(sqlite_url(tmp_path), "alice")
    async with serving(Settings(database_url=sqlite_url(tmp_path)), FunctionModel(echo)) as (_, client):
        response = await client.post("/v1/chat", json=chat_body("hi"), headers=headers)

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] in {"missing_api_key", "invalid_api_key"}
    assert error["type"] == "invalid_request_error"


async def test_a_revoked_key_stops_working_at_once(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, admin = await add_user(url, "root", scopes=("admin",))
    user_id, key = await add_user(url, "alice")
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, client):
        assert (await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))).status_code == 200
        listed = (await client.get(f"/admin/api/users/{user_id}", headers=bearer(admin))).json()
        key_id = listed["keys"][0]["id"]
        revoked = await client.delete(f"/admin/api/users/{user_id}/keys/{key_id}", headers=bearer(admin))
        after = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))

    assert revoked.status_code == 204
    assert after.status_code == 401


async def _revoke_elsewhere(url: str, user_id: str) -> None:
    """Revoke a user's keys from another connection, as `toolwire users` or another server does."""
    db = await Database.open(url)
    try:
        async with db.transaction(write=True) as session:
            user = await session.get(User, user_id)
            assert user is not None
            assert await revoke_keys(session, user) == 1
    finally:
        await db.aclose()


async def test_without_a_key_cache_a_key_revoked_elsewhere_stops_at_once(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    user_id, key = await add_user(url, "alice")
    settings = Settings(database_url=url, key_cache_seconds=0)
    async with serving(settings, FunctionModel(echo)) as (_, client):
        before = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))
        await _revoke_elsewhere(url, user_id)
        after = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))

    assert (before.status_code, after.status_code) == (200, 401)


async def test_a_remembered_key_lasts_its_cache_time_and_an_admin_change_forgets_it(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, admin = await add_user(url, "root", scopes=("admin",))
    user_id, key = await add_user(url, "alice")
    other_id, _ = await add_user(url, "bob")
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    settings = Settings(database_url=url, key_cache_seconds=600)
    async with serving(settings, FunctionModel(echo)) as (_, client):
        first = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))
        wrong_secret = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(tampered))
        await _revoke_elsewhere(url, user_id)
        remembered = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))
        # Any change to keys or users through this server's admin API forgets every remembered key.
        deleted = await client.delete(f"/admin/api/users/{other_id}", headers=bearer(admin))
        forgotten = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))

    assert (first.status_code, wrong_secret.status_code) == (200, 401)
    assert remembered.status_code == 200  # revoked in the database, still within the cache time here
    assert (deleted.status_code, forgotten.status_code) == (204, 401)


async def test_a_remembered_key_expires_after_its_cache_time(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    user_id, key = await add_user(url, "alice")
    settings = Settings(database_url=url, key_cache_seconds=0.2)
    async with serving(settings, FunctionModel(echo)) as (_, client):
        assert (await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))).status_code == 200
        await _revoke_elsewhere(url, user_id)
        await asyncio.sleep(0.3)
        after = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(key))

    assert after.status_code == 401


def test_the_key_cache_holds_at_most_its_size_and_drops_the_least_recently_used() -> None:
    cache = KeyCache(60, size=2)
    principals = {
        name: Principal(user_id=name, tenant_id="acme", name=name, scopes=frozenset(), key_id=name)
        for name in ("a", "b", "c")
    }
    cache.put("key-a", principals["a"])
    cache.put("key-b", principals["b"])
    assert cache.get("key-a") == principals["a"]  # now a is the most recently used
    cache.put("key-c", principals["c"])

    assert cache.get("key-b") is None
    assert (cache.get("key-a"), cache.get("key-c")) == (principals["a"], principals["c"])
    assert KeyCache(0).get("key-a") is None


async def test_the_admin_api_needs_the_admin_scope(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    _, admin = await add_user(url, "root", scopes=("admin",))
    _, plain = await add_user(url, "alice", scopes=("items:write",))
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, client):
        refused = await client.get("/admin/api/users", headers=bearer(plain))
        anonymous = await client.get("/admin/api/users")
        allowed = await client.get("/admin/api/users", headers=bearer(admin))

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_scope"
    assert anonymous.status_code == 401
    assert allowed.status_code == 200
    assert [u["name"] for u in allowed.json()["data"]] == ["alice", "root"]


async def test_the_keys_user_tenant_and_scopes_become_the_context(tmp_path: Path) -> None:
    seen: list[Context] = []

    @tool
    def whoami(ctx: Context) -> str:
        """Say who is asking."""
        seen.append(ctx)
        return ctx.user_id

    def model_fn(request: ModelRequest) -> object:
        if isinstance(request.transcript[-1], ToolResult):
            return "done"
        return reply(None, call("whoami", {}))

    url = sqlite_url(tmp_path)
    user_id, key = await add_user(url, "alice", tenant="acme", scopes=("items:read", "reports"))
    async with serving(Settings(database_url=url), FunctionModel(model_fn)) as (app, client):
        (await app.state.toolwire.started.runner_for("acme")).toolbox.add(whoami)
        response = await client.post("/v1/chat", json=chat_body("who?", "ctx-1"), headers=bearer(key))

    assert response.status_code == 200, response.text
    [ctx] = seen
    assert (ctx.user_id, ctx.tenant_id, ctx.request_id) == (user_id, "acme", "ctx-1")
    assert ctx.scopes == frozenset({"items:read", "reports"})


# --- tenants -----------------------------------------------------------------------------------------


async def test_another_tenants_or_users_conversation_is_404(database_url: str) -> None:
    _, alice = await add_user(database_url, "alice", tenant="acme")
    _, carol = await add_user(database_url, "carol", tenant="acme")
    _, mallory = await add_user(database_url, "alice", tenant="globex")  # the same name elsewhere
    async with serving(Settings(database_url=database_url), FunctionModel(echo)) as (_, client):
        own = (await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(alice))).json()
        conversation = own["conversation_id"]
        foreign = await client.post(
            "/v1/chat", json=chat_body("hi", conversation_id=conversation), headers=bearer(mallory)
        )
        colleague = await client.post(
            "/v1/chat", json=chat_body("hi", conversation_id=conversation), headers=bearer(carol)
        )
        continued = await client.post(
            "/v1/chat", json=chat_body("again", conversation_id=conversation), headers=bearer(alice)
        )

    for refused in (foreign, colleague):
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "conversation_not_found"
        assert "hi" not in refused.text.replace("this", "")
    assert continued.status_code == 200


async def test_a_request_id_of_another_tenant_is_independent(database_url: str) -> None:
    _, alice = await add_user(database_url, "alice", tenant="acme")
    _, bob = await add_user(database_url, "bob", tenant="globex")
    answers = iter(["for alice", "for bob"])
    async with serving(Settings(database_url=database_url), FunctionModel(lambda r: next(answers))) as (
        _,
        client,
    ):
        first = await client.post("/v1/chat", json=chat_body("hi", "shared-id"), headers=bearer(alice))
        second = await client.post("/v1/chat", json=chat_body("hi", "shared-id"), headers=bearer(bob))

    assert first.json()["answer"] == "for alice"
    assert second.json()["answer"] == "for bob"  # not alice's stored outcome


async def test_a_request_id_of_another_user_in_the_tenant_does_not_leak(database_url: str) -> None:
    _, alice = await add_user(database_url, "alice", tenant="acme")
    _, carol = await add_user(database_url, "carol", tenant="acme")
    async with serving(Settings(database_url=database_url), FunctionModel(lambda r: "secret answer")) as (
        _,
        client,
    ):
        await client.post("/v1/chat", json=chat_body("hi", "their-id"), headers=bearer(alice))
        other = await client.post("/v1/chat", json=chat_body("hi", "their-id"), headers=bearer(carol))

    assert other.status_code == 422
    assert "secret answer" not in other.text


async def test_an_admin_sees_and_manages_only_its_own_tenant(database_url: str) -> None:
    _, acme_admin = await add_user(database_url, "root", tenant="acme", scopes=("admin",))
    globex_user, _ = await add_user(database_url, "bob", tenant="globex")
    async with serving(Settings(database_url=database_url), FunctionModel(echo)) as (_, client):
        listed = await client.get("/admin/api/users", headers=bearer(acme_admin))
        shown = await client.get(f"/admin/api/users/{globex_user}", headers=bearer(acme_admin))
        deleted = await client.delete(f"/admin/api/users/{globex_user}", headers=bearer(acme_admin))
        keyed = await client.post(f"/admin/api/users/{globex_user}/keys", headers=bearer(acme_admin))

    assert [u["tenant_id"] for u in listed.json()["data"]] == ["acme"]
    assert [r.status_code for r in (shown, deleted, keyed)] == [404, 404, 404]


async def test_the_audit_log_shows_an_admin_only_its_own_tenants_calls(database_url: str) -> None:
    _, admin = await add_user(database_url, "root", tenant="acme", scopes=("admin",))
    _, plain = await add_user(database_url, "alice", tenant="acme")
    db = await Database.open(database_url)
    try:
        log = AuditLog(db)
        for tenant, user, tool_name, code in [
            ("acme", "u1", "create_item", None),
            ("acme", "u2", "list_items", "forbidden"),
            ("globex", "u3", "create_item", None),
        ]:
            await log.record(
                call=ToolCall(id="c1", name=tool_name, arguments="{}"),
                context=Context(tenant_id=tenant, user_id=user, request_id=f"r-{user}"),
                result=ToolResult(call_id="c1", name=tool_name, content="{}", code=code),
                arguments={},
                duration_ms=1.5,
            )
    finally:
        await db.aclose()

    async with serving(Settings(database_url=database_url), FunctionModel(echo)) as (_, client):

        async def users_of(query: str) -> list[str]:
            response = await client.get(f"/admin/api/audit{query}", headers=bearer(admin))
            assert response.status_code == 200, response.text
            return [record["user_id"] for record in response.json()["data"]]

        assert sorted(await users_of("")) == ["u1", "u2"]
        assert await users_of("?outcome=forbidden") == ["u2"]
        assert await users_of("?user_id=u1&tool=create_item") == ["u1"]
        assert await users_of("?user_id=u3") == []  # another tenant's user: nothing
        assert await users_of("?since=2999-01-01T00:00:00Z") == []
        assert len(await users_of("?limit=1")) == 1
        naive = await client.get("/admin/api/audit?since=2020-01-01T00:00:00", headers=bearer(admin))
        refused = await client.get("/admin/api/audit", headers=bearer(plain))

    assert naive.status_code == 400
    assert naive.json()["error"]["param"] == "since"
    assert refused.status_code == 403


async def test_the_admin_api_manages_users_and_keys_of_its_tenant(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    admin_id, admin = await add_user(url, "root", tenant="acme", scopes=("admin",))
    async with serving(Settings(database_url=url), FunctionModel(echo)) as (_, client):
        created = await client.post(
            "/admin/api/users", json={"name": "alice", "scopes": ["items:read"]}, headers=bearer(admin)
        )
        alice = created.json()
        duplicate = await client.post("/admin/api/users", json={"name": "alice"}, headers=bearer(admin))
        works = await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(alice["api_key"]))
        patched = await client.patch(
            f"/admin/api/users/{alice['id']}",
            json={"scopes": ["reports", "items:read"]},
            headers=bearer(admin),
        )
        second = (await client.post(f"/admin/api/users/{alice['id']}/keys", headers=bearer(admin))).json()
        shown = (await client.get(f"/admin/api/users/{alice['id']}", headers=bearer(admin))).json()
        demote_self = await client.patch(
            f"/admin/api/users/{admin_id}", json={"scopes": []}, headers=bearer(admin)
        )
        delete_self = await client.delete(f"/admin/api/users/{admin_id}", headers=bearer(admin))
        deleted = await client.delete(f"/admin/api/users/{alice['id']}", headers=bearer(admin))
        after = [
            (await client.post("/v1/chat", json=chat_body("hi"), headers=bearer(k))).status_code
            for k in (alice["api_key"], second["api_key"])
        ]
        gone = await client.get(f"/admin/api/users/{alice['id']}", headers=bearer(admin))

    assert created.status_code == 201
    assert (alice["tenant_id"], alice["scopes"]) == ("acme", ["items:read"])
    assert alice["api_key"].startswith("tw_")
    assert duplicate.status_code == 409 and duplicate.json()["error"]["code"] == "user_exists"
    assert works.status_code == 200
    assert patched.json()["scopes"] == ["items:read", "reports"]
    assert [k["id"] for k in shown["keys"]] == [alice["keys"][0]["id"], second["id"]]
    assert "api_key" not in shown and alice["api_key"] not in str(shown)
    assert demote_self.status_code == 409 and delete_self.status_code == 409
    assert deleted.status_code == 204
    assert after == [401, 401]
    assert gone.status_code == 404


async def test_the_policy_decides_with_the_keys_scopes(tmp_path: Path) -> None:
    @tool(requires=["reports"])
    def monthly_report() -> str:
        """The month's report."""
        return "42 items"

    def model_fn(request: ModelRequest) -> object:
        if isinstance(request.transcript[-1], ToolResult):
            return "done"
        return reply(None, call("monthly_report", {}))

    url = sqlite_url(tmp_path)
    _, reader = await add_user(url, "reader", scopes=("reports",))
    _, other = await add_user(url, "other", scopes=("items:read",))
    async with serving(Settings(database_url=url), FunctionModel(model_fn)) as (app, client):
        (await app.state.toolwire.started.runner_for("acme")).toolbox.add(monthly_report)
        allowed = (await client.post("/v1/chat", json=chat_body("report"), headers=bearer(reader))).json()
        refused = (await client.post("/v1/chat", json=chat_body("report"), headers=bearer(other))).json()

    assert (allowed["calls"][0]["outcome"], allowed["calls"][0]["result"]) == ("ok", "42 items")
    assert refused["calls"][0]["outcome"] == "forbidden"
