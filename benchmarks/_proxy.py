"""The floors of any Python gateway here: minimal proxies in their own process, for `service.py`.

A bare ASGI function under uvicorn (with the same uvloop and httptools as `toolwire serve`) that
forwards each POST body to the upstream and answers with the upstream's body: no authentication,
no parsing, no logging. Two kinds, to tell the hop from the HTTP client:

- `httpx2`: forwards with one pooled `httpx2.AsyncClient`, the client toolwire uses.
- `socket`: writes the request by hand on one kept-alive asyncio connection and reads the answer
  by its Content-Length. Only the benchmark's known upstream can be reached this way (no chunked
  bodies, no errors, one request at a time): it measures the hop itself, not a usable client.

Run alone: `python benchmarks/_proxy.py <upstream base URL> <port> [httpx2|socket]`.
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


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bytes:
    """Write a whole HTTP/1.1 request by hand; read the answer's body by its Content-Length."""
    writer.write(request)
    lines = (await reader.readuntil(b"\r\n\r\n")).lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
    return await reader.readexactly(length)


def proxy_main(upstream_url: str, port: int, kind: str = "httpx2") -> None:
    """The minimal proxy: forward each POST body to the upstream, answer with its body (the floor)."""
    import uvicorn

    client: httpx2.AsyncClient | None = None
    upstream = httpx2.URL(upstream_url)
    connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def by_socket(path: str, body: bytes) -> bytes:
        nonlocal connection
        if connection is None:
            connection = await asyncio.open_connection(upstream.host, upstream.port)
        reader, writer = connection
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {upstream.host}\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer sk-bench-upstream\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        return await exchange(reader, writer, head.encode() + body)

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
        path = scope["path"].removeprefix("/v1")
        if kind == "socket":
            status, content = 200, await by_socket(upstream.path.rstrip("/") + path, body)
        else:
            headers = {"content-type": "application/json", "authorization": "Bearer sk-bench-upstream"}
            answer = await client.post(f"{upstream_url}{path}", content=body, headers=headers)
            status, content = answer.status_code, answer.content
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": content})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", server_header=False)


@contextlib.asynccontextmanager
async def listening(argv: list[str], port: int) -> AsyncIterator[None]:
    """Run `python *argv` until it accepts connections on 127.0.0.1:`port`; stop it when done."""
    process = await asyncio.create_subprocess_exec(sys.executable, *argv)
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        yield
    finally:
        process.terminate()
        await process.wait()


@contextlib.asynccontextmanager
async def minimal_proxy(upstream_url: str, kind: str = "httpx2") -> AsyncIterator[str]:
    """Run the minimal proxy of `kind` (`httpx2` or `socket`) in its own process; yield its URL."""
    port = free_port()
    async with listening([str(Path(__file__)), upstream_url, str(port), kind], port):
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    proxy_main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
