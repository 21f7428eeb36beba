"""`agentrunner-host serve` on typer: its options and help. The body is `serve_run.serve_host`, which
`agentrunner_host.cli.main` also runs without typer for a plain `serve` command line (issue 37)."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from agentrunner_host.cli.common import ConfigOpt
from agentrunner_host.cli.serve_run import serve_host


class LogLevel(enum.StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


LogLevelOpt = Annotated[
    LogLevel, typer.Option(help="Log level.", case_sensitive=False, envvar="AGENTRUNNER_LOG_LEVEL")
]


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        config: ConfigOpt,
        address: Annotated[str | None, typer.Option(help="Override listen.address.")] = None,
        log_level: LogLevelOpt = LogLevel.info,
    ) -> None:
        """Serve HostService + ProxyService (+ health, reflection) until SIGINT/SIGTERM.
        Refuses to start on a database that is not migrated (run `agentrunner-host db upgrade`)."""
        serve_host(config, address, log_level.value)
