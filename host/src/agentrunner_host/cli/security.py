"""Security and integrity commands: `auth new-key`, `db check`."""

from __future__ import annotations

import pathlib
from typing import Annotated

import typer
import yaml

from agentrunner_host.cli.common import console, fail, load


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    auth_app = typer.Typer(help="HostService client credentials.", no_args_is_help=True)
    app.add_typer(auth_app, name="auth")

    @auth_app.command("new-key")
    def auth_new_key(
        client: Annotated[str, typer.Option("--client", help="The client id the key is for.")] = "my-client",
        runtime: Annotated[
            str | None,
            typer.Option(
                "--runtime", help="Make a runtime key instead (runtimes.clients), for this client id."
            ),
        ] = None,
    ) -> None:
        """Make a random API key and print it with the config lines that accept it (only its hash goes in
        the config; give the key to the client, e.g. as AGENTRUNNER_HOST_API_KEY, or with --runtime to a
        runtime, as AGENTRUNNER_RUNTIME_KEY)."""
        import secrets

        from agentrunner_host.auth.clients import key_digest

        if runtime is not None:
            key = "arr_" + secrets.token_urlsafe(32)
            console.print(
                f"runtime key (shown once, store it as a secret): {key}", soft_wrap=True, highlight=False
            )
            console.print("config (runtimes.clients):", highlight=False)
            entry = {"id": runtime, "api_key_sha256": [key_digest(key)], "runner_ids": "*", "labels": ["*"]}
            console.print(yaml.safe_dump([entry], sort_keys=False), highlight=False)
            console.print(
                f"on the runtime's machine: AGENTRUNNER_RUNTIME_KEY={key} python -m agentrunner connect "
                "HOST:PORT module:Runner",
                soft_wrap=True,
                highlight=False,
            )
            return
        key = "arh_" + secrets.token_urlsafe(32)
        console.print(f"API key (shown once, store it as a secret): {key}", soft_wrap=True, highlight=False)
        console.print("config (auth.clients):", highlight=False)
        snippet = {"id": client, "api_key_sha256": [key_digest(key)], "operations": ["run", "attach", "get"]}
        console.print(yaml.safe_dump([snippet], sort_keys=False), highlight=False)

    @db_app.command("check")
    def db_check(
        config: Annotated[
            pathlib.Path | None, typer.Option("--config", "-c", help="Host config file (YAML).")
        ] = None,
        database_url: Annotated[
            str | None, typer.Option(help="Database URL (overrides the config's database.url).")
        ] = None,
        live: Annotated[
            list[str] | None,
            typer.Option(
                "--live", help="Instance id of a host still running (its open runs are not orphans)."
            ),
        ] = None,
    ) -> None:
        """Check the database's integrity (read-only): every ended run has exactly one terminal result, no
        run is open without a running host, no ended run's token works, no ledger gaps, no lost or
        duplicated transcript items. Exits 1 when it finds a problem."""
        from agentrunner_host.config.model import DEFAULT_DATABASE_URL, HostEnv
        from agentrunner_host.store.integrity import check_integrity

        url = database_url or (load(config).database.url if config else HostEnv().database_url)
        try:
            report = check_integrity(url or DEFAULT_DATABASE_URL, live_owners=live or ())
        except Exception as exc:  # a database the check cannot read: say why, no stack trace
            fail(f"check failed: {type(exc).__name__}: {exc}", 2)
        for problem in report.problems:
            console.print(str(problem), highlight=False, soft_wrap=True)
        console.print(report.summary(), highlight=False)
        if not report.ok:
            raise typer.Exit(1)
