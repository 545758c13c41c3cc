"""Chat runs: claim a request id, run the tool loop, store the outcome and the conversation at once.

(A little over 400 lines: the three steps below are one state machine, read best in one file.)

The database, not the process, decides what runs (so several servers can share one database):

1. **Claim.** One write transaction checks the conversation (it must belong to the caller's tenant
   and user, else 404) and inserts a `runs` row keyed by (tenant, request_id), state `running`.
   If the row exists: the same request done before gets its stored outcome (a *replay*, no second
   run); a different request under the same id gets 422 `request_id_reused`; a request still
   running gets **409** `run_in_progress` rather than a wait, so no connection is held open and
   OpenAI's SDKs retry 409 on their own. A conversation with another run under way also gets 409
   (`conversation_busy`): two runs appending to one transcript would lose one of them.
2. **Run.** The tool loop runs in a task of its own, bounded by `run_timeout`, so a client that
   disconnects (mid-stream or not) does not stop it: it finishes and its outcome is stored, and
   a repeat of the request gets it. Shutdown waits for these tasks (`drain`).
3. **Complete.** One transaction stores the outcome on the run row and writes the conversation's
   transcript; nothing is half-written. A run that fails (model error, timeout, cancellation)
   marks its row `failed` and leaves the conversation as it was; repeating the request runs it
   again, and the idempotency ledger keeps its writes from happening twice. A run that fails
   because the database went away is marked `failed` in the background once it answers again.

A row still `running` after `run_timeout` belongs to a process that died; a repeat claims it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import CursorResult, Update, select, update
from sqlalchemy.exc import IntegrityError

from toolwire.assistant import Assistant
from toolwire.exceptions import StorageError
from toolwire.messages import AssistantMessage, Message, UserMessage
from toolwire.results import result_json
from toolwire.runner import RunComplete, RunEvent, RunResult
from toolwire.service.auth import Principal
from toolwire.service.errors import ApiError, error_for
from toolwire.service.ops import Metrics
from toolwire.settings import Settings
from toolwire.store import Database
from toolwire.store.tables import utc_now
from toolwire.store.tables_principals import ChatRun, Conversation
from toolwire.store.transcripts import dump_transcript, load_transcript

__all__ = ["Claim", "Replay", "RunHandle", "RunManager", "claim_run", "request_digest", "to_messages"]

logger = logging.getLogger("toolwire.service.runs")

_END = object()


@dataclass(kw_only=True, frozen=True)
class Claim:
    """A request id this process may now run."""

    tenant_id: str
    user_id: str
    request_id: str
    conversation_id: str
    history: tuple[Message, ...]
    """The stored transcript of the conversation (empty for a new one)."""
    existing_conversation: bool
    attempt: int


@dataclass(kw_only=True, frozen=True)
class Replay:
    """A request id that was run before: its stored outcome."""

    outcome: dict[str, Any]


def to_messages(messages: Sequence[tuple[str, str]]) -> list[Message]:
    """The request's (role, content) pairs as canonical messages."""
    return [
        UserMessage(content=content) if role == "user" else AssistantMessage(text=content)
        for role, content in messages
    ]


def request_digest(messages: Sequence[tuple[str, str]], conversation_id: str | None) -> str:
    """What a repeated request id must match: SHA-256 of the messages and the conversation id."""
    canonical = json.dumps({"messages": list(messages), "conversation_id": conversation_id}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _reused() -> ApiError:
    return ApiError(
        422,
        "This request_id was already used for a different request; send a new request_id for new messages.",
        param="request_id",
        code="request_id_reused",
    )


async def _claim_once(
    db: Database,
    principal: Principal,
    request_id: str,
    conversation_id: str | None,
    digest: str,
    timeout: float,
) -> Claim | Replay:
    now = utc_now()
    cutoff = now - dt.timedelta(seconds=timeout)
    async with db.transaction(write=True) as session:
        history: tuple[Message, ...] = ()
        if conversation_id is not None:
            # FOR UPDATE (PostgreSQL): claims on one conversation queue here, so the busy check
            # below sees a run that another server claimed a moment ago.
            conversation = await session.scalar(
                select(Conversation)
                .where(
                    Conversation.id == conversation_id,
                    Conversation.tenant_id == principal.tenant_id,
                    Conversation.user_id == principal.user_id,
                )
                .with_for_update()
            )
            if conversation is None:
                raise ApiError(
                    404,
                    f"There is no conversation {conversation_id!r}; leave conversation_id out to start one.",
                    param="conversation_id",
                    code="conversation_not_found",
                )
            history = load_transcript(conversation.transcript)
        run = await session.scalar(
            select(ChatRun)
            .where(ChatRun.tenant_id == principal.tenant_id, ChatRun.request_id == request_id)
            .with_for_update()
        )
        if run is not None:
            if run.user_id != principal.user_id or run.request_hash != digest:
                raise _reused()
            if run.state == "done" and run.outcome is not None:
                return Replay(outcome=run.outcome)
            if run.state == "running" and run.updated_at > cutoff:
                raise ApiError(
                    409,
                    "A request with this request_id is still running; "
                    "retry in a few seconds to get its outcome.",
                    param="request_id",
                    code="run_in_progress",
                    headers={"Retry-After": "2"},
                )
            # Failed, or lost with its process: run it again under a new attempt number.
            run.state, run.attempt, run.updated_at, run.outcome = "running", run.attempt + 1, now, None
        else:
            run = ChatRun(
                tenant_id=principal.tenant_id,
                request_id=request_id,
                user_id=principal.user_id,
                request_hash=digest,
                conversation_id=conversation_id or f"conv_{secrets.token_hex(12)}",
                state="running",
                updated_at=now,
            )
            session.add(run)
        await session.flush()
        if conversation_id is not None:
            busy = await session.scalar(
                select(ChatRun.id)
                .where(
                    ChatRun.conversation_id == conversation_id,
                    ChatRun.state == "running",
                    ChatRun.updated_at > cutoff,
                    ChatRun.id != run.id,
                )
                .limit(1)
            )
            if busy is not None:
                raise ApiError(
                    409,
                    "Another message of this conversation is still being answered; "
                    "send this one when it is done.",
                    param="conversation_id",
                    code="conversation_busy",
                    headers={"Retry-After": "2"},
                )
        return Claim(
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            request_id=request_id,
            conversation_id=run.conversation_id,
            history=history,
            existing_conversation=conversation_id is not None,
            attempt=run.attempt,
        )


async def claim_run(
    db: Database,
    principal: Principal,
    *,
    request_id: str,
    conversation_id: str | None,
    digest: str,
    run_timeout: float,
) -> Claim | Replay:
    """Claim `request_id` for the principal, or find its stored outcome.

    Raises:
        ApiError: 404 for a conversation the caller does not own, 409 for a request or conversation
            already being answered, 422 for a request id used for another request.
        StorageError: the database failed.
    """
    try:
        return await _claim_once(db, principal, request_id, conversation_id, digest, run_timeout)
    except StorageError as exc:
        if not isinstance(exc.__cause__, IntegrityError):
            raise
    # Another server inserted the same request id between our read and our insert: read it now.
    return await _claim_once(db, principal, request_id, conversation_id, digest, run_timeout)


def _finish(claim: Claim) -> Update:
    """The update of this claim's row while it is still running: a run that lost its claim changes nothing."""
    return update(ChatRun).where(
        ChatRun.tenant_id == claim.tenant_id,
        ChatRun.request_id == claim.request_id,
        ChatRun.attempt == claim.attempt,
        ChatRun.state == "running",
    )


async def _complete(db: Database, claim: Claim, result: RunResult, outcome: dict[str, Any]) -> None:
    transcript = dump_transcript(result.transcript)
    now = utc_now()
    async with db.transaction(write=True) as session:
        done = await session.execute(_finish(claim).values(state="done", outcome=outcome, updated_at=now))
        if not cast(CursorResult[Any], done).rowcount:
            logger.warning("Run %s lost its claim; its outcome is not stored", claim.request_id)
            return
        if claim.existing_conversation:
            await session.execute(
                update(Conversation)
                .where(
                    Conversation.id == claim.conversation_id,
                    Conversation.tenant_id == claim.tenant_id,
                    Conversation.user_id == claim.user_id,
                )
                .values(transcript=transcript, updated_at=now)
            )
        else:
            session.add(
                Conversation(
                    id=claim.conversation_id,
                    tenant_id=claim.tenant_id,
                    user_id=claim.user_id,
                    transcript=transcript,
                    updated_at=now,
                )
            )


async def _fail(db: Database, claim: Claim, error: dict[str, Any], *, patience: float | None = None) -> None:
    # With `patience`, keep trying (with backoff) while the database is away instead of raising: a
    # row left `running` would answer every repeat of the request with 409 until the run timeout.
    deadline, delay = time.monotonic() + (patience or 0.0), 0.25
    while True:
        try:
            async with db.transaction(write=True) as session:
                await session.execute(
                    _finish(claim).values(state="failed", outcome=error, updated_at=utc_now())
                )
            return
        except StorageError:
            if patience is None:
                raise
            if time.monotonic() + delay > deadline:
                # The row stays `running` and becomes claimable after the run timeout.
                logger.exception("Could not mark run %s as failed", claim.request_id)
                return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


@dataclass(eq=False)
class RunHandle:
    """A run under way: its events (when streamed) and the task producing its outcome."""

    task: asyncio.Task[dict[str, Any]]
    queue: asyncio.Queue[object] = field(default_factory=asyncio.Queue)

    async def events(self) -> AsyncIterator[RunEvent]:
        """The run's events as they happen, until it ends (its outcome is `task`'s result)."""
        while True:
            event = await self.queue.get()
            if event is _END:
                return
            yield cast(RunEvent, event)


class RunManager:
    """Starts runs as tasks of their own and waits for them at shutdown."""

    def __init__(self, assistant: Assistant, settings: Settings, metrics: Metrics) -> None:
        self.assistant = assistant
        self.settings = settings
        self.metrics = metrics
        self._tasks: set[asyncio.Task[dict[str, Any]]] = set()
        self._cleanups: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        """How many runs are under way in this process."""
        return len(self._tasks)

    def start(
        self, claim: Claim, principal: Principal, messages: list[Message], *, stream: bool
    ) -> RunHandle:
        """Run the tool loop for a claim in a new task; its result is the response body."""
        queue: asyncio.Queue[object] = asyncio.Queue()
        task = asyncio.create_task(self._execute(claim, principal, messages, queue if stream else None))
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        # A callback, not a `finally`: it also runs for a task cancelled before it started.
        task.add_done_callback(lambda _: queue.put_nowait(_END))
        return RunHandle(task=task, queue=queue)

    def _forget(self, task: asyncio.Task[dict[str, Any]]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure was logged and stored already

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the runs under way, then cancel the rest cleanly."""
        for cleanup in self._cleanups:
            cleanup.cancel()  # its row becomes claimable after the run timeout instead
        if not self._tasks:
            return
        logger.info("Waiting for %d run(s) to finish", len(self._tasks))
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _execute(
        self, claim: Claim, principal: Principal, messages: list[Message], queue: asyncio.Queue[object] | None
    ) -> dict[str, Any]:
        context = self.assistant.context(request_id=claim.request_id, **principal.context_values())
        self.metrics.runs_in_flight.inc()
        try:
            async with asyncio.timeout(self.settings.run_timeout):
                # The caller's tenant decides the tools: the built-in ones and its own stored functions.
                runner = await self.assistant.runner_for(claim.tenant_id)
                if queue is None:
                    result = await runner.run(messages, context=context, history=claim.history)
                else:
                    result = await self._stream(
                        runner.stream(messages, context=context, history=claim.history), queue
                    )
            outcome = {**result_json(result), "conversation_id": claim.conversation_id}
            await _complete(self.assistant.db, claim, result, outcome)
        except BaseException as exc:
            error = error_for(exc)
            cancelled = isinstance(exc, asyncio.CancelledError)
            self.metrics.runs.labels(outcome="cancelled" if cancelled else "failed").inc()
            if not cancelled:
                logger.error("Run %s failed: %s", claim.request_id, exc, exc_info=error.status == 500)
            try:
                await asyncio.shield(_fail(self.assistant.db, claim, error.body()))
            except StorageError:
                # The database is away: the caller gets its answer now, the row is marked once it is back.
                logger.warning("Run %s will be marked failed once the database answers", claim.request_id)
                patience = self.settings.run_timeout
                cleanup = asyncio.create_task(
                    _fail(self.assistant.db, claim, error.body(), patience=patience)
                )
                self._cleanups.add(cleanup)
                cleanup.add_done_callback(self._cleanups.discard)
            raise
        finally:
            self.metrics.runs_in_flight.dec()
        self.metrics.runs.labels(outcome="done").inc()
        self.metrics.run_rounds.observe(result.rounds)
        self.metrics.record_calls(((c.name, c.outcome) for c in result.calls), runner.toolbox.names)
        logger.info(
            "Run %s done",
            claim.request_id,
            extra={
                "conversation_id": claim.conversation_id,
                "rounds": result.rounds,
                "calls": len(result.calls),
            },
        )
        return outcome

    @staticmethod
    async def _stream(events: AsyncIterator[RunEvent], queue: asyncio.Queue[object]) -> RunResult:
        result: RunResult | None = None
        # aclosing: a cancelled run closes the runner's generator (and its model stream) at once.
        async with contextlib.aclosing(cast(AsyncGenerator[RunEvent], events)) as stream:
            async for event in stream:
                if isinstance(event, RunComplete):
                    result = event.result
                else:
                    queue.put_nowait(event)
        assert result is not None
        return result
