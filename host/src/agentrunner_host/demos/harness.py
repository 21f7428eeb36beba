"""`make demo-claude` / `make demo-codex` / `make demo-acp`: a code-agent harness runner through the host, against the real CLI when it is on
PATH and the bundled fake otherwise (saying which). A harness with a `real_mock` points the real CLI at a
local mock of its model API (offline, every check strict): `make demo-codex` puts the `codex` of
`.ci/install-real-tools codex` on PATH and drives it against the OpenAI Responses mock.

The harness runner runs as its own process (SDK CLI), the host on a fresh SQLite database in a temporary
directory, and a short conversation goes through `HostService.Run`: streamed text, commentary shown as
progress, a harness tool call, a LangBot host tool called by the harness through the per-run MCP
bridge, and a turn that resumes the conversation's harness session. Exits 0 when every turn ended as
expected (with the fake, every check is strict; with a real CLI, content checks are only notes).

    python -m agentrunner_host.demos.harness claude
    python -m agentrunner_host.demos.harness codex
    python -m agentrunner_host.demos.harness acp     # the acp runner driving claude-agent-acp
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from agentrunner.v1 import common_pb2
from agentrunner_host.cli import run_request
from agentrunner_host.config.model import load_config
from agentrunner_host.demos.conversation import _render, start_runner
from agentrunner_host.observability.telemetry import configure_logging
from agentrunner_host.server.app import HostApp

CONVERSATION = "demo-harness"


@dataclasses.dataclass(frozen=True)
class Turn:
    text: str
    #: the answer must contain this (strict with the fake, a note with the real CLI)
    expect: str = ""
    expect_tool: str = ""


@dataclasses.dataclass(frozen=True)
class Harness:
    label: str
    command: str
    runner_target: str
    runner_id: str
    fake_module: str
    fake_turns: tuple[Turn, ...]
    real_turns: tuple[Turn, ...]
    #: environment of the fake (relative to the demo directory) the runner must pass through
    fake_env: tuple[tuple[str, str], ...] = ()
    runner_config: tuple[tuple[str, Any], ...] = ()
    #: config keys of the fake only, as paths relative to the demo directory
    fake_config: tuple[tuple[str, str], ...] = ()
    #: `module:function(workdir) -> (runner env, runner config, stop)` pointing the real CLI at a local
    #: mock of its model API; its turns are then checked strictly
    real_mock: str = ""
    #: the runner config key that takes the command
    command_key: str = "command"


_TIME_CALL = (
    'mcp langbot langbot_call_tool {"tool_name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}'
)
HARNESSES: dict[str, Harness] = {
    "claude": Harness(
        label="Claude Code",
        command="claude",
        runner_target="agentrunner_runners.claude_code:ClaudeCodeRunner",
        runner_id="plugin:langbot/claude-code-agent/default",
        fake_module="agentrunner_runners.testing.fake_claude",
        fake_turns=(
            Turn("Hello from the AgentRunner demo!", expect="(turn 1)"),
            Turn("tools: what is in this workspace?", expect="README.md", expect_tool="Bash"),
            Turn(_TIME_CALL, expect="+09:00", expect_tool="current_time"),
            Turn("Do you still know this conversation?", expect="(turn 4)"),
        ),
        # against `claude_demo`'s scripted Anthropic API mock
        real_turns=(
            Turn("Hello from the AgentRunner demo!", expect="(turn 1)"),
            Turn("What is the time in Tokyo?", expect="+09:00", expect_tool="current_time"),
            Turn("What does LANGBOT_CONTEXT.md in your working directory say?", expect_tool="Read"),
            Turn("Do you still know this conversation?", expect="(turn 4)"),
        ),
        fake_env=(("FAKE_CLAUDE_HOME", "fake-claude-home"),),
        real_mock="agentrunner_runners.testing.claude_demo:claude_demo",
    ),
    "codex": Harness(
        label="Codex",
        command="codex",
        runner_target="agentrunner_runners.codex:CodexRunner",
        runner_id="plugin:langbot/codex-agent/default",
        fake_module="agentrunner_runners.testing.fake_codex",
        fake_turns=(
            Turn("Hello from the AgentRunner demo!", expect="(turn 1)"),
            Turn("tools: what is in this workspace?", expect="README.md", expect_tool="shell"),
            Turn(_TIME_CALL, expect="+09:00", expect_tool="current_time"),
            # approvals answered by the runner's policy (`approvals: workspace`)
            Turn("approve: may I run a command and edit two files?", expect="inside=accept, outside=decline"),
            Turn("Do you still know this conversation?", expect="(turn 5)"),
        ),
        # the mock's rule-based model: "run `...`" runs a command, "call <tool> {...}" calls a tool
        real_turns=(
            Turn("Hello from the AgentRunner demo!", expect="(turn 1)"),
            Turn("run `ls`", expect="LANGBOT_CONTEXT.md", expect_tool="shell"),
            Turn(
                _TIME_CALL.replace("mcp langbot langbot_call_tool", "call langbot_call_tool"),
                expect="+09:00",
                expect_tool="current_time",
            ),
            Turn("Do you still know this conversation?", expect="(turn 4)"),
        ),
        fake_config=(("codex-home", "fake-codex-home"),),
        real_mock="agentrunner_runners.testing.openai_responses_mock:codex_demo",
    ),
    "acp": Harness(
        label="ACP (Claude Code's ACP agent)",
        command="claude-agent-acp",
        runner_target="agentrunner_runners.acp:AcpRunner",
        runner_id="plugin:langbot/acp-agent/default",
        fake_module="agentrunner_runners.testing.fake_acp",
        fake_turns=(
            Turn("Hello from the AgentRunner demo!", expect="(turn 1)"),
            Turn("tools: what is in this workspace?", expect="README", expect_tool="Read"),
            # permission requests answered by the runner's policy (`permissions: workspace`)
            Turn("permit: may I edit inside and outside the workspace?", expect="decisions: yes,no,no,yes"),
            Turn("Do you still know this conversation?", expect="(turn 4)"),
        ),
        # against `claude_demo`'s scripted Anthropic API mock, as `make demo-claude`
        real_turns=(
            Turn("Hello from the AgentRunner demo!", expect="(turn 1)"),
            Turn("What is the time in Tokyo?", expect="+09:00", expect_tool="current_time"),
            Turn("What does LANGBOT_CONTEXT.md in your working directory say?", expect_tool="Read"),
            Turn("Do you still know this conversation?", expect="(turn 4)"),
        ),
        fake_env=(("FAKE_ACP_HOME", "fake-acp-home"),),
        runner_config=(("provider", "claude-code"),),
        real_mock="agentrunner_runners.testing.claude_demo:claude_demo",
        command_key="acp-command",
    ),
}


def fake_shim(directory: Path, name: str, module: str) -> Path:
    """An executable `name` that runs the fake CLI with this interpreter."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_module({module!r}, run_name='__main__')\n")
    path.chmod(0o755)
    return path


def host_config(
    workdir: Path, harness: Harness, address: str, command: str, extra: dict[str, Any] | None = None
) -> Path:
    agent = {
        "id": "harness",
        "runner_id": harness.runner_id,
        "runner_config": {
            harness.command_key: command,
            "workspace": str(workdir / "workspaces"),
            **dict(harness.runner_config),
            **(extra or {}),
        },
        "resource_policy": {"tools": ["current_time"]},
        "timeout_seconds": 300,
    }
    path = workdir / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "database": {
                    "url": f"sqlite+aiosqlite:///{workdir / 'agentrunner.db'}",
                    "artifact_dir": str(workdir / "artifacts"),
                },
                "runners": [{"id": "harness", "address": address}],
                "agents": [agent],
                "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "harness"}}],
            }
        )
    )
    return path


async def conversation(console: Console, address: str, turns: tuple[Turn, ...], strict: bool) -> bool:
    ok = True
    for i, turn in enumerate(turns, 1):
        console.print(f"[cyan]you[/cyan] > {turn.text}", soft_wrap=True)
        reply = await _render(
            address, run_request(turn.text, "", f"demo-harness-{i}", CONVERSATION, "demo-bot", True), console
        )
        status = common_pb2.RunStatus.Name(reply.finished.status).removeprefix("RUN_STATUS_").lower()
        session = reply.metadata.get("session_id", "")
        console.print(f"[dim]   ({status}{'; session ' + session if session else ''})[/dim]", soft_wrap=True)
        problems = (
            []
            if reply.finished.status == common_pb2.RUN_STATUS_COMPLETED
            else [f"the run ended {status} ({reply.finished.reason})"]
        )
        soft = []
        if turn.expect and turn.expect not in reply.text:
            soft.append(f"the answer does not mention {turn.expect!r}")
        if turn.expect_tool and turn.expect_tool not in reply.tools:
            soft.append(f"no {turn.expect_tool} tool call was seen")
        if strict:
            problems += soft
        else:
            for note in soft:
                console.print(f"[yellow]   note: {note} (a real harness may answer differently)[/yellow]")
        for problem in problems:
            console.print(f"[red]   {problem}[/red]")
        ok = ok and not problems
        console.print()
    return ok


async def main(name: str) -> int:
    configure_logging("WARNING")
    console = Console()
    harness = HARNESSES[name]
    with (
        tempfile.TemporaryDirectory(prefix=f"agentrunner-demo-{name}-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        workdir = Path(tmp)
        real = shutil.which(harness.command)
        env = {"AGENTRUNNER_HARNESS_ROOTS": str(workdir / "workspaces")}
        extra: dict[str, Any] = {}
        if real:
            command = real
            console.print(f"[bold]{harness.label}[/bold]: using the real `{harness.command}` at {real}")
            if harness.real_mock:
                module, _, function = harness.real_mock.partition(":")
                mock_env, mock_config, stop = getattr(importlib.import_module(module), function)(workdir)
                stack.callback(stop)
                env.update(mock_env)
                extra.update(mock_config)
                console.print(f"   against a local mock of its model API ({module})")
        else:
            command = str(fake_shim(workdir / "bin", harness.command, harness.fake_module))
            console.print(
                f"[bold]{harness.label}[/bold]: no `{harness.command}` on PATH, so this demo uses the bundled fake "
                f"CLI ({harness.fake_module}); install {harness.label} to see the same runner drive the real one"
            )
            for key, rel in harness.fake_env:
                env[key] = str(workdir / rel)
            for key, rel in harness.fake_config:
                (workdir / rel).mkdir(parents=True, exist_ok=True)
                extra[key] = str(workdir / rel)
            env["AGENTRUNNER_HARNESS_ENV_PASSTHROUGH"] = ",".join(k for k, _ in harness.fake_env)
        proc, address = await start_runner(harness.runner_target, env)
        ok = False
        try:
            config = load_config(host_config(workdir, harness, address, command, extra))
            host = await HostApp.open(config, auto_upgrade=True)
            try:
                port = await host.start()
                console.print(
                    f"[bold]host[/bold] 127.0.0.1:{port}  [bold]runner[/bold] {harness.runner_id} at {address}\n"
                )
                turns = harness.real_turns if real else harness.fake_turns
                ok = await conversation(
                    console, f"127.0.0.1:{port}", turns, strict=not real or bool(harness.real_mock)
                )
            finally:
                await host.stop(1.0)
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            await proc.wait()
    console.print(
        "[bold green]demo finished[/bold green]" if ok else "[bold red]demo had unexpected results[/bold red]"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    choice = sys.argv[1] if len(sys.argv) > 1 else "claude"
    if choice not in HARNESSES:
        print(f"usage: python -m agentrunner_host.demos.harness {{{','.join(HARNESSES)}}}", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main(choice)))
