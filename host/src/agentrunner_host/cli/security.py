"""Security and integrity commands: `auth new-key`, `db check`."""

from __future__ import annotations

import pathlib
from typing import Annotated

import typer
import yaml

from agentrunner_host.cli.common import console, err_console, fail, load


def auth_new_key(
    client: Annotated[str, typer.Option("--client", help="The client id the key is for.")] = "my-client",
    operation: Annotated[
        list[str] | None,
        typer.Option(
            "--operation",
            "-o",
            help="An operation the client may call (repeat it, or a comma list; `all` for every one). "
            "Default: run, attach, get.",
        ),
    ] = None,
    key_file: Annotated[
        pathlib.Path | None,
        typer.Option(help="Write the key to this new file (mode 0600) instead of printing it."),
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option(
            "--runtime", help="Make a runtime key instead (a `runtimes.clients` entry with this id)."
        ),
    ] = None,
) -> None:
    """Make a random API key for a client. stdout gets its `auth.clients` entry (indented to sit under
    `auth:` / `clients:`, so `>> host.yaml` appends it to a config that ends with that list); the
    config holds only the key's sha256. The key goes to --key-file, or to stderr once; give it to
    the client as AGENTRUNNER_HOST_API_KEY or AGENTRUNNER_HOST_API_KEY_FILE. With --runtime NAME
    the entry is a `runtimes.clients` one (every runner id and label allowed: narrow them) and the
    key is the runtime's AGENTRUNNER_RUNTIME_KEY."""
    import secrets

    from agentrunner_host.auth.clients import key_digest
    from agentrunner_host.config.model import CLIENT_OPERATIONS

    if runtime is not None:
        key = "arr_" + secrets.token_urlsafe(32)
        _write_key_file(key_file, key)
        entry: dict[str, object] = {
            "id": runtime,
            "api_key_sha256": [key_digest(key)],
            "runner_ids": "*",
            "labels": ["*"],
        }
        _print_entry(entry, f"runtime client {runtime} (runtimes.clients)")
        _print_key(key, key_file, f"runtime {runtime!r}")
        given = (
            f"AGENTRUNNER_RUNTIME_KEY_FILE={key_file}" if key_file else "AGENTRUNNER_RUNTIME_KEY=<the key>"
        )
        err_console().print(
            f"on the runtime's machine: {given} python -m agentrunner connect HOST:PORT module:Runner",
            soft_wrap=True,
            highlight=False,
        )
        return
    operations = _operations(operation or ["run,attach,get"], CLIENT_OPERATIONS)
    key = "arh_" + secrets.token_urlsafe(32)
    _write_key_file(key_file, key)
    entry = {"id": client, "api_key_sha256": [key_digest(key)], "operations": operations}
    _print_entry(entry, f"client {client}")
    _print_key(key, key_file, f"client {client!r}")


def db_check(
    config: Annotated[
        pathlib.Path | None, typer.Option("--config", "-c", help="Host config file (YAML).")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database URL (overrides the config's database.url).")
    ] = None,
    live: Annotated[
        list[str] | None,
        typer.Option("--live", help="Instance id of a host still running (its open runs are not orphans)."),
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
        console().print(str(problem), highlight=False, soft_wrap=True)
    console().print(report.summary(), highlight=False)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    """Adds `auth new-key` and `db check` to the CLI's apps (each command is a function of this module)."""
    auth_app = typer.Typer(help="HostService client credentials.", no_args_is_help=True)
    app.add_typer(auth_app, name="auth")
    auth_app.command("new-key")(auth_new_key)
    db_app.command("check")(db_check)


def _operations(values: list[str], known: tuple[str, ...]) -> list[str]:
    """`--operation` values (repeated or comma lists; `all`) in the config's order; exit 2 naming an
    unknown one."""
    asked = {v.strip() for value in values for v in value.split(",") if v.strip()}
    if "all" in asked:
        return list(known)
    unknown = sorted(asked - set(known))
    if unknown:
        fail(f"unknown operation {unknown[0]!r} (known: {', '.join(known)}, all)", 2)
    return [op for op in known if op in asked]


def _write_key_file(key_file: pathlib.Path | None, key: str) -> None:
    """Writes the key to a new file readable by its owner only (never over an existing one)."""
    import os

    if key_file is None:
        return
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fail(f"{key_file} exists: a key file is never overwritten (remove it, or pick another name)", 2)
    except OSError as exc:
        fail(f"cannot create {key_file}: {exc.strerror}", 2)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")


def _print_entry(entry: dict[str, object], what: str) -> None:
    """Prints a credentials entry on stdout, indented to sit under `auth:` (or `runtimes:`) / `clients:`."""
    import textwrap

    text = yaml.safe_dump([entry], sort_keys=False, default_flow_style=None)
    print(f"    # {what}: made by `agentrunner-host auth new-key`")
    print(textwrap.indent(text, "    "), end="")


def _print_key(key: str, key_file: pathlib.Path | None, whose: str) -> None:
    """Says where the key went: the key file, or stderr once (never stdout, which goes in a config)."""
    if key_file is not None:
        err_console().print(f"the API key of {whose} is in {key_file} (mode 0600)", highlight=False)
    else:
        err_console().print(
            f"API key (shown once, store it as a secret): {key}", soft_wrap=True, highlight=False
        )
