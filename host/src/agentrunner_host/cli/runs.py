"""`agentrunner-host runs list / show / cancel`: finding runs, reading them, following live ones."""

from __future__ import annotations

import datetime as dt
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
from agentrunner_host.cli.render import render_stream
from agentrunner_host.views.jsonview import message_dict, status_name, usage_dict
from agentrunner_host.views.timeline import Timeline

STATUSES = {status_name(v): v for v in common_pb2.RunStatus.values() if v}
OPEN = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)


def _when(ts: Any) -> str:
    return ts.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S") if ts.seconds or ts.nanos else "-"


def _duration(run: host_service_pb2.Run) -> str:
    if not run.HasField("finish_time") or not run.HasField("create_time"):
        return "-"
    seconds = (run.finish_time.ToDatetime() - run.create_time.ToDatetime()).total_seconds()
    return f"{seconds:.1f} s"


def usage_text(usage: dict[str, Any]) -> str:
    parts = [f"{k.removesuffix('_tokens')} {v}" for k, v in usage.items() if k != "extra"]
    if "extra" in usage:
        parts.append(json.dumps(usage["extra"]))
    return ", ".join(parts) or "-"


def run_dict(run: host_service_pb2.Run) -> dict[str, Any]:
    """A run record as JSON-ready data: the status as a word, usage numbers as numbers."""
    data = message_dict(run)
    data["status"] = status_name(run.status)
    if run.HasField("usage"):
        data["usage"] = usage_dict(run.usage)
    return data


def _statuses(values: list[str] | None) -> list[common_pb2.RunStatus.ValueType]:
    out: list[common_pb2.RunStatus.ValueType] = []
    for value in values or []:
        for part in value.split(","):
            name = part.strip().lower()
            if name not in STATUSES:
                fail(f"--status {part!r}: expected one of {', '.join(STATUSES)}", 2)
            out.append(STATUSES[name])
    return out


def runs_list(
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", help=f"Only these statuses ({', '.join(STATUSES)})."),
    ] = None,
    agent: Annotated[str, typer.Option(help="Only runs of this agent.")] = "",
    runner: Annotated[str, typer.Option(help="Only runs of this runner id.")] = "",
    conversation: Annotated[str, typer.Option(help="Only runs of this conversation.")] = "",
    binding: Annotated[str, typer.Option(help="Only runs routed by this binding.")] = "",
    limit: Annotated[int, typer.Option(min=1, max=200, help="Runs per page.")] = 20,
    page_token: Annotated[str, typer.Option(help="Continue a listing (printed under a full page).")] = "",
    host: HostOpt = DEFAULT_HOST,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run ids, one a line.")] = False,
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
    api_key_file: ApiKeyFileOpt = None,
) -> None:
    """List runs, newest first, with filters; a full page ends with the token of the next one."""
    from rich.table import Table
    from rich.text import Text

    request = host_service_pb2.ListRunsRequest(
        page_size=limit, page_token=page_token, statuses=_statuses(status), agent_id=agent,
        runner_id=runner, conversation_id=conversation, binding_id=binding,
    )  # fmt: skip
    target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
    page = call_host(target, lambda stub: stub.ListRuns(request, timeout=READ_TIMEOUT))
    if as_json:
        print_json({"runs": [run_dict(r) for r in page.runs], "next_page_token": page.next_page_token})
        return
    if quiet:  # for scripts: RUN_ID=$(agentrunner-host runs list -q --limit 1)
        for r in page.runs:
            print(r.run_id)
        return
    table = Table("run id", "status", "agent", "runner", "conversation", "created (UTC)", "took")
    table.columns[0].overflow = "fold"
    for r in page.runs:
        style = {"completed": "green", "failed": "red", "running": "cyan"}.get(status_name(r.status), "")
        table.add_row(r.run_id, Text(status_name(r.status), style=style), r.agent_id, r.runner_id,
                      r.conversation_id, _when(r.create_time), _duration(r))  # fmt: skip
    console().print(table)
    if not page.runs:
        err_console().print("no runs match", style="dim")
    if page.next_page_token:
        err_console().print(f"more: agentrunner-host runs list --page-token {page.next_page_token}",
                          style="dim", highlight=False, soft_wrap=True)  # fmt: skip


def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    follow: Annotated[
        bool | None, typer.Option("--follow/--no-follow", "-f", help="Follow a live run (default: yes).")
    ] = None,
    results: Annotated[bool, typer.Option(help="Print the run's timeline.")] = True,
    host: HostOpt = DEFAULT_HOST,
    as_json: JsonOpt = False,
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
    api_key_file: ApiKeyFileOpt = None,
) -> None:
    """Show a run: its record (status, times, usage per model) and a timeline of its results, one
    entry per message. A live run is followed until it ends (its text streams as it arrives)."""
    target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
    record = call_host(target, lambda s: s.GetRun(host_service_pb2.GetRunRequest(run_id=run_id),
                                                  timeout=READ_TIMEOUT)).run  # fmt: skip
    live = record.status in OPEN
    if live and follow is None:
        follow = True
    timeline = Timeline()
    if results and (follow or not live):
        if live and not as_json:
            _print_record(record)
            console().rule(f"following {run_id} (Ctrl-C stops following; the run goes on)")
        finished = _attach(target, run_id, timeline, render=live and not as_json)
        record = call_host(target, lambda s: s.GetRun(host_service_pb2.GetRunRequest(run_id=run_id),
                                                      timeout=READ_TIMEOUT)).run  # fmt: skip
        if live and not as_json:
            err_console().print(f"[dim]run {run_id}: {status_name(finished.status)}[/dim]", highlight=False)
            return
    if as_json:
        data = run_dict(record)
        if results and (follow or not live):
            data["timeline"] = timeline.entries
        print_json(data)
        return
    _print_record(record)
    if timeline.entries:
        _print_timeline(timeline.entries)


def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    reason: Annotated[str, typer.Option(help="Why (shown to the runner).")] = "cancelled from the CLI",
    host: HostOpt = DEFAULT_HOST,
    ca_file: CaOpt = None,
    cert_file: CertOpt = None,
    key_file: KeyOpt = None,
    tls: TlsOpt = False,
    api_key_file: ApiKeyFileOpt = None,
) -> None:
    """Cancel a live run: the runner gets a cancel signal, and the call is cancelled after the grace."""
    target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
    request = host_service_pb2.CancelRunRequest(run_id=run_id, reason=reason)
    record = call_host(target, lambda s: s.CancelRun(request, timeout=READ_TIMEOUT)).run
    console().print(
        f"cancel requested for run {run_id} (status {status_name(record.status)})", highlight=False
    )


def register(runs_app: typer.Typer) -> None:
    """Adds `runs list`, `runs show` and `runs cancel` to the CLI (each command is a function of this module)."""
    runs_app.command("list")(runs_list)
    runs_app.command("show")(runs_show)
    runs_app.command("cancel")(runs_cancel)


def _attach(target: HostTarget, run_id: str, timeline: Timeline, *, render: bool) -> Any:
    """Reads the run's stream to its end into `timeline` (rendering it live when `render`)."""

    async def items(stub: Any) -> Any:
        async for update in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id)):
            timeline.add(update)
            yield update

    async def go() -> Any:
        async with target.channel() as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            if render:
                return await render_stream(items(stub), console())
            finished = host_service_pb2.RunFinished()
            async for update in items(stub):
                if update.HasField("finished"):
                    finished = update.finished
            return finished

    try:
        return run_until_interrupted(go)
    except grpc.RpcError as exc:
        fail_rpc(exc, target)
    except KeyboardInterrupt:
        err_console().print(f"stopped following; run {run_id} goes on", highlight=False)
        raise typer.Exit(130) from None


_FIELDS = ("run_id", "status", "status_reason", "agent_id", "runner_id", "runtime_id", "binding_id", "event_id",
           "conversation_id", "trace_id", "create_time", "start_time", "finish_time", "last_sequence")  # fmt: skip


def _print_record(record: host_service_pb2.Run) -> None:
    from rich.table import Table

    data = run_dict(record)
    info = Table(show_header=False, box=None)
    for key in _FIELDS:
        if key in data and data[key] not in ("", None):
            info.add_row(f"[bold]{key}[/bold]", str(data[key]))
    if record.HasField("create_time") and record.HasField("finish_time"):
        info.add_row("[bold]duration[/bold]", _duration(record))
    if "usage" in data:
        info.add_row("[bold]usage[/bold]", usage_text(data["usage"]))
    meta = data.get("metadata") or {}
    for model_id, entry in (meta.get("model_usage") or {}).items():
        numbers = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in entry.items()}
        info.add_row(f"[bold]model {model_id}[/bold]", usage_text(numbers))
    console().print(info)


def _print_timeline(entries: list[dict[str, Any]]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table("seq", "entry", "detail")
    table.columns[2].overflow = "fold"
    for e in entries:
        kind = e["kind"]
        if kind == "message":
            first, last = e["first_sequence"], e["last_sequence"]
            seq = str(first) if first == last else f"{first}-{last}"
            label = "message" + (f" ({e['message_kind']})" if e["message_kind"] != "answer" else "")
            if e["deltas"]:
                label += f", {e['deltas']} deltas"
            detail = e["text"]
        elif kind == "tool_call":
            seq, label = str(e["sequence"]), f"tool {e['tool_name']} ({e['status']})"
            detail = json.dumps(e["parameters"], ensure_ascii=False)
            if e.get("error_code"):
                detail += f" -> {e['error_code']}: {e.get('error_message', '')}"
            elif e.get("result_preview"):
                detail += f" -> {json.dumps(e['result_preview'], ensure_ascii=False)}"
        elif kind == "log":
            seq, label, detail = str(e["sequence"]), "log", f"[{e['level']}] {e['text']}"
        elif kind == "terminal":
            seq, label = str(e["sequence"]), f"run {e['status']}"
            detail = f"{e.get('code', '')} {e.get('message', '')}".strip()
            if e.get("usage"):
                detail = (detail + "  " if detail else "") + "usage " + usage_text(e["usage"])
        elif kind in ("reply", "interaction"):
            seq, label = "", kind
            detail = e.get("text") or e.get("title") or ""
            if kind == "interaction":
                detail = f"{e['interaction_id']}: {detail}"
        else:
            seq, label = str(e.get("sequence", "")), kind
            detail = json.dumps(e.get("detail", {}), ensure_ascii=False)
        table.add_row(seq, label, Text(detail[:500]))
    console().print(table)
