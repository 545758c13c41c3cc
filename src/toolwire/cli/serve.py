"""`toolwire serve`: run the HTTP service under uvicorn, stopping gracefully on SIGTERM or Ctrl-C.

On a stop signal the server stops accepting connections, lets open requests and streams finish
(up to `shutdown_timeout` seconds), waits for runs whose clients went away, then closes the
model and the database. FastAPI and uvicorn are imported only here, so `toolwire --help` stays fast.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["serve"]

_STARTUP_FAILURE = 3


async def _check_database(url: str | None) -> None:
    from toolwire.store import Database

    db = await Database.open(url)  # connects and migrates: a bad URL fails here, in one sentence
    await db.aclose()


def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (env TOOLWIRE_HOST, default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (env TOOLWIRE_PORT, default 8000).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="A TOML settings file (env TOOLWIRE_CONFIG).", dir_okay=False)
    ] = None,
) -> None:
    """Run the HTTP service: the chat API, the admin API, health checks and metrics."""
    import uvicorn

    from toolwire.assistant import build_model
    from toolwire.exceptions import ToolwireError
    from toolwire.service import create_app
    from toolwire.service.ops import configure_logging
    from toolwire.settings import Settings

    try:
        settings = Settings.from_env(config=config, host=host, port=port)
        configure_logging(settings.log_level, secrets=[settings.api_key or ""])
        # Fail before listening, with one sentence, rather than in the middle of uvicorn's startup.
        model = build_model(settings)
        asyncio.run(_check_database(settings.database_url))
    except ToolwireError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, model=model),
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            server_header=False,
            lifespan="on",
            timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout)),
        )
    )
    server.run()
    if not server.started:
        raise typer.Exit(code=_STARTUP_FAILURE)
