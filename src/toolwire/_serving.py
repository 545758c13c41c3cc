"""Serve an ASGI app with uvicorn on 127.0.0.1, in a background thread with its own event loop.

The demo tickets API, the scripted model server and the test harnesses all run this way. The
listening socket is made with `IPPROTO_TCP` on purpose: asyncio sets TCP_NODELAY only on sockets
whose protocol says TCP, and without it a kept-alive connection stalls about 40 ms per response
on delayed ACKs.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any, Literal, Self

import uvicorn

__all__ = ["ThreadedServer"]


class ThreadedServer:
    """One app on a free port of 127.0.0.1, started and stopped from synchronous code.

    Args:
        app: The ASGI application.
        lifespan: Whether to run the app's lifespan (startup and shutdown events).
        graceful: Seconds uvicorn waits for open connections when stopping.
        name: The thread's name, for debugging.
    """

    def __init__(
        self,
        app: Any,
        *,
        lifespan: Literal["on", "off"] = "off",
        graceful: int = 2,
        name: str = "toolwire-server",
    ) -> None:
        self.app = app
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        """The port the app is served on."""
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,
                log_level="warning",
                access_log=False,
                lifespan=lifespan,
                loop="asyncio",
                http="h11",
                ws="none",
                timeout_graceful_shutdown=graceful,
            )
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, name=name, daemon=True
        )

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start serving; returns once the server accepts connections.

        Raises:
            RuntimeError: the server did not start within `timeout` seconds.
        """
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"The server for {type(self.app).__name__} did not start.")
            self.thread.join(0.01)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop serving, wait for the thread to end, and release the port."""
        if self.thread.is_alive():
            self.server.should_exit = True
            self.thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
