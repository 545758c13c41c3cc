"""Load: 200 concurrent conversations through two `toolwire serve` processes on one PostgreSQL database.

Every conversation books one entry under its own request id; the model is a scripted
OpenAI-compatible server in a process of its own. Twenty of the requests are also sent to the other
server at the same moment, as a client that retries on another node would. Afterwards the database
is counted: exactly one entry, one ledger record, one run and one conversation per request id.
Then a slice of the requests is repeated and must be answered from the stored outcomes.

Everything is bounded: every await has a timeout and the whole test stops within 60 seconds. The
throughput is printed (run with `-s` to see it); it is a figure for the README, not an assertion.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest
from cryptography.fernet import Fernet

from pg import postgres_database
from service_support import add_user, bearer, chat_body, toolwire_serve

pytestmark = pytest.mark.postgres

CONVERSATIONS = 200
USERS = 20
DOUBLED = 20
"""Requests also sent, at the same moment, to the other server."""
REPEATED = 40

# The upstream model, in a process of its own: it books what the user says, then confirms the id.
UPSTREAM = r"""
import json, sys
from toolwire.messages import ToolResult
from toolwire.testing import ScriptedServer, Step

def script(body, route):
    last = ScriptedServer.read_transcript(body, route)[-1]
    if isinstance(last, ToolResult):
        return Step.reply(f"Booked entry #{json.loads(last.content)['item']['id']}.")
    return Step.call("create_item", {"category": "load", "amount": 1.5, "title": last.content})

with ScriptedServer(script) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()  # until the test closes it (or dies)
"""


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 15)
        except TimeoutError:
            process.kill()
            await asyncio.wait_for(process.wait(), 15)


@contextlib.asynccontextmanager
async def upstream_process() -> AsyncIterator[str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", UPSTREAM, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.startswith(b"http://127.0.0.1:"), line
        yield line.decode().strip()
    finally:
        if process.stdin is not None:
            process.stdin.close()
        await _stop(process)


@contextlib.asynccontextmanager
async def serve_process(database_url: str, model_url: str) -> AsyncIterator[str]:
    values = {
        "TOOLWIRE_DATABASE_URL": database_url,
        "TOOLWIRE_BASE_URL": model_url,
        "TOOLWIRE_MODEL": "scripted",
        "TOOLWIRE_API_KEY": "sk-load-model",
        "TOOLWIRE_SECRET_KEY": Fernet.generate_key().decode(),
        "TOOLWIRE_LOG_LEVEL": "warning",
    }
    async with toolwire_serve(values) as served:
        yield served.url


async def count(url: str, query: str) -> Any:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"), timeout=10)
    try:
        return await asyncio.wait_for(connection.fetch(query), 30)
    finally:
        await connection.close()


async def test_two_hundred_concurrent_conversations_on_two_servers_book_each_entry_once(
    tmp_path: Path,
) -> None:
    async with asyncio.timeout(60), postgres_database() as database_url:
        keys = [(await add_user(database_url, f"user{n:02d}"))[1] for n in range(USERS)]  # also migrates
        async with (
            upstream_process() as model_url,
            serve_process(database_url, model_url) as one,
            serve_process(database_url, model_url) as two,
        ):
            servers = (one, two)
            limits = httpx2.Limits(max_connections=CONVERSATIONS + DOUBLED, max_keepalive_connections=50)
            async with httpx2.AsyncClient(timeout=60, limits=limits) as client:

                async def send(n: int, server: str) -> httpx2.Response:
                    body = chat_body(f"book entry {n:03d}", f"load-{n:03d}")
                    async with asyncio.timeout(60):
                        return await client.post(
                            f"{server}/v1/chat", json=body, headers=bearer(keys[n % USERS])
                        )

                started = time.monotonic()
                firsts = [send(n, servers[n % 2]) for n in range(CONVERSATIONS)]
                doubles = [send(n, servers[(n + 1) % 2]) for n in range(DOUBLED)]
                answers = await asyncio.gather(*firsts, *doubles)
                elapsed = time.monotonic() - started

                first, doubled = answers[:CONVERSATIONS], answers[CONVERSATIONS:]
                outcomes: list[dict[str, Any]] = []
                for n, response in enumerate(first):
                    pair = [response, doubled[n]] if n < DOUBLED else [response]
                    done = [r.json() for r in pair if r.status_code == 200]
                    # Of two twins on two servers, one ran; the other found it running (409: retry
                    # shortly) or done (its stored outcome). Never two runs, never another status.
                    assert done and all(body == done[0] for body in done), [r.text for r in pair]
                    for twin in pair:
                        assert twin.status_code in (200, 409), twin.text
                        if twin.status_code == 409:
                            assert twin.json()["error"]["code"] == "run_in_progress"
                    outcomes.append(done[0])
                busy = sum(r.status_code == 409 for r in answers)

                repeated = await asyncio.gather(*(send(n, servers[(n + 1) % 2]) for n in range(REPEATED)))
                for n, response in enumerate(repeated):
                    assert response.status_code == 200, response.text
                    assert response.headers["idempotent-replayed"] == "true"
                    assert response.json() == outcomes[n]

        print(
            f"\nload: {CONVERSATIONS} conversations (+{DOUBLED} doubled) on 2 servers in {elapsed:.2f} s, "
            f"{CONVERSATIONS / elapsed:.1f} conversations/s; "
            f"{busy} of the twins answered 409 (run in progress), the rest replayed"
        )
        items = await count(database_url, "SELECT id, title, user_id FROM items")
        ledger = await count(database_url, "SELECT request_id, state, tool FROM ledger")
        runs = await count(database_url, "SELECT request_id, state, attempt FROM runs")
        conversations = await count(database_url, "SELECT count(*) AS n FROM conversations")

    # Not one write lost, not one doubled.
    assert len(items) == CONVERSATIONS
    assert sorted(row["title"] for row in items) == [f"book entry {n:03d}" for n in range(CONVERSATIONS)]
    assert len(ledger) == CONVERSATIONS
    assert {(row["state"], row["tool"]) for row in ledger} == {("done", "create_item")}
    assert sorted(row["request_id"] for row in ledger) == [f"load-{n:03d}" for n in range(CONVERSATIONS)]
    assert sorted(row["request_id"] for row in runs) == [f"load-{n:03d}" for n in range(CONVERSATIONS)]
    assert {(row["state"], row["attempt"]) for row in runs} == {("done", 1)}
    assert conversations[0]["n"] == CONVERSATIONS
    # Each answer names the entry that was booked for it.
    booked = {row["title"]: row["id"] for row in items}
    for n, outcome in enumerate(outcomes):
        assert outcome["answer"] == f"Booked entry #{booked[f'book entry {n:03d}']}."
