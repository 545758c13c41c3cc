"""The `toolwire` command. Subcommands import what they need lazily so `--help` stays fast."""

from __future__ import annotations

import typer

from toolwire.cli.audit import audit
from toolwire.cli.chat import chat, demo
from toolwire.cli.conformance import conformance
from toolwire.cli.connections import connections_app
from toolwire.cli.functions import functions_app
from toolwire.cli.serve import serve
from toolwire.cli.users import users_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="toolwire",
    help="Let a language model act on your system safely: checked, local, exactly-once tool calls.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(chat)
app.command()(demo)
app.command()(conformance)
app.command()(audit)
app.command()(serve)
app.add_typer(users_app, name="users")
app.add_typer(connections_app, name="connections")
app.add_typer(functions_app, name="functions")


def main() -> None:
    """Entry point of the `toolwire` console script."""
    app()
