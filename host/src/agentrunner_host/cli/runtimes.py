"""`agentrunner-host runtimes list / show / drain`: the runtimes that dial in, from the host's records
(HostService `ListRuntimes`, `GetRuntime`, `DrainRuntime`)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentrunner.v1 import host_service_pb2, runtime_pb2
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
    print_json,
)
from agentrunner_host.runtimes.views import LOGIN_WORDS, STATUS_WORDS, runtime_dict
from agentrunner_host.views.jsonview import message_dict

if TYPE_CHECKING:
    from rich.text import Text


def capabilities_text(runtime: runtime_pb2.Runtime) -> str:
    """`claude 2.1.328 (logged in), codex absent`."""
    parts = []
    for c in runtime.capabilities:
        if not c.present:
            parts.append(f"{c.name} absent")
        else:
            parts.append(f"{c.name} {c.version or '?'} ({LOGIN_WORDS.get(c.login_status, 'not checked')})")
    return ", ".join(parts) or "-"


def _ago(ts: Any) -> str:
    if not (ts.seconds or ts.nanos):
        return "-"
    seconds = (dt.datetime.now(dt.UTC) - ts.ToDatetime(dt.UTC)).total_seconds()
    return f"{seconds:.0f} s ago" if seconds < 120 else ts.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _status(runtime: runtime_pb2.Runtime) -> Text:
    from rich.text import Text

    word = STATUS_WORDS.get(runtime.status, "unknown")
    style = {"online": "green", "draining": "yellow", "offline": "red"}.get(word, "")
    return Text(word + (" (drained)" if runtime.drained and word != "draining" else ""), style=style)


def _print_list(runtimes: list[runtime_pb2.Runtime]) -> None:
    from rich.table import Table

    table = Table("runtime", "status", "slots", "labels", "runners", "CLIs", "heartbeat")
    table.columns[4].overflow = "fold"
    for r in runtimes:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(r.labels.items())) or "-"
        table.add_row(
            r.runtime_id,
            _status(r),
            f"{r.slots_in_use}/{r.slots}",
            labels,
            "\n".join(r.runner_ids),
            capabilities_text(r),
            _ago(r.heartbeat_time),
        )
    console().print(table)


def _print_detail(got: host_service_pb2.GetRuntimeResponse) -> None:
    from rich.table import Table

    r = got.runtime
    info = Table(show_header=False, box=None)
    rows: list[tuple[str, str | Text]] = [
        ("runtime_id", r.runtime_id),
        ("status", _status(r)),
        ("reason", r.status_reason),
        ("client", r.client_id),
        ("machine", f"{r.machine.hostname} ({r.machine.os} {r.machine.arch} {r.machine.os_release})".strip()),
        ("sdk", f"{r.sdk.language} {r.sdk.version}"),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(r.labels.items()))),
        ("slots", f"{r.slots_in_use} in use of {r.slots}"),
        ("runners", ", ".join(r.runner_ids)),
        ("host instance", r.host_instance_id),
        ("peer", r.peer),
        ("connected", _ago(r.connect_time)),
        ("heartbeat", _ago(r.heartbeat_time)),
    ]
    for key, value in rows:
        if value:
            info.add_row(f"[bold]{key}[/bold]", value)
    for c in r.capabilities:
        text = (
            "not on PATH"
            if not c.present
            else (
                f"{c.version or '?'} at {c.path}: {LOGIN_WORDS.get(c.login_status, 'not checked')}"
                + (f" ({c.login_detail})" if c.login_detail else "")
            )
        )
        info.add_row(f"[bold]{c.name}[/bold]", text)
    console().print(info)
    if got.runs:
        runs = Table("run", "status", "agent", "created")
        for run in got.runs:
            from agentrunner_host.views.jsonview import status_name

            created = run.create_time.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
            runs.add_row(run.run_id, status_name(run.status), run.agent_id, created)
        console().print(runs)
    if got.events:
        events = Table("when", "event", "run", "reason")
        events.columns[3].overflow = "fold"
        for e in got.events:
            when = e.time.ToDatetime(dt.UTC).strftime("%H:%M:%S.%f")[:-3]
            took = f" ({e.duration.ToTimedelta().total_seconds():.3f} s)" if e.HasField("duration") else ""
            events.add_row(when, e.kind, e.run_id, e.reason + took)
        console().print(events)


def register(runtimes_app: typer.Typer) -> None:
    @runtimes_app.command("list")
    def runtimes_list(
        all_: Annotated[bool, typer.Option("--all", "-a", help="Include offline runtimes.")] = False,
        host: HostOpt = DEFAULT_HOST,
        as_json: JsonOpt = False,
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
    ) -> None:
        """List the runtimes connected to the host (all with --all): status, slots in use, labels, runners,
        detected CLIs and last heartbeat."""
        target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
        request = host_service_pb2.ListRuntimesRequest(include_offline=all_)
        listed = call_host(target, lambda s: s.ListRuntimes(request, timeout=READ_TIMEOUT))
        if as_json:
            print_json({"runtimes": [runtime_dict(r) for r in listed.runtimes]})
        else:
            _print_list(list(listed.runtimes))

    @runtimes_app.command("show")
    def runtimes_show(
        runtime_id: Annotated[str, typer.Argument(help="Runtime id.")],
        host: HostOpt = DEFAULT_HOST,
        as_json: JsonOpt = False,
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
    ) -> None:
        """Show a runtime: what it announced and detected, its recent runs and its audit trail."""
        target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
        request = host_service_pb2.GetRuntimeRequest(runtime_id=runtime_id)
        got = call_host(target, lambda s: s.GetRuntime(request, timeout=READ_TIMEOUT))
        if as_json:
            data = message_dict(got)
            data["runtime"] = runtime_dict(got.runtime)
            print_json(data)
        else:
            _print_detail(got)

    @runtimes_app.command("drain")
    def runtimes_drain(
        runtime_id: Annotated[str, typer.Argument(help="Runtime id.")],
        resume: Annotated[bool, typer.Option("--resume", help="Resume a drained runtime instead.")] = False,
        reason: Annotated[str, typer.Option(help="Why (kept in the audit trail).")] = "",
        host: HostOpt = DEFAULT_HOST,
        as_json: JsonOpt = False,
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
    ) -> None:
        """Drain a runtime: the host places no new runs on it, its open runs finish. The drain is kept
        until `--resume`, also when the runtime reconnects."""
        target = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)
        request = host_service_pb2.DrainRuntimeRequest(runtime_id=runtime_id, resume=resume, reason=reason)
        runtime = call_host(target, lambda s: s.DrainRuntime(request, timeout=READ_TIMEOUT)).runtime
        if as_json:
            print_json(runtime_dict(runtime))
            return
        word = "resumed" if resume else "drained"
        console().print(
            f"runtime {runtime_id} {word} (status {STATUS_WORDS.get(runtime.status, 'unknown')}, "
            f"{runtime.slots_in_use} runs open)",
            highlight=False,
        )
