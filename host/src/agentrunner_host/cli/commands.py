"""`agentrunner-host` on typer: serve, db upgrade, kb ingest, config check, run (streamed reply), interact,
runners, runs list / show / cancel, runtimes list / show / drain, artifacts get, migrate-pipeline.

gRPC's C core writes its own log lines to stderr (`I1201 ... ssl_transport_security.cc ...`); the CLI
silences them unless `GRPC_VERBOSITY` is set, so what a user sees is this program's one-line errors.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agentrunner_host import __version__
from agentrunner_host.cli import admin, artifacts, client, examples, runs, security, serve
from agentrunner_host.cli import runtimes as runtimes_cli
from agentrunner_host.cli.common import host_channel
from agentrunner_host.cli.render import MessageView, render_stream, run_request, stream_reply
from agentrunner_host.views.interactions import full_interaction_support

app = typer.Typer(help="The LangBot AgentRunner host.", no_args_is_help=True)
runs_app = typer.Typer(help="Run records: list, show (follows live runs), cancel.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
db_app = typer.Typer(help="The host database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
kb_app = typer.Typer(help="Built-in knowledge bases.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
config_app = typer.Typer(help="The host configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
artifacts_app = typer.Typer(help="Artifacts (files runners produced, attachments).", no_args_is_help=True)
app.add_typer(artifacts_app, name="artifacts")
runtimes_app = typer.Typer(help="Runtimes that dial in: list, show, drain.", no_args_is_help=True)
app.add_typer(runtimes_app, name="runtimes")


def _version(value: bool) -> None:
    if value:
        from agentrunner.protocol import PROTOCOL_VERSION

        typer.echo(f"agentrunner-host {__version__} (AgentRunner protocol v{PROTOCOL_VERSION})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """The LangBot AgentRunner host."""


serve.register(app)
admin.register(app, db_app, kb_app, config_app)
examples.register(config_app)
security.register(app, db_app)
client.register(app)
runs.register(runs_app)
artifacts.register(artifacts_app)
runtimes_cli.register(runtimes_app)


__all__ = [
    "MessageView",
    "app",
    "full_interaction_support",
    "host_channel",
    "render_stream",
    "run_request",
    "stream_reply",
]
