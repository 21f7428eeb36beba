"""Client commands: `run`, `interact`, `runners` and `runs list / show / cancel` (HostService calls)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import grpc
import typer

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.cli.common import (
    DEFAULT_HOST,
    READ_TIMEOUT,
    ApiKeyFileOpt,
    CaOpt,
    CertOpt,
    HostOpt,
    HostTarget,
    JsonOpt,
    KeyOpt,
    TlsOpt,
    call_host,
    console,
    err_console,
    fail,
    fail_rpc,
    print_json,
    run_until_interrupted,
)
from agentrunner_host.cli.render import render_stream, run_request
from agentrunner_host.views.interactions import full_interaction_support
from agentrunner_host.views.jsonview import message_dict, status_name


def print_finished(finished: host_service_pb2.RunFinished) -> None:
    status = status_name(finished.status)
    reason = f" ({finished.reason})" if finished.reason else ""
    err_console().print(f"[dim]run {finished.run_id or '-'}: {status}{reason}[/dim]", highlight=False)
    if finished.status != common_pb2.RUN_STATUS_COMPLETED:
        raise typer.Exit(1)


def _announce(accepted: host_service_pb2.RunAccepted) -> None:
    if accepted.run_id:
        via = f" via binding {accepted.binding_id}" if accepted.binding_id else ""
        err_console().print(
            f"[dim]started {accepted.run_id} (agent {accepted.agent_id}{via}, runner {accepted.runner_id})[/dim]",
            highlight=False,
            soft_wrap=True,
        )


def _stream(target: HostTarget, start: Any) -> host_service_pb2.RunFinished:
    """Streams a run (`start(stub)` opens the call) and prints its id as soon as it is accepted. On
    Ctrl-C the run is cancelled on the host (it would be anyway: the stream closes) and the id is printed
    again, so it can be looked up."""
    run_id = ""

    def accepted(item: host_service_pb2.RunAccepted) -> None:
        nonlocal run_id
        run_id = item.run_id
        _announce(item)

    async def go() -> host_service_pb2.RunFinished:
        async with target.channel() as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            try:
                return await render_stream(start(stub), console(), on_accepted=accepted)
            except asyncio.CancelledError:
                if run_id:
                    await _cancel_quietly(stub, run_id, "cancelled from the CLI (Ctrl-C)")
                raise

    try:
        return run_until_interrupted(go)
    except grpc.RpcError as exc:
        fail_rpc(exc, target)
    except KeyboardInterrupt:
        if run_id:
            err_console().print(
                f"interrupted: run {run_id} cancelled; see it with `agentrunner-host runs show {run_id}`",
                highlight=False,
            )
        else:
            err_console().print("interrupted before the host accepted the event", highlight=False)
        raise typer.Exit(130) from None


async def _cancel_quietly(stub: host_service_pb2_grpc.HostServiceAsyncStub, run_id: str, reason: str) -> None:
    """Cancels the run on the interrupted command's own channel and loop: a second event loop in the
    same process would meet grpc.aio's poller still bound to the first, closed one (a traceback)."""
    try:
        await stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason=reason), timeout=3)
    except (grpc.RpcError, asyncio.CancelledError):
        pass  # ended meanwhile, the host is gone, or Ctrl-C again: closing the stream cancels it anyway


def _parse_value(raw: str) -> tuple[str, Any]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        fail(f"--value {raw!r}: expected key=value", 2)
    try:
        return key, json.loads(value)  # numbers, booleans, lists
    except json.JSONDecodeError:
        return key, value


def register(app: typer.Typer) -> None:
    """Adds the client commands to the CLI."""

    @app.command()
    def run(
        text: Annotated[str, typer.Argument(help="The message to send.")],
        host: HostOpt = DEFAULT_HOST,
        agent: Annotated[str, typer.Option(help="Explicit agent id (skips binding resolution).")] = "",
        event_id: Annotated[str, typer.Option(help="Event id (dedup key); generated when empty.")] = "",
        conversation: Annotated[str, typer.Option(help="Conversation id.")] = "cli",
        bot: Annotated[str, typer.Option(help="Bot id.")] = "cli",
        stream: Annotated[bool, typer.Option(help="Ask for message.delta streaming.")] = True,
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
    ) -> None:
        """Send one message and stream the reply to the terminal (the run id is printed at once)."""
        request = run_request(text, agent, event_id, conversation, bot, stream)
        target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
        print_finished(_stream(target, lambda stub: stub.Run(request, timeout=330)))

    @app.command()
    def interact(
        interaction_id: Annotated[str, typer.Argument(help="Interaction id (printed by `run`).")],
        action: Annotated[str, typer.Option("--action", "-a", help="Action id to submit.")] = "",
        value: Annotated[
            list[str] | None,
            typer.Option("--value", "-v", help="Field value key=value (JSON values parsed)."),
        ] = None,
        host: HostOpt = DEFAULT_HOST,
        event_id: Annotated[str, typer.Option(help="Event id of the answer; resubmitting it attaches.")] = "",
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
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
        target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
        print_finished(_stream(target, lambda stub: stub.SubmitInteraction(req, timeout=330)))

    @app.command()
    def runners(
        host: HostOpt = DEFAULT_HOST,
        as_json: JsonOpt = False,
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
    ) -> None:
        """List the runner endpoints of the host's registry and the runners they serve; endpoints that
        are down are listed with their last error (exit 1 when any is down)."""
        target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
        listed = call_host(target, lambda stub: stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(),
                                                             timeout=READ_TIMEOUT))  # fmt: skip
        if as_json:
            print_json(message_dict(listed))
        else:
            _print_runners(listed)
        if any(not e.available for e in listed.endpoints):
            raise typer.Exit(1)


def _print_runners(listed: host_service_pb2.HostServiceListRunnersResponse) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table("runner id", "endpoint", "address", "available", "protocol")
    table.columns[0].overflow = "fold"  # ids are wrapped, never cropped, whatever the width
    served = set()
    for r in listed.runners:
        served.add(r.endpoint_id)
        table.add_row(r.manifest.id, r.endpoint_id, r.address, "yes" if r.available else "no",
                      r.manifest.protocol_version)  # fmt: skip
    for e in listed.endpoints:
        if not e.available:
            table.add_row(Text("-", style="dim"), e.endpoint_id, e.address, Text("no", style="red"), "")
        elif e.endpoint_id not in served:
            table.add_row(Text("(serves no runner)", style="yellow"), e.endpoint_id, e.address, "yes", "")
    console().print(table)
    for e in listed.endpoints:
        if not e.available:
            console().print(f"[red]down[/red] {e.endpoint_id}: {e.last_error or 'not probed yet'}",
                          highlight=False, soft_wrap=True)  # fmt: skip
