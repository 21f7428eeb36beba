"""Operator commands: `db upgrade`, `kb ingest`, `migrate-pipeline`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
from typing import Annotated, Any

import typer
import yaml

from agentrunner.errors import AgentRunnerError
from agentrunner_host.cli.common import ConfigOpt, JsonOpt, console, err_console, fail, load, print_json


def config_check(
    config: ConfigOpt,
    offline: Annotated[bool, typer.Option(help="Skip dialing the runner endpoints.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check a host config: its schema, bindings that can never match, and (dialing every runner
    endpoint, starting for the check the LangBot plugin bridges the host would start) agents whose
    runner no endpoint serves and each agent's runner_config against the runner's manifest. Exit 0 when clean, 1 on errors, 2 when the file itself is invalid;
    warnings alone exit 0."""
    from agentrunner_host.observability.telemetry import configure_logging
    from agentrunner_host.registry.check import (
        Problem,
        check_against_registry,
        check_bindings,
        check_runtimes,
    )
    from agentrunner_host.server.managed import entry_problems

    configure_logging("error")  # the registry's own warnings would repeat the problems below
    cfg = load(config)
    problems = [Problem("error", path, reason) for path, reason in entry_problems(cfg)]
    problems += check_bindings(cfg) + check_runtimes(cfg)
    if not offline:
        manifests, endpoints = asyncio.run(_probe(cfg))
        problems += check_against_registry(cfg, manifests, endpoints)
    errors = sum(p.severity == "error" for p in problems)
    if as_json:
        print_json({"config": str(config), "problems": [p.as_dict() for p in problems]})
    else:
        for p in problems:
            style = "red" if p.severity == "error" else "yellow"
            console().print(f"[{style}]{p.severity}[/{style}]: {p.path}: {p.message}", highlight=False,
                          soft_wrap=True)  # fmt: skip
        warned = len(problems) - errors
        summary = "ok" if not problems else f"{errors} error(s), {warned} warning(s)"
        scope = " (offline: runner endpoints not dialed)" if offline else ""
        console().print(f"{config}: {summary}{scope}", highlight=False)
    if errors:
        raise typer.Exit(1)


async def _probe(cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every runner endpoint dialed once; the runners the host would start itself (`kind:
    langbot-plugins`) are started for it and stopped after, so their manifests are checked too."""
    from agentrunner_host.registry.check import probe_registry
    from agentrunner_host.server.managed import ManagedRunners

    if not any(r.kind != "grpc" for r in cfg.runners):
        return await probe_registry(cfg)
    managed = await ManagedRunners.start(cfg, capture=True)  # their logs are not the check's output
    try:
        manifests, endpoints = await probe_registry(cfg)
        for runner in managed.runners:  # a bridge that did not start says why (its own one-line error)
            health = endpoints.get(runner.entry.id)
            if health is not None and not health.available and runner.start_error():
                endpoints[runner.entry.id] = dataclasses.replace(health, last_error=runner.start_error())
        return manifests, endpoints
    finally:
        await managed.stop()


def db_upgrade(
    config: Annotated[
        pathlib.Path | None, typer.Option("--config", "-c", help="Host config file (YAML).")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database URL (overrides the config's database.url).")
    ] = None,
) -> None:
    """Migrate the host database to the schema this host needs (Alembic upgrade to head)."""
    from agentrunner_host.config.model import DEFAULT_DATABASE_URL, HostEnv
    from agentrunner_host.store.migrate import migrate_cli

    url = database_url or (load(config).database.url if config else HostEnv().database_url)
    try:
        migrate_cli(url or DEFAULT_DATABASE_URL, echo=lambda line: console().print(line, highlight=False))
    except Exception as exc:  # a database the host cannot reach or migrate: say why, no stack trace
        fail(f"upgrade failed: {type(exc).__name__}: {exc}")


def kb_ingest(
    kb_id: Annotated[str, typer.Argument(help="Knowledge base id (from the config's knowledge_bases).")],
    directory: Annotated[
        pathlib.Path | None, typer.Argument(help="Directory to ingest (default: the base's source_dir).")
    ] = None,
    config: ConfigOpt = pathlib.Path("host.yaml"),
) -> None:
    """Ingest text / Markdown / HTML files into a built-in knowledge base (re-ingest is incremental)."""
    cfg = load(config)
    if directory is not None and not directory.is_dir():
        fail(f"{directory}: not a directory", 2)
    try:
        report = asyncio.run(_kb_ingest(cfg, kb_id, directory))
    except AgentRunnerError as err:
        fail(f"{err.reason}: {err.message}")
    console().print(
        f"ingested {kb_id}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
        f"{report.removed} removed, {report.chunks} chunks"
        + (f", {len(report.failed)} failed" if report.failed else "")
    )
    for skipped in report.skipped:
        console().print(f"[yellow]skipped[/yellow] {skipped}")
    if report.degraded_reason:
        err_console().print(f"[yellow]warning[/yellow] {report.degraded_reason}", highlight=False)
    for path, reason in sorted(report.failed.items()):
        err_console().print(f"[red]not indexed[/red] {path}: {reason}", highlight=False)
    if report.failed:  # the others are indexed; the next ingest retries these
        err_console().print(f"{len(report.failed)} document(s) not indexed: run the ingest again later")
        raise typer.Exit(1)


def migrate_pipeline_cmd(
    file: Annotated[pathlib.Path, typer.Argument(help="Pipeline config (JSON or YAML).")],
    output: Annotated[pathlib.Path | None, typer.Option(help="Write here instead of rewriting FILE.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Report without writing.")] = False,
    agent_id: Annotated[str, typer.Option(help="Also print a host agent entry with this id.")] = "",
) -> None:
    """Rewrite a legacy pipeline config to `ai.runner.id` + `ai.runner_config[id]` and report the changes."""
    from agentrunner_host.config.legacy import MigrationError, migrate_pipeline, pipeline_to_agent

    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"{file}: cannot read: {exc.strerror or exc}", 2)
    except UnicodeDecodeError:
        fail(f"{file}: not a UTF-8 text file", 2)
    is_json = file.suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        fail(f"{file}: cannot parse: {' '.join(str(exc).split())}", 2)
    try:
        migration = migrate_pipeline(data if isinstance(data, dict) else {})
    except MigrationError as exc:
        fail(f"{file}: {exc}", 2)
    for change in migration.changes:
        typer.echo(f"changed: {change}")
    if not migration.changed:
        typer.echo("already in the new shape: nothing to change")
    target = output or file
    if migration.changed and not dry_run:
        body = (
            json.dumps(migration.config, ensure_ascii=False, indent=2) + "\n"
            if is_json
            else yaml.safe_dump(migration.config, allow_unicode=True, sort_keys=False)
        )
        try:
            target.write_text(body, encoding="utf-8")
        except OSError as exc:
            fail(f"{target}: cannot write: {exc.strerror or exc}", 2)
        typer.echo(f"wrote {target}")
    if agent_id:
        console().print_json(json.dumps({"agents": [pipeline_to_agent(migration.config, agent_id)]}))


def register(app: typer.Typer, db_app: typer.Typer, kb_app: typer.Typer, config_app: typer.Typer) -> None:
    """Adds the operator commands to the CLI's apps (each command is a function of this module)."""
    config_app.command("check")(config_check)
    db_app.command("upgrade")(db_upgrade)
    kb_app.command("ingest")(kb_ingest)
    app.command("migrate-pipeline")(migrate_pipeline_cmd)


async def _kb_ingest(cfg: Any, kb_id: str, directory: pathlib.Path | None) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from agentrunner_host.capabilities.knowledge import KnowledgeService
    from agentrunner_host.capabilities.models import ModelRegistry
    from agentrunner_host.store.db import Database
    from agentrunner_host.store.migrate import DatabaseNotMigratedError, ensure_current

    try:
        await asyncio.to_thread(ensure_current, cfg.database.url)
    except DatabaseNotMigratedError as exc:
        err_console().print(f"[red]error[/red]: {exc}", highlight=False)
        raise typer.Exit(3) from None
    db = Database(cfg.database.url)
    models = ModelRegistry(cfg.models)
    try:
        knowledge = KnowledgeService(db.engine, cfg.knowledge_bases, embedder_for=models.embedder)
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[file]}"),
            console=console(),
        ) as progress:  # fmt: skip
            task = progress.add_task(f"ingest {kb_id}", total=None, file="")

            def step(done: int, total: int, path: str) -> None:
                progress.update(task, completed=done, total=total, file=path)

            return await knowledge.ingest(kb_id, directory, progress=step)
    finally:
        await models.aclose()
        await db.dispose()
