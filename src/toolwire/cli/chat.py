"""`toolwire chat` and `toolwire demo`: talk to the assistant from a terminal.

`toolwire demo` starts the demo tickets API on 127.0.0.1, registers its connection and functions for
the default tenant (replacing earlier ones), and asks the assistant to book an expense and to open a
ticket, showing each call and answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolwire.results import result_json

if TYPE_CHECKING:
    from toolwire.assistant import Assistant
    from toolwire.demo.tickets import TicketsServer
    from toolwire.messages import Message
    from toolwire.runner import RunResult
    from toolwire.settings import Settings

__all__ = ["chat", "demo", "result_json"]

DEMO_QUESTION = "Book 12.50 for lunch in category food"
TICKET_QUESTION = "Open a high-priority ticket: the user cannot log in"


def _fail(message: str) -> typer.Exit:
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]Error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=1)


async def _ask(
    assistant: Assistant,
    text: str,
    history: tuple[Message, ...],
    *,
    stream: bool,
    as_json: bool,
    request_id: str,
) -> RunResult:
    from rich.console import Console

    from toolwire.models.base import TextDelta
    from toolwire.runner import RunComplete

    console = Console(highlight=False)
    context = assistant.context(request_id=request_id)
    runner = assistant.runner
    if not stream or as_json:
        result = await runner.run(text, context=context, history=history)
        if as_json:
            sys.stdout.write(json.dumps(result_json(result), ensure_ascii=False) + "\n")
        else:
            console.print(result.answer)
            _print_calls(console, result)
        return result
    final: RunResult | None = None
    wrote = False
    async for event in runner.stream(text, context=context, history=history):
        if isinstance(event, TextDelta):
            # A turn that ends in calls may still have streamed text; it belongs to the answer.
            sys.stdout.write(event.text)
            sys.stdout.flush()
            wrote = True
        elif isinstance(event, RunComplete):
            final = event.result
    assert final is not None
    if not wrote:
        sys.stdout.write(final.answer)
    sys.stdout.write("\n")
    _print_calls(console, final)
    return final


def _print_calls(console: Any, result: RunResult) -> None:
    for trace in result.calls:
        mark = "[green]ok[/]" if trace.outcome == "ok" else f"[red]{trace.outcome}[/]"
        replay = " [yellow](replayed)[/]" if trace.replayed else ""
        console.print(f"  [dim]↳[/] [bold]{trace.name}[/]({trace.arguments}) {mark}{replay}")
    console.print(f"  [dim]{result.rounds} request(s) · route {result.route}[/]")


async def _session(settings_overrides: dict[str, Any], message: str | None, **flags: Any) -> None:
    from toolwire.assistant import open_assistant
    from toolwire.settings import Settings

    settings = Settings.from_env(**settings_overrides)
    request_id = flags.pop("request_id") or _request_id()
    async with open_assistant(settings) as assistant:
        if message is not None:
            await _ask(assistant, message, (), request_id=request_id, **flags)
            return
        history: tuple[Message, ...] = ()
        while True:
            try:
                text = (await asyncio.to_thread(input, "you> ")).strip()
            except EOFError:
                return
            if text in ("exit", "quit"):
                return
            if text:
                result = await _ask(assistant, text, history, request_id=_request_id(), **flags)
                history = result.transcript


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def _run(coro: Any) -> None:
    from toolwire.exceptions import ToolwireError

    try:
        asyncio.run(coro)
    except ToolwireError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None


def chat(
    message: Annotated[str | None, typer.Argument(help="Ask once; without it, start a conversation.")] = None,
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible endpoint (env TOOLWIRE_BASE_URL).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name (env TOOLWIRE_MODEL).")] = None,
    api_key: Annotated[str | None, typer.Option(help="API key (env TOOLWIRE_API_KEY).")] = None,
    route: Annotated[
        str | None, typer.Option(help="chat, responses, auto or jsonplan (env TOOLWIRE_ROUTE).")
    ] = None,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="Show text as it arrives.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per answer.")] = False,
    request_id: Annotated[
        str | None, typer.Option(help="The application's request id (default: a new one).")
    ] = None,
) -> None:
    """Talk to the bookkeeping assistant."""
    overrides = {"base_url": base_url, "model": model, "api_key": api_key, "route": route}
    _run(_session(overrides, message, stream=stream, as_json=as_json, request_id=request_id))


def demo(
    message: Annotated[
        str | None, typer.Argument(help="What to ask; without it, the two demo questions.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per answer.")] = False,
) -> None:
    """Start the demo tickets API, register its functions, then book an expense and open a ticket."""
    import secrets
    from pathlib import Path

    import platformdirs

    from toolwire.demo.tickets import TicketsServer

    questions = [message] if message else [DEMO_QUESTION, TICKET_QUESTION]
    folder = Path(platformdirs.user_data_dir("toolwire"))
    folder.mkdir(parents=True, exist_ok=True)
    # A new token each time: the demo API accepts only the credential its stored connection holds.
    token = secrets.token_urlsafe(24)
    _run(_demo(TicketsServer(folder / "tickets.db", token=token), token, questions, as_json=as_json))


async def _register_tickets(settings: Settings, base_url: str, token: str) -> None:
    """Store the tickets API's connection and functions for the default tenant, replacing older ones."""
    from toolwire.assistant import function_registry
    from toolwire.demo.tickets import tickets_functions
    from toolwire.store import Database

    db = await Database.open(settings.database_url)
    try:
        registry = function_registry(db)
        connection, functions = tickets_functions(base_url, token)
        await registry.add_connection("default", connection, replace=True)
        await registry.add_functions("default", functions, replace=True)
    finally:
        await db.aclose()


async def _demo(server: TicketsServer, token: str, questions: list[str], *, as_json: bool) -> None:
    from rich.console import Console

    from toolwire.assistant import open_assistant
    from toolwire.settings import Settings

    settings = Settings.from_env()
    await asyncio.to_thread(server.start)
    try:
        await _register_tickets(settings, server.base_url, token)
        if not as_json:
            Console(stderr=True, highlight=False).print(
                f"[dim]Tickets API on {server.base_url}; "
                "its connection and functions create_ticket, list_tickets, get_ticket are registered.[/]"
            )
        async with open_assistant(settings) as assistant:
            for question in questions:
                if not as_json:
                    typer.echo(f"you> {question}")
                await _ask(assistant, question, (), stream=True, as_json=as_json, request_id=_request_id())
    finally:
        await asyncio.to_thread(server.stop)
