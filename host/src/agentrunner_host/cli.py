"""`agentrunner-host`: serve, run (streamed reply), runners, runs show, migrate-pipeline."""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
import sys
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
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc

app = typer.Typer(help="The LangBot AgentRunner host.", no_args_is_help=True, add_completion=False)
runs_app = typer.Typer(help="Run records.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
console = Console()
err_console = Console(stderr=True)

HostOpt = Annotated[
    str, typer.Option("--host", "-H", help="Host address (host:port).", envvar="AGENTRUNNER_HOST")
]


def _fail(err: AgentRunnerError) -> None:
    err_console.print(f"[red]error[/red] {err.reason}: {err.message}")
    raise typer.Exit(1)


async def _open_stores(config: Any) -> Any:
    """SQL stores when the fact-store package provides `open_stores`, else in-memory ones."""
    try:
        from agentrunner_host.store import open_stores  # type: ignore[attr-defined]
    except ImportError:
        return None
    return await open_stores(config)


@app.command()
def serve(
    config: Annotated[pathlib.Path, typer.Option("--config", "-c", help="Host config file (YAML).")],
    address: Annotated[str | None, typer.Option(help="Override listen.address.")] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
) -> None:
    """Serve HostService + ProxyService (+ health, reflection) until SIGINT/SIGTERM."""
    from agentrunner_host.config import ConfigError, load_config
    from agentrunner_host.observability import configure_logging

    configure_logging(log_level)
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        err_console.print(f"[red]invalid config[/red]\n{exc}")
        raise typer.Exit(2) from None
    asyncio.run(_serve(cfg, address))


async def _serve(cfg: Any, address: str | None) -> None:
    from prometheus_client import start_http_server

    from agentrunner_host.server import HostApp

    stores = await _open_stores(cfg)
    host = HostApp(cfg, stores)
    port = await host.start(address)
    if cfg.metrics.address:
        mhost, _, mport = cfg.metrics.address.rpartition(":")
        start_http_server(int(mport), addr=mhost or "127.0.0.1")
    bound_host = (address or cfg.listen.address).rsplit(":", 1)[0]
    print(f"AGENTRUNNER_HOST_LISTENING {bound_host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await host.stop(5.0)


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
    return req


async def stream_reply(
    address: str,
    request: host_service_pb2.HostServiceRunRequest,
    console: Console,
    deadline_seconds: float = 330,
) -> host_service_pb2.RunFinished:
    """Sends one event and renders the reply as it arrives. Returns the final status."""
    reply = Text()
    finished = host_service_pb2.RunFinished()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        with Live(reply, console=console, refresh_per_second=20, transient=False) as live:
            async for update in stub.Run(request, timeout=deadline_seconds):
                kind = update.WhichOneof("update")
                if kind == "result":
                    r = update.result
                    payload = r.WhichOneof("payload")
                    if payload == "message_delta":
                        reply.append(r.message_delta.text)
                    elif payload == "message_completed" and not reply.plain:
                        reply.append(r.message_completed.message.content)
                    elif payload == "run_completed" and not reply.plain and r.run_completed.message.content:
                        reply.append(r.run_completed.message.content)
                    elif payload == "run_failed":
                        reply.append(f"\n[{r.run_failed.code}] {r.run_failed.message}", style="red")
                    elif payload in ("tool_call_started", "tool_call_completed"):
                        pass
                    live.update(reply)
                elif kind == "finished":
                    finished = update.finished
    return finished


@app.command()
def run(
    text: Annotated[str, typer.Argument(help="The message to send.")],
    host: HostOpt = "127.0.0.1:50051",
    agent: Annotated[str, typer.Option(help="Explicit agent id (skips binding resolution).")] = "",
    event_id: Annotated[str, typer.Option(help="Event id (dedup key); generated when empty.")] = "",
    conversation: Annotated[str, typer.Option(help="Conversation id.")] = "cli",
    bot: Annotated[str, typer.Option(help="Bot id.")] = "cli",
    stream: Annotated[bool, typer.Option(help="Ask for message.delta streaming.")] = True,
) -> None:
    """Send one message and stream the reply to the terminal."""
    try:
        finished = asyncio.run(
            stream_reply(host, _request(text, agent, event_id, conversation, bot, stream), console)
        )
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    status = common_pb2.RunStatus.Name(finished.status).removeprefix("RUN_STATUS_").lower()
    err_console.print(
        f"[dim]run {finished.run_id or '-'}: {status}{' (' + finished.reason + ')' if finished.reason else ''}[/dim]"
    )
    if finished.status != common_pb2.RUN_STATUS_COMPLETED:
        raise typer.Exit(1)


@app.command()
def runners(host: HostOpt = "127.0.0.1:50051") -> None:
    """List the runners the host's registry serves."""

    async def go() -> host_service_pb2.HostServiceListRunnersResponse:
        async with grpc.aio.insecure_channel(host) as channel:
            return await host_service_pb2_grpc.HostServiceStub(channel).ListRunners(
                host_service_pb2.HostServiceListRunnersRequest(), timeout=10
            )

    try:
        listed = asyncio.run(go())
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    table = Table("runner id", "endpoint", "address", "available", "protocol")
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
    results: Annotated[bool, typer.Option(help="Also print the stored results.")] = False,
) -> None:
    """Show a run record (and optionally its stored results)."""

    async def go() -> tuple[host_service_pb2.Run, list[Any]]:
        async with grpc.aio.insecure_channel(host) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            record = (await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)).run
            items: list[Any] = []
            if results:
                async for u in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=30):
                    if u.HasField("result"):
                        items.append(json_format.MessageToDict(u.result))
            return record, items

    try:
        record, items = asyncio.run(go())
    except grpc.RpcError as exc:
        _fail(from_rpc_error(exc))
    data = json_format.MessageToDict(record)
    data["status"] = common_pb2.RunStatus.Name(record.status)
    console.print_json(json.dumps(data))
    for item in items:
        console.print_json(json.dumps(item))


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
    sys.exit(main())
