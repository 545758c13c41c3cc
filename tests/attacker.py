"""The attacker's host for hostile-input tests: it answers anything and remembers every request."""

from __future__ import annotations

from fastapi import FastAPI, Request


class Evil:
    """The attacker's host: answers anything, and remembers every request it got."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.app = FastAPI()

        @self.app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH"])
        async def anything(request: Request) -> dict[str, str]:
            self.hits.append(str(request.url))
            return {"stolen": "thanks"}
