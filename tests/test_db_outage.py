"""PostgreSQL restarted under load: 503s during the outage, recovery after, nothing half-written.

The machine's shared server is never touched: each test starts a private PostgreSQL (initdb and
pg_ctl, as the `postgres` user when the tests run as root) on a free port of 127.0.0.1, with its data
under a temporary folder, and removes it afterwards. The service runs in this event loop with an
in-process model that takes a moment per turn, so runs are under way when the server goes down.
A last test breaks a SQLite database under a running service: the same 503, the cause in the log.
"""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest

from service_support import add_user, bearer, chat_body, free_port, serving, sqlite_url
from toolwire.messages import ToolResult, UserMessage
from toolwire.settings import Settings
from toolwire.testing import FunctionModel, ModelRequest, call, reply

_TURN_SECONDS = 0.15
"""How long the model takes per turn: long enough that a stop catches runs in the middle."""


# --- a private PostgreSQL server ------------------------------------------------------------------


def _server_binaries() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3].split(".")[0])
    )
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return Path(which).parent if which else None


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of this test alone: initdb'd, started, stopped and started again."""

    bin: Path
    base: Path
    port: int
    runas: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self.runas, *command], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            log = self.base / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{command[0]} failed: {done.stderr or done.stdout}\n{tail}")

    def init(self) -> None:
        initdb = str(self.bin / "initdb")
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=60"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.base / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "30",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def running(self) -> bool:
        done = subprocess.run(
            [*self.runas, str(self.bin / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return done.returncode == 0


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    binaries = _server_binaries()
    if binaries is None or not (binaries / "initdb").exists():
        pytest.skip("a private PostgreSQL server cannot be started here: initdb and pg_ctl are not installed")
    runas: list[str] = []
    # A folder every user can reach: pytest's own tmp_path is private to the user running the tests.
    base = Path(tempfile.mkdtemp(prefix="toolwire-pg-"))
    if os.geteuid() == 0:
        # initdb refuses to run as root.
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base)
            pytest.skip("a private PostgreSQL server cannot be started as root without a 'postgres' user")
        runner = shutil.which("runuser")
        if runner is None:
            shutil.rmtree(base)
            pytest.skip("a private PostgreSQL server cannot be started as root without runuser")
        os.chown(base, account.pw_uid, account.pw_gid)
        runas = [runner, "-u", "postgres", "--"]
    server = PrivatePostgres(bin=binaries, base=base, port=free_port(), runas=runas)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if server.running():
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


# --- the service under load -----------------------------------------------------------------------


async def booking(request: ModelRequest) -> Any:
    """Book what the user said, then confirm; every turn takes `_TURN_SECONDS`."""
    await asyncio.sleep(_TURN_SECONDS)
    last = request.transcript[-1]
    if isinstance(last, ToolResult):
        return "Booked."
    assert isinstance(last, UserMessage)
    return reply(None, call("create_item", {"category": "outage", "amount": 1, "title": last.content}))


@dataclass
class Answer:
    request_id: str
    phase: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    sent: float
    done: float


@dataclass
class Load:
    """Requests sent by a few workers until told to stop, each with a new request id."""

    client: httpx2.AsyncClient
    key: str
    phase: str = "before"
    answers: list[Answer] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    counter: int = 0

    async def worker(self, limit: int) -> None:
        for _ in range(limit):
            if self.stop.is_set():
                return
            self.counter += 1
            request_id = f"outage-{self.counter:04d}"
            await self.send(request_id, self.phase)
            await asyncio.sleep(0.02)

    async def send(self, request_id: str, phase: str) -> Answer:
        sent = time.monotonic()
        async with asyncio.timeout(30):
            response = await self.client.post(
                "/v1/chat", json=chat_body(f"book {request_id}", request_id), headers=bearer(self.key)
            )
        answer = Answer(
            request_id=request_id,
            phase=phase,
            status=response.status_code,
            body=response.json(),
            headers=dict(response.headers),
            sent=sent,
            done=time.monotonic(),
        )
        self.answers.append(answer)
        return answer

    def count(self, phase: str, status: int) -> int:
        return sum(1 for a in self.answers if a.phase == phase and a.status == status)


async def until(predicate: Any, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def ready(client: httpx2.AsyncClient) -> int:
    async with asyncio.timeout(10):
        return (await client.get("/readyz")).status_code


@pytest.fixture
async def service(private_postgres: PrivatePostgres) -> AsyncIterator[tuple[httpx2.AsyncClient, str]]:
    _, key = await add_user(private_postgres.url, "alice")
    settings = Settings(database_url=private_postgres.url)
    async with serving(settings, FunctionModel(booking)) as (_, client):
        yield client, key


@pytest.mark.postgres
async def test_a_restart_under_load_answers_503_then_recovers_with_nothing_half_written(
    private_postgres: PrivatePostgres, service: tuple[httpx2.AsyncClient, str]
) -> None:
    client, key = service
    load = Load(client, key)
    workers = [asyncio.create_task(load.worker(200)) for _ in range(6)]
    try:
        await until(lambda: load.count("before", 200) >= 12, 30)
        assert await ready(client) == 200

        # Stop the server while runs are under way (each turn takes a moment).
        await asyncio.to_thread(private_postgres.stop)
        load.phase = "outage"
        await until(lambda: load.count("outage", 503) >= 12, 30)
        outage_ready = await ready(client)

        load.phase = "restarting"  # the server accepts connections before pg_ctl returns
        await asyncio.to_thread(private_postgres.start)
        started = time.monotonic()
        load.phase = "after"
        await until(lambda: load.count("after", 200) >= 12, 30)
        load.stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(*workers)
    finally:
        load.stop.set()
        for task in workers:
            task.cancel()
    recovered = min(a.done for a in load.answers if a.phase == "after" and a.status == 200) - started
    cut = sum(1 for a in load.answers if a.phase == "before" and a.status == 503)
    print(
        f"\ndatabase outage: {len(load.answers)} requests, {cut} cut off mid-run by the stop, "
        f"{load.count('outage', 503)} refused during the outage; first booking {recovered:.2f} s "
        "after the server was back"
    )

    # Only two answers exist: done, or 503 with a clear body. Never a 500, never a hang.
    assert {a.status for a in load.answers} <= {200, 503}, [a.body for a in load.answers if a.status >= 500]
    unavailable = [a for a in load.answers if a.status == 503]
    assert unavailable
    for answer in unavailable:
        error = answer.body["error"]
        assert error["code"] == "service_unavailable" and error["type"] == "server_error"
        assert error["message"] == "The service cannot reach its database right now; retry in a few seconds."
        assert answer.headers["retry-after"] == "5"
    # Every request sent while the server was down failed; readiness said so.
    assert load.count("outage", 200) == 0
    assert outage_ready == 503
    assert await ready(client) == 200

    # Every request that failed is repeated, as an application would; each must now book once. A
    # run cut off mid-way is marked failed in the background once the database is back; until then
    # its repeat is told to retry shortly (409), and it honours Retry-After.
    async def settle(request_id: str) -> Answer:
        async with asyncio.timeout(30):
            while True:
                answer = await load.send(request_id, "retry")
                if answer.status != 409:
                    return answer
                assert answer.body["error"]["code"] == "run_in_progress"
                await asyncio.sleep(float(answer.headers["retry-after"]))

    failed = sorted({a.request_id for a in unavailable})
    settled = await asyncio.gather(*(settle(request_id) for request_id in failed))
    assert [a.status for a in settled] == [200] * len(failed), [a.body for a in settled if a.status != 200]
    await check_nothing_half_written(private_postgres.url, load)


async def check_nothing_half_written(url: str, load: Load) -> None:
    sent = {a.request_id for a in load.answers}
    connection = await asyncpg.connect(url, timeout=10)
    try:
        items = await connection.fetch("SELECT id, title FROM items")
        ledger = await connection.fetch("SELECT request_id, state, content FROM ledger")
        runs = await connection.fetch("SELECT request_id, state, outcome, conversation_id FROM runs")
        conversations = {r["id"] for r in await connection.fetch("SELECT id FROM conversations")}
    finally:
        await connection.close()

    titles = [row["title"] for row in items]
    # Exactly one entry per request id, none lost, none doubled.
    assert sorted(titles) == sorted(f"book {request_id}" for request_id in sent)
    assert len(ledger) == len(items) and {row["state"] for row in ledger} == {"done"}
    booked = {json.loads(row["content"])["item"]["id"] for row in ledger}
    assert booked == {row["id"] for row in items}
    assert {row["request_id"] for row in runs} == sent
    assert {row["state"] for row in runs} == {"done"}
    # A transcript is stored for every done run, and only for one.
    assert {row["conversation_id"] for row in runs} == conversations
    for row in runs:
        outcome = json.loads(row["outcome"]) if isinstance(row["outcome"], str) else row["outcome"]
        [booking_call] = outcome["calls"]
        assert booking_call["outcome"] == "ok"


async def test_a_failing_database_is_503_with_the_cause_in_the_log_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = sqlite_url(tmp_path)
    _, key = await add_user(url, "alice")
    async with serving(Settings(database_url=url), FunctionModel(booking)) as (_, client):
        with sqlite3.connect(tmp_path / "service.db") as db:
            db.execute("DROP TABLE runs")  # every claim now fails inside the database
        with caplog.at_level(logging.WARNING, logger="toolwire.service"):
            response = await client.post("/v1/chat", json=chat_body("book it"), headers=bearer(key))

    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json() == {
        "error": {
            "message": "The service cannot reach its database right now; retry in a few seconds.",
            "type": "server_error",
            "param": None,
            "code": "service_unavailable",
        }
    }
    # Where the database is and what it said is for the operator, not for the API's callers.
    [logged] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Answered 503")]
    assert "no such table: runs" in logged and str(tmp_path) in logged
