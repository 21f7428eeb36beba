"""`make demo`: the host plus the reference runner (its own process), a short scripted conversation.

Works on a fresh machine with no config: the runner is started with the SDK CLI on a free port, the host
gets a temporary config (SQLite under a temporary directory, migrated automatically because it is a
fresh demo database; `serve` never does that) and listens on a free port, and each line of the script is
sent through `HostService.Run` and streamed to the terminal as it arrives. The reference runner pulls the
conversation's history through the host and reports how many items it saw (`history_items`) and its
turn counter (conversation state): the demo checks that each turn sees the earlier ones. Exits 0 when
every turn ended as expected.
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


def _completed_metadata(collected: list[Any]) -> dict[str, Any]:
    for r in collected:
        if r.HasField("run_completed"):
            return dict(json_format.MessageToDict(r.metadata)) if r.HasField("metadata") else {}
    return {}


async def main() -> int:
    configure_logging("WARNING")
    console = Console()
    runner, address = await start_reference_runner()
    ok = True
    with tempfile.TemporaryDirectory(prefix="agentrunner-demo-") as tmp:
        config = load_config(demo_config(address, Path(tmp)))
        console.print(
            f"[dim]fresh demo database {config.database.url}: migrating it automatically "
            "(a real host refuses an un-migrated database; run `agentrunner-host db upgrade`)[/dim]"
        )
        host = await HostApp.open(config, auto_upgrade=True)
        try:
            port = await host.start()
            console.print(
                f"[bold]host[/bold] 127.0.0.1:{port}  [bold]runner[/bold] {REFERENCE_ID} at {address}\n"
            )
            previous_history = -1
            for i, (text, expected) in enumerate(SCRIPT, 1):
                console.print(f"[cyan]you[/cyan] > {text}")
                console.print("[green]bot[/green] > ", end="")
                request = _request(text, "", f"demo-{i}", "demo-conversation", "demo-bot", True)
                collected: list[Any] = []
                finished = await stream_reply(
                    f"127.0.0.1:{port}", request, console, deadline_seconds=60, collect=collected
                )
                status = common_pb2.RunStatus.Name(finished.status).removeprefix("RUN_STATUS_").lower()
                console.print(f"[dim]   ({status}{', ' + finished.reason if finished.reason else ''})[/dim]")
                ok = ok and finished.status == expected
                meta = _completed_metadata(collected)
                if "history_items" in meta:
                    items = int(meta["history_items"])
                    console.print(
                        f"[dim]   runner saw {items} history item(s) through the host, turn {int(meta['turn'])}[/dim]"
                    )
                    if items <= previous_history:
                        console.print(
                            "[red]   history did not grow: the runner did not see earlier turns[/red]"
                        )
                        ok = False
                    previous_history = items
                console.print()
            if previous_history < 2:
                console.print("[red]no turn saw the conversation's history[/red]")
                ok = False
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
