"""`agentrunner-host`: serve, db upgrade, kb ingest, run (streamed reply), interact, runners, runs show,
migrate-pipeline."""

from __future__ import annotations

import asyncio
import gc
import json
import pathlib
import signal
from typing import Annotated, Any

import grpc
import typer
import yaml
from google.protobuf import json_format
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from agentrunner.errors import AgentRunnerError, from_rpc_error
from agentrunner.results import kind_name
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc

app = typer.Typer(help="The LangBot AgentRunner host.", no_args_is_help=True, add_completion=False)
runs_app = typer.Typer(help="Run records.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
db_app = typer.Typer(help="The host database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
kb_app = typer.Typer(help="Built-in knowledge bases.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
console = Console()
err_console = Console(stderr=True)

HostOpt = Annotated[
    str, typer.Option("--host", "-H", help="Host address (host:port).", envvar="AGENTRUNNER_HOST")
]
# TLS to the host (the same environment variables the SDK reads for a runner's calls to the host)
CaOpt = Annotated[
    pathlib.Path | None,
    typer.Option(
        help="CA bundle verifying the host's certificate (turns TLS on).", envvar="AGENTRUNNER_HOST_CA_FILE"
    ),
]
CertOpt = Annotated[
    pathlib.Path | None,
    typer.Option(help="Client certificate for mutual TLS.", envvar="AGENTRUNNER_HOST_CERT_FILE"),
]
KeyOpt = Annotated[
    pathlib.Path | None, typer.Option(help="Client key for mutual TLS.", envvar="AGENTRUNNER_HOST_KEY_FILE")
]
TlsOpt = Annotated[bool, typer.Option("--tls", help="TLS with the system's CAs.")]


def host_channel(
    address: str,
    ca_file: pathlib.Path | None = None,
    cert_file: pathlib.Path | None = None,
    key_file: pathlib.Path | None = None,
    tls: bool = False,
) -> grpc.aio.Channel:
    """A channel to the host: plaintext unless TLS is asked for (`--tls` or any of the files)."""
    if not (tls or ca_file or cert_file or key_file):
        return grpc.aio.insecure_channel(address)
    if bool(cert_file) != bool(key_file):
        err_console.print("[red]error[/red] --cert-file and --key-file go together (mutual TLS)")
        raise typer.Exit(2)
    try:
        creds = grpc.ssl_channel_credentials(
            root_certificates=ca_file.read_bytes() if ca_file else None,
            private_key=key_file.read_bytes() if key_file else None,
            certificate_chain=cert_file.read_bytes() if cert_file else None,
        )
    except OSError as exc:
        err_console.print(f"[red]error[/red] cannot read {exc.filename}: {exc.strerror}")
        raise typer.Exit(2) from None
    return grpc.aio.secure_channel(address, creds)


def _fail(err: AgentRunnerError) -> None:
    err_console.print(f"[red]error[/red] {err.reason}: {err.message}")
    raise typer.Exit(1)


ConfigOpt = Annotated[pathlib.Path, typer.Option("--config", "-c", help="Host config file (YAML).")]


def _load(config: pathlib.Path) -> Any:
    from agentrunner_host.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        err_console.print(f"[red]invalid config[/red]\n{exc}")
        raise typer.Exit(2) from None


@app.command()
def serve(
    config: ConfigOpt,
    address: Annotated[str | None, typer.Option(help="Override listen.address.")] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
) -> None:
    """Serve HostService + ProxyService (+ health, reflection) until SIGINT/SIGTERM.
    Refuses to start on a database that is not migrated (run `agentrunner-host db upgrade`)."""
    from agentrunner_host.observability import configure_logging

    configure_logging(log_level)
    cfg = _load(config)
    asyncio.run(_serve(cfg, address))


async def _serve(cfg: Any, address: str | None) -> None:
    from prometheus_client import start_http_server

    from agentrunner_host.server import HostApp
    from agentrunner_host.store.db import DatabaseNotMigratedError

    try:
        host = await HostApp.open(cfg)
    except DatabaseNotMigratedError as exc:
        err_console.print(f"[red]refusing to serve[/red]: {exc}")
        raise typer.Exit(3) from None
    try:
        port = await host.start(address)
    except BaseException:
        await host.close_backends()
        raise
    if cfg.metrics.address:
        mhost, _, mport = cfg.metrics.address.rpartition(":")
        start_http_server(int(mport), addr=mhost or "127.0.0.1")
    # What is alive now (modules, descriptors, SQLAlchemy metadata, config, channels) lives as long as the
    # process: out of the collector's way, the collections that each run's garbage triggers stop walking
    # it again and again (~4% more results/s under the throughput benchmark).
    gc.collect()
    gc.freeze()
    bound_host = (address or cfg.listen.address).rsplit(":", 1)[0]
    print(f"AGENTRUNNER_HOST_LISTENING {bound_host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await host.stop(5.0)


@db_app.command("upgrade")
def db_upgrade(
    config: Annotated[
        pathlib.Path | None, typer.Option("--config", "-c", help="Host config file (YAML).")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database URL (overrides the config's database.url).")
    ] = None,
) -> None:
    """Migrate the host database to the schema this host needs (Alembic upgrade to head)."""
    from agentrunner_host.config import DEFAULT_DATABASE_URL, HostEnv
    from agentrunner_host.store.db import migrate_cli

    url = database_url or (_load(config).database.url if config else HostEnv().database_url)
    try:
        migrate_cli(url or DEFAULT_DATABASE_URL, echo=lambda line: console.print(line, highlight=False))
    except Exception as exc:  # a database the host cannot reach or migrate: say why, no stack trace
        err_console.print(f"[red]upgrade failed[/red]: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None


@kb_app.command("ingest")
def kb_ingest(
    kb_id: Annotated[str, typer.Argument(help="Knowledge base id (from the config's knowledge_bases).")],
    directory: Annotated[
        pathlib.Path | None, typer.Argument(help="Directory to ingest (default: the base's source_dir).")
    ] = None,
    config: ConfigOpt = pathlib.Path("host.yaml"),
) -> None:
    """Ingest text / Markdown / HTML files into a built-in knowledge base (re-ingest is incremental)."""
    cfg = _load(config)
    if directory is not None and not directory.is_dir():
        err_console.print(f"[red]error[/red] {directory}: not a directory")
        raise typer.Exit(2)
    try:
        report = asyncio.run(_kb_ingest(cfg, kb_id, directory))
    except AgentRunnerError as err:
        _fail(err)
    console.print(
        f"ingested {kb_id}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
        f"{report.removed} removed, {report.chunks} chunks"
    )
    for skipped in report.skipped:
        console.print(f"[yellow]skipped[/yellow] {skipped}")


async def _kb_ingest(cfg: Any, kb_id: str, directory: pathlib.Path | None) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from agentrunner_host.capabilities.knowledge import KnowledgeService
    from agentrunner_host.capabilities.models import ModelRegistry
    from agentrunner_host.store.db import Database, DatabaseNotMigratedError, ensure_current

    try:
        await asyncio.to_thread(ensure_current, cfg.database.url)
    except DatabaseNotMigratedError as exc:
        err_console.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(3) from None
    db = Database(cfg.database.url)
    models = ModelRegistry(cfg.models)
    try:
        knowledge = KnowledgeService(db.engine, cfg.knowledge_bases, embedder_for=models.embedder)
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[file]}"),
            console=console,
        ) as progress:  # fmt: skip
            task = progress.add_task(f"ingest {kb_id}", total=None, file="")

            def step(done: int, total: int, path: str) -> None:
                progress.update(task, completed=done, total=total, file=path)

            return await knowledge.ingest(kb_id, directory, progress=step)
    finally:
        await models.aclose()
        await db.dispose()


def _request(
    text: str, agent: str, event_id: str, conversation: str, bot: str, stream: bool
) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest(agent_id=agent)
    ev = req.event
    ev.event_id = event_id
    ev.event_type = "message.received"
    ev.source = "cli"
    ev.bot_id = bot
    ev.conversation.conversation_id = conversation
    ev.actor.actor_type = "user"
    ev.actor.actor_id = "cli"
    ev.input.text = text
    ev.delivery.surface = "cli"
    ev.delivery.supports_streaming = stream
    ev.delivery.interactions.CopyFrom(full_interaction_support())
    return req


LOG_LEVELS = {0: "info", 1: "debug", 2: "info", 3: "warning", 4: "error"}


def full_interaction_support() -> Any:
    """What this CLI renders: every field type and action style (it prints them and `interact` answers)."""
    caps = common_pb2.InteractionCapabilities(supports_updates=False)
    caps.field_types.extend(v for v in common_pb2.InteractionFieldType.values() if v)
    caps.action_styles.extend(v for v in common_pb2.InteractionActionStyle.values() if v)
    return caps


def log_line(entry: Any) -> str:
    """A `run.log` result as a CLI line, distinct from message text."""
    return f"[{LOG_LEVELS.get(entry.level, 'info')}] {entry.text}"


def interaction_lines(item: Any) -> list[str]:
    req = item.request
    expires = (
        req.expires_at.ToDatetime().isoformat(timespec="seconds") + "Z" if req.HasField("expires_at") else "-"
    )
    lines = [f"? interaction {req.interaction_id} (expires {expires})", f"  {req.title}"]
    if req.description:
        lines.append(f"  {req.description}")
    for f in req.fields:
        kind = common_pb2.InteractionFieldType.Name(f.type).removeprefix("INTERACTION_FIELD_TYPE_").lower()
        options = f" options: {', '.join(o.value for o in f.options)}" if f.options else ""
        lines.append(f"  - {f.id} ({kind}{', required' if f.required else ''}): {f.label}{options}")
    if req.actions:
        lines.append("  actions: " + ", ".join(f"{a.id} ({a.label})" for a in req.actions))
    lines.append(
        f"  answer: agentrunner-host interact {req.interaction_id} --action <id> --value <field>=<value>"
    )
    return lines


#: how the CLI shows each message kind: the answer plain, reasoning dimmed, progress dimmed in italics
KIND_STYLES = {"answer": "", "reasoning": "dim", "progress": "dim italic"}


class MessageView:
    """The messages of a run as the terminal shows them: one block per (kind, message id), in the
    order they started; answers plain, reasoning and progress dimmed (`KIND_STYLES`)."""

    def __init__(self) -> None:
        self.blocks: dict[tuple[str, str], list[str]] = {}

    def has_answer(self, message_id: str | None = None) -> bool:
        return any(
            kind == "answer" and (message_id is None or mid == message_id) and "".join(parts)
            for (kind, mid), parts in self.blocks.items()
        )

    def delta(self, delta: Any) -> None:
        self.blocks.setdefault((kind_name(delta.kind), delta.message_id), []).append(delta.text)

    def completed(self, message: Any, *, terminal: bool = False) -> None:
        """A complete message: shown unless its deltas already showed it (an answer without a message id,
        or the message of `run.completed`, only when no answer was shown yet)."""
        kind = kind_name(message.kind)
        if not message.content:
            return
        if kind == "answer" and (terminal or not message.message_id):
            if self.has_answer():
                return
        elif "".join(self.blocks.get((kind, message.message_id), [])):
            return
        self.blocks[(kind, message.message_id)] = [message.content]

    def render(self, out: Text) -> None:
        for (kind, _), parts in self.blocks.items():
            body = "".join(parts)
            if not body:
                continue
            if out.plain and not out.plain.endswith("\n"):
                out.append("\n")  # each message on lines of its own
            out.append(body, style=KIND_STYLES[kind] or None)


async def render_stream(
    updates: Any, console: Console, collect: list[Any] | None = None
) -> host_service_pb2.RunFinished:
    """Renders a run stream (`Run`, `SubmitInteraction`): message text and replies (updated in place;
    reasoning and progress dimmed apart from the answer), `run.log` lines as `[level] text`,
    interactions as a block. Returns the final status."""
    messages = MessageView()
    failure = Text()
    replies: dict[str, str] = {}
    finished = host_service_pb2.RunFinished()

    def view() -> Text:
        out = Text()
        messages.render(out)
        out.append_text(failure)
        for content in replies.values():
            if out.plain:
                out.append("\n")
            out.append(content)
        return out

    with Live(view(), console=console, refresh_per_second=20, transient=False) as live:
        async for update in updates:
            kind = update.WhichOneof("update")
            if kind == "result":
                r = update.result
                if collect is not None:
                    collect.append(r)
                payload = r.WhichOneof("payload")
                if payload == "message_delta":
                    messages.delta(r.message_delta)
                elif payload == "message_completed":
                    messages.completed(r.message_completed.message)
                elif payload == "run_completed" and r.run_completed.HasField("message"):
                    messages.completed(r.run_completed.message, terminal=True)
                elif payload == "run_failed":
                    failure.append(f"\n[{r.run_failed.code}] {r.run_failed.message}", style="red")
                elif payload == "run_log":
                    live.console.print(log_line(r.run_log), style="dim", markup=False, highlight=False)
            elif kind == "reply":
                reply = update.reply
                if reply.mode == common_pb2.REPLY_MODE_ABORT:
                    replies.pop(reply.reply_id, None)
                    live.console.print("(reply withdrawn)", style="dim")
                else:
                    replies[reply.reply_id] = reply.message.content
            elif kind == "interaction":
                for line in interaction_lines(update.interaction):
                    live.console.print(line, markup=False, highlight=False)
            elif kind == "finished":
                finished = update.finished
            live.update(view())
    if not console.is_terminal and view().plain:
        console.print()  # a Live display leaves no line break when output is piped
    return finished


async def stream_reply(
    address: str | grpc.aio.Channel,
    request: host_service_pb2.HostServiceRunRequest,
    console: Console,
    deadline_seconds: float = 330,
    collect: list[Any] | None = None,
) -> host_service_pb2.RunFinished:
    """Sends one event and renders the reply as it arrives. Returns the final status (and appends
    every result to `collect` when given). `address` may be a channel (`host_channel`)."""
    async with grpc.aio.insecure_channel(address) if isinstance(address, str) else address as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return await render_stream(stub.Run(request, timeout=deadline_seconds), console, collect)


def _print_finished(finished: host_service_pb2.RunFinished) -> None:
    status = common_pb2.RunStatus.Name(finished.status).removeprefix("RUN_STATUS_").lower()
    err_console.print(
        f"[dim]run {finished.run_id or '-'}: {status}{' (' + finished.reason + ')' if finished.reason else ''}[/dim]"
    )
    if finished.status != common_pb2.RUN_STATUS_COMPLETED:
        raise typer.Exit(1)


def _parse_value(raw: str) -> tuple[str, Any]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        err_console.print(f"[red]error[/red] --value {raw!r}: expected key=value")
        raise typer.Exit(2)
    try:
        return key, json.loads(value)  # numbers, booleans, lists
    except json.JSONDecodeError:
        return key, value


@app.command()
def interact(
    interaction_id: Annotated[str, typer.Argument(help="Interaction id (printed by `run`).")],
    action: Annotated[str, typer.Option("--action", "-a", help="Action id to submit.")] = "",
    value: Annotated[
        list[str] | None, typer.Option("--value", "-v", help="Field value key=value (JSON values parsed).")
    ] = None,
    host: HostOpt = "127.0.0.1:50051",
    event_id: Annotated[str, typer.Option(help="Event id of the answer; resubmitting it attaches.")] = "",
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
) -> None:
    """Answer a structured interaction and stream the run it starts."""
    req = host_service_pb2.SubmitInteractionRequest(
        interaction_id=interaction_id, action_id=action, event_id=event_id
    )
    values = dict(_parse_value(v) for v in value or [])
    if values:
        req.values.update(values)
    req.actor.actor_type = "user"
    req.actor.actor_id = "cli"
    req.delivery.surface = "cli"
    req.delivery.supports_streaming = True
    req.delivery.interactions.CopyFrom(full_interaction_support())

    async def go() -> host_service_pb2.RunFinished:
        async with host_channel(host, ca_file, cert_file, key_file, tls) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            return await render_stream(stub.SubmitInteraction(req, timeout=330), console)

    try:
        finished = asyncio.run(go())
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    _print_finished(finished)


@app.command()
def run(
    text: Annotated[str, typer.Argument(help="The message to send.")],
    host: HostOpt = "127.0.0.1:50051",
    agent: Annotated[str, typer.Option(help="Explicit agent id (skips binding resolution).")] = "",
    event_id: Annotated[str, typer.Option(help="Event id (dedup key); generated when empty.")] = "",
    conversation: Annotated[str, typer.Option(help="Conversation id.")] = "cli",
    bot: Annotated[str, typer.Option(help="Bot id.")] = "cli",
    stream: Annotated[bool, typer.Option(help="Ask for message.delta streaming.")] = True,
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
) -> None:
    """Send one message and stream the reply to the terminal."""
    request = _request(text, agent, event_id, conversation, bot, stream)

    async def go() -> host_service_pb2.RunFinished:
        return await stream_reply(host_channel(host, ca_file, cert_file, key_file, tls), request, console)

    try:
        finished = asyncio.run(go())
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    _print_finished(finished)


@app.command()
def runners(
    host: HostOpt = "127.0.0.1:50051",
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
) -> None:
    """List the runners the host's registry serves."""

    async def go() -> host_service_pb2.HostServiceListRunnersResponse:
        async with host_channel(host, ca_file, cert_file, key_file, tls) as channel:
            return await host_service_pb2_grpc.HostServiceStub(channel).ListRunners(
                host_service_pb2.HostServiceListRunnersRequest(), timeout=10
            )

    try:
        listed = asyncio.run(go())
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    table = Table("runner id", "endpoint", "address", "available", "protocol")
    table.columns[0].overflow = "fold"  # ids are wrapped, never cropped, whatever the width
    for r in listed.runners:
        table.add_row(
            r.manifest.id,
            r.endpoint_id,
            r.address,
            "yes" if r.available else "no",
            r.manifest.protocol_version,
        )
    console.print(table)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    host: HostOpt = "127.0.0.1:50051",
    results: Annotated[bool, typer.Option(help="Print the stored results.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
) -> None:
    """Show a run record: status, timestamps, usage (runner-reported and per-model host usage) and its
    stored results in sequence order."""

    async def go() -> tuple[host_service_pb2.Run, list[Any]]:
        async with host_channel(host, ca_file, cert_file, key_file, tls) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            record = (await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)).run
            items: list[Any] = []
            if results:
                async for u in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=30):
                    if u.HasField("result"):
                        items.append(u.result)
            return record, items

    try:
        record, items = asyncio.run(go())
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    data = json_format.MessageToDict(record, preserving_proto_field_name=True)
    data["status"] = common_pb2.RunStatus.Name(record.status).removeprefix("RUN_STATUS_").lower()
    if as_json:
        data["results"] = [json_format.MessageToDict(r, preserving_proto_field_name=True) for r in items]
        console.print_json(json.dumps(data))
        return
    info = Table(show_header=False, box=None)
    for key in ("run_id", "status", "status_reason", "agent_id", "runner_id", "binding_id", "event_id",
                "conversation_id", "trace_id", "create_time", "start_time", "finish_time", "last_sequence"):  # fmt: skip
        if key in data:
            info.add_row(f"[bold]{key}[/bold]", str(data[key]))
    usage = data.get("usage")
    if usage:
        info.add_row("[bold]usage[/bold]", json.dumps(usage))
    meta = data.get("metadata") or {}
    for model_id, entry in (meta.get("model_usage") or {}).items():
        info.add_row(f"[bold]model {model_id}[/bold]", json.dumps(entry))
    console.print(info)
    if items:
        table = Table("seq", "type", "detail")
        for r in items:
            kind = r.WhichOneof("payload") or "?"
            detail = (
                json.dumps(json_format.MessageToDict(getattr(r, kind)), ensure_ascii=False)
                if kind != "?"
                else ""
            )
            if r.HasField("usage"):
                detail += f"  usage={json.dumps(json_format.MessageToDict(r.usage))}"
            if kind == "run_log":
                detail = log_line(r.run_log)
            table.add_row(str(r.sequence), kind, Text(detail[:200]))
        console.print(table)


@app.command("migrate-pipeline")
def migrate_pipeline_cmd(
    file: Annotated[pathlib.Path, typer.Argument(help="Pipeline config (JSON or YAML).")],
    output: Annotated[pathlib.Path | None, typer.Option(help="Write here instead of rewriting FILE.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Report without writing.")] = False,
    agent_id: Annotated[str, typer.Option(help="Also print a host agent entry with this id.")] = "",
) -> None:
    """Rewrite a legacy pipeline config to `ai.runner.id` + `ai.runner_config[id]` and report the changes."""
    from agentrunner_host.legacy import MigrationError, migrate_pipeline, pipeline_to_agent

    text = file.read_text(encoding="utf-8")
    is_json = file.suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        err_console.print(f"[red]error[/red] {file}: cannot parse: {exc}")
        raise typer.Exit(2) from None
    try:
        migration = migrate_pipeline(data if isinstance(data, dict) else {})
    except MigrationError as exc:
        err_console.print(f"[red]error[/red] {file}: {exc}")
        raise typer.Exit(2) from None
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
        target.write_text(body, encoding="utf-8")
        typer.echo(f"wrote {target}")
    if agent_id:
        console.print_json(json.dumps({"agents": [pipeline_to_agent(migration.config, agent_id)]}))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
