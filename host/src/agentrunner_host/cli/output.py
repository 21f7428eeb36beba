"""The CLI's output and its one error path, without typer: `agentrunner-host serve` runs on these
without loading the CLI toolkit (issue 37: ~1.4 MiB of every served host). `fail` and `load` exit with
typer's `Exit` when typer runs the command (as before) and with `SystemExit` on `serve`'s typer-free
path (`serve_run.py`), so both exit with the same code."""

from __future__ import annotations

import functools
import pathlib
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from rich.console import Console


@functools.cache
def console() -> Console:
    """stdout's rich console, made on first use: `serve` prints no tables, so a host started from the
    command line does not load rich (issue 37: idle memory)."""
    from rich.console import Console

    return Console()


@functools.cache
def err_console() -> Console:
    """stderr's rich console, made on first use (see `console`)."""
    from rich.console import Console

    return Console(stderr=True)


def exit_with(code: int) -> NoReturn:
    """Ends the command with exit `code`: typer's `Exit` under a typer command (what its callers and
    typer's runner expect), `SystemExit` on the typer-free `serve` path (typer not loaded)."""
    typer = sys.modules.get("typer")
    if typer is not None:
        raise typer.Exit(code)
    raise SystemExit(code)


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and exit `code` (no traceback); the message is plain text (`[extra]` stays)."""
    from rich.markup import escape

    err_console().print(f"[red]error[/red]: {escape(message)}", highlight=False, soft_wrap=True)
    exit_with(code)


def load(config: pathlib.Path) -> Any:
    """The validated host config, or every problem (`file: path: reason` lines) and exit 2."""
    from agentrunner_host.config.model import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        err_console().print(f"[red]invalid config[/red]\n{exc}", highlight=False, soft_wrap=True)
        exit_with(2)
