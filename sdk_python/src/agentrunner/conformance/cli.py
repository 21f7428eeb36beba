"""`agentrunner-conformance runner|host --target HOST:PORT`: the conformance kits on the command line.

Prints the pass/fail table, optionally writes JUnit XML, and exits 0 when the target conforms (no MUST
check failed; with `--strict` no SHOULD check either), 1 when it does not and 2 when the target could
not be checked at all (bad arguments, nothing listening).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import structlog
import typer
from rich.console import Console

from agentrunner.conformance.report import Report

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Check a runner or a host against the AgentRunner Protocol v1 contract (language-neutral: gRPC only).",
)
_console = Console()


@app.callback()
def _kits() -> None:
    """Check a runner or a host against the AgentRunner Protocol v1 contract."""


Target = Annotated[str, typer.Option("--target", help="host:port of the service under test.")]
Junit = Annotated[Path | None, typer.Option("--junit", help="Also write the results as JUnit XML here.")]
Strict = Annotated[
    bool, typer.Option("--strict", help="Fail on warnings too (a failed SHOULD check, docs/protocol.md §8).")
]


def _quiet() -> None:
    # The kit's own servers log through structlog; the table is the output.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


def _finish(report: Report, junit: Path | None, strict: bool) -> None:
    report.strict = strict
    report.print(_console)
    if junit is not None:
        report.write_junit(junit)
        _console.print(f"JUnit XML: {junit}")
    raise typer.Exit(0 if report.ok else 1)


def _check_target(target: str) -> None:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        _console.print(f"[red]--target must look like HOST:PORT, got {target!r}[/]")
        raise typer.Exit(2)


@app.command("runner")
def runner_command(
    target: Annotated[str, typer.Option("--target", help="host:port of the runner under test.")] = "",
    connect_listen: Annotated[
        str,
        typer.Option(
            help="host:port to listen on for a runtime that dials in (python -m agentrunner connect, the Go "
            "and TypeScript kits' connect mode) instead of --target; prints "
            "`AGENTRUNNER_CONFORMANCE_LISTENING host:port` first."
        ),
    ] = "",
    runner_id: Annotated[
        str, typer.Option(help="Runner id or name to check (default: the first listed).")
    ] = "",
    timeout: Annotated[
        float, typer.Option(help="Seconds a run may take before the kit gives up on it.")
    ] = 20.0,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the target to start answering.")] = 10.0,
    junit: Junit = None,
    strict: Strict = False,
) -> None:
    """Play the host against a runner: discovery, stream grammar, proxy etiquette, errors, Control, deadlines."""
    from agentrunner.conformance.runner_kit import check_runner

    if bool(target) == bool(connect_listen):
        _console.print("[red]give either --target (a runner that listens) or --connect-listen (a runtime)[/]")
        raise typer.Exit(2)
    _check_target(target or connect_listen)
    _quiet()

    def listening(address: str) -> None:
        print(f"AGENTRUNNER_CONFORMANCE_LISTENING {address}", flush=True)

    report = asyncio.run(
        check_runner(
            target,
            runner_id=runner_id,
            timeout=timeout,
            wait=wait,
            connect_listen=connect_listen,
            on_listening=listening,
        )
    )
    if not report.results or (report.results[-1].check_id == "discovery.list" and not report.ok):
        report.print(_console)
        raise typer.Exit(2)
    _finish(report, junit, strict)


@app.command("host")
def host_command(
    target: Target,
    runner_listen: Annotated[
        str,
        typer.Option(
            help="host:port the kit's runner listens on; the host must have it as a runner endpoint."
        ),
    ],
    agent: Annotated[str, typer.Option(help="Agent the host routes to the kit's runner.")] = "conformance",
    deadline_agent: Annotated[
        str, typer.Option(help="Agent with a short timeout (a few seconds) for the deadline check.")
    ] = "",
    timeout: Annotated[float, typer.Option(help="Seconds one event's run may take.")] = 30.0,
    junit: Junit = None,
    strict: Strict = False,
) -> None:
    """Play runners against a host: a misbehaving runner per scenario, every answer of the host checked.
    The kit calls the host as a client: its API key from AGENTRUNNER_HOST_API_KEY or
    AGENTRUNNER_HOST_API_KEY_FILE, TLS from AGENTRUNNER_HOST_CA_FILE / _CERT_FILE / _KEY_FILE."""
    from agentrunner.client import ClientCredentials, ClientCredentialsError
    from agentrunner.conformance.host_kit import check_host

    _check_target(target)
    _check_target(runner_listen)
    try:
        credentials = ClientCredentials.from_env()
    except ClientCredentialsError as exc:
        Console(stderr=True).print(f"[red]error[/red]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    _quiet()
    report = asyncio.run(
        check_host(
            target,
            runner_listen=runner_listen,
            agent=agent,
            deadline_agent=deadline_agent,
            timeout=timeout,
            credentials=credentials,
        )
    )
    if len(report.results) == 1 and not report.ok:
        report.print(_console)
        raise typer.Exit(2)
    _finish(report, junit, strict)


def main() -> None:
    """The `agentrunner-conformance` command's entry point (console script)."""
    app()
