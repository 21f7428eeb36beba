"""`make demo`: the host plus the reference runner (its own process), a short scripted conversation.

Works on a fresh machine with no config: the runner is started with the SDK CLI on a free port, the host
gets a temporary config (SQLite under a temporary directory) and listens on a free port, and each line of
the script is sent through `HostService.Run` and streamed to the terminal as it arrives. Exits 0 when
every turn ended as expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path

import grpc
import yaml
from rich.console import Console

from agentrunner.v1 import common_pb2
from agentrunner_host.cli import _request, stream_reply
from agentrunner_host.config import load_config
from agentrunner_host.observability import configure_logging
from agentrunner_host.server import HostApp

REFERENCE = "agentrunner_runners.reference:ReferenceRunner"
REFERENCE_ID = "plugin:langbot/reference/default"
#: (message, expected final status)
SCRIPT: list[tuple[str, int]] = [
    ("Hello, host!", common_pb2.RUN_STATUS_COMPLETED),
    ("What can you do?", common_pb2.RUN_STATUS_COMPLETED),
    ("slow:3", common_pb2.RUN_STATUS_COMPLETED),
    ("fail:controlled", common_pb2.RUN_STATUS_FAILED),
    ("Still there?", common_pb2.RUN_STATUS_COMPLETED),
]


async def start_reference_runner() -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentrunner",
        "serve",
        REFERENCE,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        if not line:
            raise RuntimeError("the reference runner exited before listening")
        if line.startswith("AGENTRUNNER_LISTENING "):
            return proc, line.split()[1]


def demo_config(runner_address: str, workdir: Path) -> Path:
    path = workdir / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "database": {"url": f"sqlite+aiosqlite:///{workdir / 'agentrunner.db'}"},
                "runners": [{"id": "reference", "address": runner_address}],
                "agents": [
                    {
                        "id": "demo",
                        "runner_id": REFERENCE_ID,
                        "runner_config": {"prefix": "echo: "},
                        "event_types": ["message.*"],
                        "timeout_seconds": 30,
                    }
                ],
                "bindings": [{"id": "everything", "event": "message.*", "target": {"agent": "demo"}}],
            }
        )
    )
    return path


async def main() -> int:
    configure_logging("WARNING")
    console = Console()
    runner, address = await start_reference_runner()
    ok = True
    with tempfile.TemporaryDirectory(prefix="agentrunner-demo-") as tmp:
        config = load_config(demo_config(address, Path(tmp)))
        from agentrunner_host.cli import _open_stores

        host = HostApp(config, await _open_stores(config))
        try:
            port = await host.start()
            console.print(
                f"[bold]host[/bold] 127.0.0.1:{port}  [bold]runner[/bold] {REFERENCE_ID} at {address}\n"
            )
            for i, (text, expected) in enumerate(SCRIPT, 1):
                console.print(f"[cyan]you[/cyan] > {text}")
                console.print("[green]bot[/green] > ", end="")
                request = _request(text, "", f"demo-{i}", "demo-conversation", "demo-bot", True)
                finished = await stream_reply(f"127.0.0.1:{port}", request, console, deadline_seconds=60)
                status = common_pb2.RunStatus.Name(finished.status).removeprefix("RUN_STATUS_").lower()
                console.print(
                    f"[dim]   ({status}{', ' + finished.reason if finished.reason else ''})[/dim]\n"
                )
                ok = ok and finished.status == expected
        except grpc.RpcError as exc:
            console.print(f"[red]demo failed[/red]: {exc.code().name}")  # type: ignore[attr-defined]
            ok = False
        finally:
            await host.stop(1.0)
            with contextlib.suppress(ProcessLookupError):
                runner.terminate()
            await runner.wait()
    console.print(
        "[bold green]demo finished[/bold green]" if ok else "[bold red]demo had unexpected results[/bold red]"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
