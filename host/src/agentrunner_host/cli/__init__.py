"""`agentrunner-host`: serve, db upgrade, kb ingest, config check, run (streamed reply), interact,
runners, runs list / show / cancel, runtimes list / show / drain, artifacts get, migrate-pipeline.

The commands are typer's (`commands.py`), loaded when a command line needs them: a plain `serve` command
line runs without typer (`serve_run.py`; issue 37: the CLI toolkit is ~1.4 MiB of every served host).

gRPC's C core writes its own log lines to stderr (`I1201 ... ssl_transport_security.cc ...`); the CLI
silences them unless `GRPC_VERBOSITY` is set, so what a user sees is this program's one-line errors.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # before grpc's C core starts (first import below)

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrunner_host.cli.commands import (
        MessageView,
        app,
        full_interaction_support,
        host_channel,
        render_stream,
        run_request,
        stream_reply,
    )

_COMMANDS = frozenset(
    {
        "MessageView",
        "app",
        "full_interaction_support",
        "host_channel",
        "render_stream",
        "run_request",
        "stream_reply",
    }
)


def main() -> None:
    """The console script: `serve` with options it reads in full runs without typer, the rest on typer."""
    argv = sys.argv[1:]
    if argv[:1] == ["serve"]:
        from agentrunner_host.cli.serve_run import parse_serve_args, serve_host

        parsed = parse_serve_args(argv[1:])
        if parsed is not None:
            serve_host(**parsed)
            return
    from agentrunner_host.cli.commands import app

    app()


def __getattr__(name: str) -> Any:
    """The typer app and the CLI helpers other packages use, imported on first use (PEP 562)."""
    if name in _COMMANDS:
        from agentrunner_host.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MessageView",
    "app",
    "full_interaction_support",
    "host_channel",
    "main",
    "render_stream",
    "run_request",
    "stream_reply",
]

if __name__ == "__main__":
    main()
