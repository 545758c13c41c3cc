"""Shared by the service tests: databases, users with keys, the app in-process, on a real port, or
as the real `toolwire serve` command in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from fastapi import FastAPI

from toolwire._serving import ThreadedServer
from toolwire.models.base import Model
from toolwire.service import create_app
from toolwire.settings import Settings
from toolwire.store import Database
from toolwire.store.principals import create_user

BOOK = {"category": "food", "amount": 12.5, "title": "lunch"}


def sqlite_url(tmp_path: Path, name: str = "service.db") -> str:
    return f"sqlite:///{tmp_path / name}"


async def add_user(
    url: str, name: str, *, tenant: str = "acme", scopes: tuple[str, ...] = ()
) -> tuple[str, str]:
    """Create a user directly in the database; returns (user id, API key)."""
    db = await Database.open(url)
    try:
        async with db.transaction(write=True) as session:
            user, issued = await create_user(session, tenant_id=tenant, name=name, scopes=scopes)
        return user.id, issued.key
    finally:
        await db.aclose()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat_body(text: str, request_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": text}],
        "request_id": request_id or f"req-{uuid.uuid4().hex}",
        **extra,
    }


@asynccontextmanager
async def serving(
    settings: Settings, model: Model, *, raise_app_exceptions: bool = True
) -> AsyncIterator[tuple[FastAPI, httpx2.AsyncClient]]:
    """The app in this event loop (lifespan run as a server would), and a client talking to it."""
    app = create_app(settings, model=model)
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        async with httpx2.AsyncClient(transport=transport, base_url="http://service") as client:
            yield app, client


class ServerThread(ThreadedServer):
    """The app served by uvicorn on 127.0.0.1 in a thread of its own (its own event loop)."""

    def __init__(self, app: FastAPI, *, graceful: int = 5) -> None:
        super().__init__(app, lifespan="on", graceful=graceful, name="service")


@contextmanager
def server_thread(app: FastAPI, *, graceful: int = 5) -> Iterator[ServerThread]:
    server = ServerThread(app, graceful=graceful)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def wait_for(predicate: Any, *, timeout: float = 10.0) -> None:
    """Poll an async predicate until it holds; fails the test after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.02)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def read_events(response: httpx2.Response) -> AsyncIterator[tuple[str, Any]]:
    """The Server-Sent Events of a streamed response, as (event name, parsed data)."""
    import json

    name: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if name is not None or data:
                yield name or "message", json.loads("\n".join(data))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


@dataclass
class ServeProcess:
    """A running `toolwire serve`: its address, its process, and its stderr as read so far."""

    url: str
    process: asyncio.subprocess.Process
    log: asyncio.Task[bytes]
    """Everything the process writes to stderr, complete once it has exited."""


@asynccontextmanager
async def toolwire_serve(values: dict[str, str], *, ready_within: float = 60) -> AsyncIterator[ServeProcess]:
    """`toolwire serve` with only `values` of the TOOLWIRE_ settings, ready; stopped with SIGTERM after."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_")}
    env |= {**values, "TOOLWIRE_PORT": str(port)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "toolwire",
        "serve",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    log = asyncio.create_task(process.stderr.read())  # read all along: a full pipe would block it
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(base_url=url, timeout=10) as client, asyncio.timeout(ready_within):
            while True:
                with contextlib.suppress(httpx2.TransportError):
                    if (await client.get("/readyz")).status_code == 200:
                        break
                assert process.returncode is None, (await log).decode()
                await asyncio.sleep(0.1)
        yield ServeProcess(url=url, process=process, log=log)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        await log
