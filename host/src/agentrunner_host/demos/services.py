"""`make demo-services`: one turn through each external-service runner, against local mocks.

The official service runners (Dify, n8n, Langflow, Coze, DashScope, Tbox) front SaaS APIs this demo
cannot reach, so it starts the bundled mock services (`agentrunner_runners.testing.mock_services`, a
process of its own, speaking each service's public wire format with writes split at awkward byte
boundaries) and says so. Each runner runs as its own process (SDK CLI), the host runs on a fresh SQLite
database in a temporary directory, and each turn goes through `HostService.Run` and streams to the
terminal; the external conversation id the runner keeps in host state is shown. Exits 0 when every
turn completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import json_format
from rich.console import Console

from agentrunner.results import is_answer, kind_name
from agentrunner.v1 import common_pb2, host_service_pb2_grpc
from agentrunner_host.cli import run_request
from agentrunner_host.config.model import load_config
from agentrunner_host.observability.telemetry import configure_logging
from agentrunner_host.server.app import HostApp

#: name, label, serve target, runner id, runner config (given the mock's base URL), the user's message
SERVICES: list[tuple[str, str, str, str, Any, str]] = [
    (
        "dify",
        "Dify",
        "agentrunner_runners.dify:DifyRunner",
        "plugin:langbot/dify-agent/default",
        lambda base: {"base-url": f"{base}/dify/v1", "api-key": "app-demo-key"},
        "Hello Dify! Ünïcödé and emoji 🚀 survive the split writes.",
    ),
    (
        "n8n",
        "n8n",
        "agentrunner_runners.n8n:N8nRunner",
        "plugin:langbot/n8n-agent/default",
        lambda base: {"webhook-url": f"{base}/n8n/webhook/demo"},
        "Hello n8n, run my workflow.",
    ),
    (
        "langflow",
        "Langflow",
        "agentrunner_runners.langflow:LangflowRunner",
        "plugin:langbot/langflow-agent/default",
        lambda base: {"base-url": f"{base}/langflow", "flow-id": "demo-flow", "api-key": "lf-demo-key"},
        "Hello Langflow, what does this flow do?",
    ),
    (
        "coze",
        "Coze",
        "agentrunner_runners.coze:CozeRunner",
        "plugin:langbot/coze-agent/default",
        lambda base: {"api-base": f"{base}/coze", "api-key": "pat-demo-key", "bot-id": "7350000000000001"},
        "mock:reasoning 你好 Coze, think before you answer.",
    ),
    (
        "dashscope",
        "DashScope",
        "agentrunner_runners.dashscope:DashScopeRunner",
        "plugin:langbot/dashscope-agent/default",
        lambda base: {"base-url": f"{base}/dashscope/api/v1", "api-key": "sk-demo-key", "app-id": "demoapp"},
        "mock:refs What is the return policy?",
    ),
    (
        "tbox",
        "Tbox",
        "agentrunner_runners.tbox:TboxRunner",
        "plugin:langbot/tbox-agent/default",
        lambda base: {"base-url": f"{base}/tbox", "api-key": "tbox-demo-key", "app-id": "demo-app"},
        "mock:image 百宝箱, draw me a cat.",
    ),
]
MOCK_READY = "MOCK_SERVICES_LISTENING"


#: how long the mock and the runners may take to start (seven Python processes start at once)
START_TIMEOUT = 120.0


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )


async def ready(proc: asyncio.subprocess.Process, marker: str, what: str) -> str:
    """The address or port a process printed after `marker`; fails when it exits or takes too long."""
    assert proc.stdout is not None
    async with asyncio.timeout(START_TIMEOUT):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError(f"{what} exited before it was ready")
            if line.startswith(marker + " "):
                return line.split()[1]


async def stop(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    for proc in procs:
        await proc.wait()


def config_file(workdir: Path, base: str, addresses: dict[str, str]) -> Path:
    agents, bindings = [], []
    for name, _, _, runner_id, config, _ in SERVICES:
        agents.append(
            {"id": name, "runner_id": runner_id, "runner_config": config(base), "timeout_seconds": 30}
        )
        bindings.append(
            {"id": name, "scope": {"type": "conversation", "id": f"demo-{name}"}, "event": "message.*",
             "target": {"agent": name}}
        )  # fmt: skip
    path = workdir / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "database": {
                    "url": f"sqlite+aiosqlite:///{workdir / 'agentrunner.db'}",
                    "artifact_dir": str(workdir / "artifacts"),
                },
                "runners": [{"id": name, "address": addresses[name]} for name, *_ in SERVICES],
                "agents": agents,
                "bindings": bindings,
            }
        )
    )
    return path


async def one_turn(console: Console, address: str, name: str, label: str, text: str) -> bool:
    console.print(f"[cyan]you[/cyan] > {text}")
    console.print("[green]bot[/green] > ", end="")
    request = run_request(text, "", "", f"demo-{name}", "demo-bot", True)
    streamed, final, ids, status, reason = "", "", [], 0, ""
    side: dict[str, str] = {}
    images: list[str] = []
    async with grpc.aio.insecure_channel(address) as channel:
        async for update in host_service_pb2_grpc.HostServiceStub(channel).Run(request, timeout=60):
            if update.HasField("finished"):
                status, reason = update.finished.status, update.finished.reason
            if not update.HasField("result"):
                continue
            r = update.result
            kind = r.WhichOneof("payload")
            if kind == "message_delta" and r.message_delta.text and is_answer(r.message_delta):
                streamed += r.message_delta.text
                console.print(r.message_delta.text, end="", markup=False, highlight=False)
            elif kind == "message_delta" and r.message_delta.text:  # reasoning / progress, shown apart
                name = kind_name(r.message_delta.kind)
                side[name] = side.get(name, "") + r.message_delta.text
            elif kind in ("message_completed", "run_completed") and is_answer(getattr(r, kind).message):
                final = getattr(r, kind).message.content or final
                images = [c.image.uri for c in getattr(r, kind).message.contents if c.HasField("image")]
            elif kind == "state_updated":
                value = json_format.MessageToDict(r.state_updated.value)
                ids.append(f"{r.state_updated.key}={value}")
            elif kind == "run_failed":
                console.print(f"\n[red]   [{r.run_failed.code}] {r.run_failed.message}[/red]", end="")
    if final and not streamed:
        console.print(final, markup=False, highlight=False, end="")
    console.print()
    for uri in images:
        console.print(f"[dim]   (image in the answer: {uri})[/dim]", highlight=False)
    for name, text in side.items():
        console.print(f"[dim]   ({name}, not the answer: {' '.join(text.split())})[/dim]", highlight=False)
    state = (
        common_pb2.RunStatus.Name(common_pb2.RunStatus.ValueType(status)).removeprefix("RUN_STATUS_").lower()
    )
    kept = f"; kept in host state: {', '.join(ids)}" if ids else ""
    console.print(
        f"[dim]   ({state}{', ' + reason if reason else ''}; answered by the {label} mock{kept})[/dim]\n"
    )
    return status == common_pb2.RUN_STATUS_COMPLETED


async def conversation(console: Console, base: str, addresses: dict[str, str]) -> bool:
    """The host on a fresh SQLite database, then one turn per service; True when every turn completed."""
    ok = True
    with tempfile.TemporaryDirectory(prefix="agentrunner-demo-services-") as tmp:
        host = await HostApp.open(load_config(config_file(Path(tmp), base, addresses)), auto_upgrade=True)
        try:
            port = await host.start()
            for name, label, _, runner_id, _, text in SERVICES:
                console.rule(f"{label} ({runner_id})")
                ok = await one_turn(console, f"127.0.0.1:{port}", name, label, text) and ok
        except grpc.RpcError as exc:
            console.print(f"[red]demo failed[/red]: {exc.code().name}")
            ok = False
        finally:
            await host.stop(1.0)
    return ok


async def main() -> int:
    configure_logging("WARNING")
    console = Console()
    console.print(
        "[yellow]The service runners front SaaS APIs this demo does not call: every turn goes to the bundled "
        "mock services (agentrunner_runners.testing.mock_services), which speak each service's public wire "
        "format. Point a runner's base URL / webhook URL at the real service to use it.[/yellow]\n"
    )
    mock = await spawn("-m", "agentrunner_runners.testing.mock_services", "--port", "0")
    procs = [mock]
    try:
        for _, _, target, *_ in SERVICES:
            procs.append(
                await spawn("-m", "agentrunner", "serve", target, "--host", "127.0.0.1", "--port", "0")
            )
        try:
            port, *runner_addresses = await asyncio.gather(
                ready(mock, MOCK_READY, "the mock services"),
                *(
                    ready(p, "AGENTRUNNER_LISTENING", t)
                    for p, (_, _, t, *_) in zip(procs[1:], SERVICES, strict=True)
                ),
            )
        except (TimeoutError, RuntimeError) as exc:
            console.print(f"[red]services demo failed: {exc or 'a process did not start in time'}[/red]")
            return 1
        addresses = {name: address for (name, *_), address in zip(SERVICES, runner_addresses, strict=True)}
        ok = await conversation(console, f"http://127.0.0.1:{port}", addresses)
    finally:
        await stop(procs)
    console.print(
        "[bold green]services demo finished[/bold green]"
        if ok
        else "[bold red]services demo had unexpected results[/bold red]"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
