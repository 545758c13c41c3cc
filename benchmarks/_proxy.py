"""The floor of any Python gateway here: a minimal proxy in its own process, for `service.py`.

A bare ASGI function under uvicorn (with the same uvloop and httptools as `toolwire serve`) that
forwards each POST body to the upstream with one pooled `httpx2.AsyncClient` and answers with the
upstream's body: no authentication, no parsing, no logging.

Run alone: `python benchmarks/_proxy.py <upstream base URL> <port>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2


def free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def proxy_main(upstream_url: str, port: int) -> None:
    """The minimal proxy: forward each POST body to the upstream, answer with its body (the floor)."""
    import uvicorn

    client: httpx2.AsyncClient | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal client
        if scope["type"] == "lifespan":
            await receive()  # startup
            client = httpx2.AsyncClient(timeout=30)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert client is not None
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        headers = {"content-type": "application/json", "authorization": "Bearer sk-bench-upstream"}
        answer = await client.post(
            f"{upstream_url}{scope['path'].removeprefix('/v1')}", content=body, headers=headers
        )
        await send(
            {
                "type": "http.response.start",
                "status": answer.status_code,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer.content})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", server_header=False)


@contextlib.asynccontextmanager
async def minimal_proxy(upstream_url: str) -> AsyncIterator[str]:
    port = free_port()
    argv = [str(Path(__file__)), upstream_url, str(port)]
    process = await asyncio.create_subprocess_exec(sys.executable, *argv)
    url = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        yield url
    finally:
        process.terminate()
        await process.wait()


if __name__ == "__main__":
    proxy_main(sys.argv[1], int(sys.argv[2]))
