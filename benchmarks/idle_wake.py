"""What a pause costs one HTTP round trip on this machine: the same request back to back and after idling.

The gateway's added latency is measured one request at a time with the upstream's 50 ms between
requests (`service.py`), so every process on the path has gone idle before each request. This
benchmark isolates that effect, with no toolwire code on the path: a bare ASGI function under
uvicorn (uvloop and httptools, as `toolwire serve`) answering a 450-byte JSON body, in its own
process, called by one pooled `httpx2.AsyncClient` and by a request written by hand on a bare
asyncio socket. The clients alternate, request by request, in blocks: back to back, then with a
pause before each request (20 ms, 50 ms), in rotation. Figures: p50 of each, and the ratio of
paused to back to back.

A second server, identical but holding the response head until its body is ready so both leave in
one write (one wake-up of the client instead of two), tells whether the number of writes matters.

Run: `.venv/bin/python benchmarks/idle_wake.py [--requests 300]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2

from _proxy import exchange, free_port, listening

BODY = json.dumps({"id": "x" * 20, "choices": [{"message": {"content": "y" * 400}}]}).encode()
PAUSES = (0.0, 0.02, 0.05)


def server_main(port: int, one_write: bool) -> None:
    """Answer every request with BODY; with `one_write`, the head and body leave in one write."""
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})

    if one_write:
        # uvicorn writes the head the moment it is sent; this cycle keeps it for the body's write.
        from uvicorn.protocols.http import httptools_impl

        class Held:
            """Stands in for the transport while uvicorn writes; keeps what it writes."""

            def __init__(self, transport: Any, data: bytes = b"") -> None:
                self.transport, self.data = transport, data

            def write(self, data: bytes) -> None:
                self.data += data

            def __getattr__(self, name: str) -> Any:
                return getattr(self.transport, name)

        class OneWrite(httptools_impl.RequestResponseCycle):  # type: ignore[misc]
            held = b""

            async def send(self, message: Any) -> None:
                real = self.transport
                self.transport = held = Held(real, self.held)
                try:
                    await super().send(message)
                finally:
                    self.transport = real
                if message["type"] == "http.response.start":
                    self.held = held.data
                else:
                    self.held = b""
                    real.write(held.data)

        httptools_impl.RequestResponseCycle = OneWrite  # the protocol makes its cycles by this name
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="httptools")


@contextlib.asynccontextmanager
async def server(one_write: bool) -> AsyncIterator[int]:
    port = free_port()
    argv = [str(Path(__file__)), "--serve", str(port), *(["--one-write"] if one_write else [])]
    async with listening(argv, port):
        yield port


async def by_socket(port: int) -> Callable[[], Awaitable[None]]:
    """A request written by hand on one kept-alive connection, its answer read by Content-Length."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}"

    async def send() -> None:
        if await exchange(reader, writer, request) != BODY:
            raise RuntimeError("unexpected answer on the socket")

    return send


async def main(requests: int) -> str:
    async with server(False) as plain, server(True) as one, httpx2.AsyncClient() as client:

        def via_httpx2(port: int) -> Callable[[], Awaitable[None]]:
            async def send() -> None:
                response = await client.post(f"http://127.0.0.1:{port}/", content=b"{}")
                if response.content != BODY:
                    raise RuntimeError(f"unexpected answer: {response.status_code}")

            return send

        contenders = {
            "httpx2 client, uvicorn": via_httpx2(plain),
            "httpx2 client, uvicorn, head and body in one write": via_httpx2(one),
            "hand-written request on a socket, uvicorn": await by_socket(plain),
        }
        times: dict[tuple[str, float], list[float]] = {(n, p): [] for n in contenders for p in PAUSES}
        # Blocks of one pause each, in rotation; within a block the contenders alternate. The first
        # rounds of every block warm up (after a block with pauses, nothing is warm).
        block = 25
        for _ in range(max(1, requests // (block - 5))):
            for pause in PAUSES:
                for number in range(block):
                    for name, send in contenders.items():
                        if pause:
                            await asyncio.sleep(pause)
                        started = time.perf_counter()
                        await send()
                        if number >= 5:
                            times[name, pause].append(time.perf_counter() - started)
    lines = [
        f"One HTTP round trip (about {requests} requests each), p50 in ms, back to back and after a pause "
        "before each request; the contenders alternate.\n",
        "| client, server | back to back | after 20 ms | after 50 ms | 50 ms pause vs back to back |",
        "|---|--:|--:|--:|--:|",
    ]
    for name in contenders:
        p50 = [statistics.median(times[name, pause]) * 1000 for pause in PAUSES]
        lines.append(f"| {name} | {p50[0]:.2f} | {p50[1]:.2f} | {p50[2]:.2f} | {p50[2] / p50[0]:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="measured requests per contender and pause")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # run as a server on this port
    parser.add_argument("--one-write", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        server_main(args.serve, args.one_write)
    else:
        print(asyncio.run(main(args.requests)))
