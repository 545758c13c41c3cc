"""Authorization before execution: scopes, per-resource checks, failing closed, and what a denial does."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pg import database
from toolwire.context import Context
from toolwire.gate import AuditLog, Denial, Gate, Ledger, Policy, ScopePolicy
from toolwire.gate.policy import missing_scopes
from toolwire.messages import ToolCall, ToolResult
from toolwire.runner import Runner
from toolwire.store import migrate
from toolwire.store.tables_ledger import LedgerEntry
from toolwire.testing import ScriptedModel, call, reply
from toolwire.tools import Tool, Toolbox, tool


class Books:
    """A tiny bookkeeping system whose tools record every execution."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.owners = {1: "ann", 2: "bob"}

    def delete_tool(self, *requires: Any) -> Tool:
        @tool(effect="write")
        def delete_item(item_id: int) -> str:
            """Delete an entry.

            Args:
                item_id: Which entry.
            """
            self.executed.append(f"delete {item_id}")
            return "deleted"

        delete_item.requires = tuple(requires)
        return delete_item

    def own_items_only(self, arguments: Mapping[str, Any], ctx: Context) -> bool:
        return self.owners.get(arguments["item_id"]) == ctx.user_id


def make_call(arguments: dict[str, Any], id: str = "call_1") -> ToolCall:
    return ToolCall(id=id, name="delete_item", arguments=json.dumps(arguments))


def error_of(result: ToolResult) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(result.content)["error"]
    assert error["code"] == result.code
    return error


# --- ScopePolicy ----------------------------------------------------------------------------------


async def test_a_tool_without_requirements_is_allowed() -> None:
    assert await ScopePolicy().authorize(Books().delete_tool(), {"item_id": 1}, Context()) is None


async def test_missing_scopes_are_denied_and_named() -> None:
    delete = Books().delete_tool("bookkeeping:write", "bookkeeping:delete")
    context = Context(scopes=frozenset({"bookkeeping:write", "bookkeeping:read"}))

    denial = await ScopePolicy().authorize(delete, {"item_id": 1}, context)

    assert denial is not None
    assert "delete_item" in denial.message and "'bookkeeping:delete'" in denial.message
    assert "'bookkeeping:write'" not in denial.message
    assert denial.details == ({"missing_scopes": ["bookkeeping:delete"]},)
    assert missing_scopes(delete, context.scopes) == ("bookkeeping:delete",)
    everything = Context(scopes=frozenset({"bookkeeping:write", "bookkeeping:delete"}))
    assert await ScopePolicy().authorize(delete, {"item_id": 1}, everything) is None


async def test_a_per_resource_check_sees_the_arguments_and_the_principal() -> None:
    books = Books()
    delete = books.delete_tool("bookkeeping:write", books.own_items_only)
    scopes = frozenset({"bookkeeping:write"})

    assert (
        await ScopePolicy().authorize(delete, {"item_id": 1}, Context(user_id="ann", scopes=scopes)) is None
    )
    denial = await ScopePolicy().authorize(delete, {"item_id": 2}, Context(user_id="ann", scopes=scopes))
    assert denial is not None and "with these arguments" in denial.message
    # Scopes come first: without them the check is not even asked.
    assert await ScopePolicy().authorize(delete, {"item_id": 1}, Context(user_id="ann")) is not None


async def test_async_checks_and_their_own_denials() -> None:
    async def only_small(arguments: Mapping[str, Any], ctx: Context) -> bool | Denial:
        if arguments["item_id"] > 100:
            return Denial(message="Only entries below 100 can be deleted here; ask an administrator.")
        return True

    delete = Books().delete_tool(only_small)
    assert await ScopePolicy().authorize(delete, {"item_id": 5}, Context()) is None
    denial = await ScopePolicy().authorize(delete, {"item_id": 500}, Context())
    assert denial == Denial(message="Only entries below 100 can be deleted here; ask an administrator.")


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda args, ctx: None, id="forgot-to-return"),
        pytest.param(lambda args, ctx: "yes", id="not-a-bool"),
        pytest.param(lambda args, ctx: 1 / 0, id="raises"),
        pytest.param(42, id="not-callable"),
    ],
)
async def test_checks_fail_closed(check: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="toolwire.gate.policy")
    denial = await ScopePolicy().authorize(Books().delete_tool(check), {"item_id": 1}, Context())
    assert denial is not None
    assert caplog.records, "a broken check is logged for the operator"


# --- the Gate -------------------------------------------------------------------------------------


async def test_a_denied_call_is_forbidden_runs_nothing_and_is_audited(tmp_path: Path) -> None:
    db = database(f"sqlite:///{tmp_path / 'policy.db'}")
    await migrate(db)
    books = Books()
    gate = Gate(
        Toolbox([books.delete_tool("bookkeeping:write", books.own_items_only)]),
        ledger=Ledger(db),
        audit=AuditLog(db),
    )
    context = Context(user_id="ann", scopes=frozenset({"bookkeeping:write"}), request_id="r1")
    try:
        # A perfectly valid call, for an entry that belongs to someone else.
        denied = await gate.run(make_call({"item_id": 2}), context)
        allowed = await gate.run(make_call({"item_id": 1}, id="call_2"), context)
        records = await AuditLog(db).query()
        async with db.transaction() as session:
            keys = list(await session.scalars(select(LedgerEntry.key)))
    finally:
        await db.aclose()

    assert denied.code == "forbidden"
    assert "do not call it again" in error_of(denied)["message"]
    assert allowed.code is None
    assert books.executed == ["delete 1"]
    assert [(r.call_id, r.outcome, r.idempotency_key) for r in records] == [
        ("call_2", "ok", keys[0]),
        ("call_1", "forbidden", None),  # denied before any claim: the ledger never saw it
    ]
    assert len(keys) == 1


async def test_scopes_are_enforced_by_default_without_a_database() -> None:
    books = Books()
    gate = Gate(Toolbox([books.delete_tool("bookkeeping:write")]))

    denied = await gate.run(make_call({"item_id": 1}), Context())

    assert denied.code == "forbidden"
    assert error_of(denied)["details"] == [{"missing_scopes": ["bookkeeping:write"]}]
    assert books.executed == []


async def test_a_custom_policy_decides_and_a_failing_one_denies(caplog: pytest.LogCaptureFixture) -> None:
    class OfficeHours:
        def __init__(self) -> None:
            self.asked: list[tuple[str, dict[str, Any], str]] = []

        async def authorize(
            self, tool: Tool, arguments: Mapping[str, Any], context: Context
        ) -> Denial | None:
            self.asked.append((tool.name, dict(arguments), context.user_id))
            return Denial(message="Deletions are possible during office hours only.")

    class Broken:
        async def authorize(
            self, tool: Tool, arguments: Mapping[str, Any], context: Context
        ) -> Denial | None:
            raise RuntimeError("policy store unreachable")

    books = Books()
    office = OfficeHours()
    assert isinstance(office, Policy)
    result = await Gate(Toolbox([books.delete_tool()]), policy=office).run(
        make_call({"item_id": 1}), Context()
    )
    assert (result.code, error_of(result)["message"]) == (
        "forbidden",
        "Deletions are possible during office hours only.",
    )
    assert office.asked == [("delete_item", {"item_id": 1}, "local")]

    caplog.set_level(logging.ERROR, logger="toolwire.gate.gate")
    broken = await Gate(Toolbox([books.delete_tool()]), policy=Broken()).run(
        make_call({"item_id": 1}), Context()
    )
    assert broken.code == "forbidden"
    assert "cannot be decided now" in error_of(broken)["message"]
    assert books.executed == []


async def test_the_model_sees_the_denial_and_answers() -> None:
    books = Books()
    toolbox = Toolbox([books.delete_tool("bookkeeping:delete")])
    model = ScriptedModel([reply(None, call("delete_item", {"item_id": 1}, id="c1")), "I am not allowed to."])

    result = await Runner(model, toolbox).run("Delete entry 1", context=Context(user_id="ann"))

    assert [t.outcome for t in result.calls] == ["forbidden"]
    answered = model.requests[1].transcript[-1]
    assert isinstance(answered, ToolResult) and answered.call_id == "c1" and answered.code == "forbidden"
    assert result.answer == "I am not allowed to."
    assert books.executed == []
