"""What the rows of the conformance suite share: the target, the recorded requests, one run of the loop.

A `Probe` runs the real `Runner`, `Gate` and idempotency ledger with the built-in toolset, on an
HTTP client whose event hook records every request body and status, so a row can read its
evidence both from what came back and from what went out on the wire.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2

from toolwire.conformance.toolset import Toolset
from toolwire.context import Context
from toolwire.exceptions import ToolwireError
from toolwire.gate import Gate
from toolwire.gate.ledger import Ledger
from toolwire.messages import CallTrace, Message, ToolResult
from toolwire.models.openai import OpenAIModel
from toolwire.models.routes import ConfiguredRoute
from toolwire.runner import RunComplete, RunEvent, Runner, RunResult
from toolwire.tools import Tool, Toolbox
from toolwire.wire import chat, responses

__all__ = ["SYSTEM_PROMPT", "Exchange", "Outcome", "Probe", "Row", "Status", "Target", "recorder"]

Status = Literal["PASS", "FAIL", "SKIP"]
"""A row's verdict."""

SYSTEM_PROMPT = (
    "You are being tested for tool calling. When the user asks you to use a tool, call it with "
    "exactly the values the user gives; never invent or correct values. Answer briefly."
)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the evidence table."""

    name: str
    status: Status
    detail: str
    """The evidence (PASS) or the reason (FAIL, SKIP), in one line."""
    route: str | None = None
    """The route that answered, when the row got that far."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """Machine-readable facts behind `detail`."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """The endpoint under test."""

    base_url: str
    model: str
    route: ConfiguredRoute = "auto"
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    """Seconds per HTTP read; a row gets six times this in all, so nothing hangs."""


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """One HTTP request the suite sent, as the client recorded it."""

    route: str
    """`chat` or `responses`, from the path."""
    body: dict[str, Any]
    status: int

    def transcript(self) -> list[Message]:
        """The request body read back as a canonical transcript (empty when it cannot be read)."""
        parse = responses.parse_request if self.route == "responses" else chat.parse_request
        try:
            return parse(self.body)[0]
        except ToolwireError:
            return []

    def tools(self) -> list[dict[str, Any]]:
        """The function definitions sent, in one shape for both wires: name, description, schema, strict."""
        keys = ("name", "description", "parameters", "strict")
        return [
            {k: (tool.get("function") or tool).get(k) for k in keys} for tool in self.body.get("tools") or ()
        ]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One run of the loop: its result, the stream events if streamed, and the requests it sent."""

    result: RunResult
    exchanges: list[Exchange]
    events: list[RunEvent] = field(default_factory=list)

    def calls(self, name: str) -> list[CallTrace]:
        """The traces of calls to `name`."""
        return [trace for trace in self.result.calls if trace.name == name]

    def sent_results(self) -> dict[str, list[str]]:
        """Each tool result the endpoint was sent, by call id, read back from the last request body."""
        sent: dict[str, list[str]] = {}
        for message in self.exchanges[-1].transcript() if self.exchanges else ():
            if isinstance(message, ToolResult):
                sent.setdefault(message.call_id, []).append(message.content)
        return sent


class Probe:
    """The state one suite run shares between its rows.

    Args:
        target: The endpoint under test.
        client: The HTTP client every model uses; its hook appends to `sent`.
        ledger: The idempotency ledger of the write tool.
        sent: The recorded exchanges, in order.
    """

    def __init__(
        self, target: Target, client: httpx2.AsyncClient, ledger: Ledger, sent: list[Exchange]
    ) -> None:
        self.target = target
        self.client = client
        self.ledger = ledger
        self.sent = sent
        self.toolset = Toolset()

    def model(self, route: ConfiguredRoute | None = None) -> OpenAIModel:
        """A model for the target on `route` (the target's route by default), on the shared client."""
        return OpenAIModel(
            self.target.model,
            base_url=self.target.base_url,
            api_key=self.target.api_key,
            route=route or self.target.route,
            client=self.client,
            timeout=self.target.timeout,
        )

    async def run(
        self,
        prompt: str,
        *,
        route: ConfiguredRoute | None = None,
        request_id: str | None = None,
        stream: bool = False,
        offer: Sequence[Tool] = (),
    ) -> Outcome:
        """Run the loop once for `prompt` with the allowlisted tools, plus `offer` shown but not allowed.

        Raises:
            ModelError: the endpoint failed in a way no fallback absorbed.
        """
        allowed = self.toolset.allowed()
        runner = Runner(
            self.model(route),
            Toolbox([*allowed, *offer]),
            gate=Gate(Toolbox(allowed), ledger=self.ledger),
            system_prompt=SYSTEM_PROMPT,
            max_rounds=3,
        )
        context = Context(request_id=request_id or f"conformance-{uuid.uuid4().hex}")
        start = len(self.sent)
        if not stream:
            result = await runner.run(prompt, context=context)
            return Outcome(result=result, exchanges=self.sent[start:])
        events = [event async for event in runner.stream(prompt, context=context)]
        last = events[-1]
        assert isinstance(last, RunComplete)  # a stream ends with it or raises
        return Outcome(result=last.result, exchanges=self.sent[start:], events=events)


def recorder(sent: list[Exchange]) -> Callable[[httpx2.Response], Awaitable[None]]:
    """An httpx2 response hook appending each model request (body and status) to `sent`."""

    async def record(response: httpx2.Response) -> None:
        request = response.request
        route = "responses" if request.url.path.endswith("/responses") else "chat"
        try:
            body = json.loads(request.content)
        except ValueError:
            body = {}
        sent.append(
            Exchange(route=route, body=body if isinstance(body, dict) else {}, status=response.status_code)
        )

    return record
