"""`make demo`: the host plus the reference runner (its own process), a short scripted conversation.

Works on a fresh machine with no config: the runner is started with the SDK CLI on a free port, the host
gets a temporary config (SQLite under a temporary directory, migrated automatically because it is a
fresh demo database; `serve` never does that) and listens on a free port, and each line of the script is
sent through `HostService.Run` and streamed to the terminal as it arrives. The reference runner pulls the
conversation's history through the host and reports how many items it saw (`history_items`) and its
turn counter (conversation state): the demo checks that each turn sees the earlier ones.

Then the official local agent (`plugin:langbot/local-agent/default`, its own process too) holds a short
conversation: streamed replies, a call of the host-native `current_time` tool, and a turn that needs the
first one (history pulled through the host). Its model is an OpenAI-compatible endpoint when
`AGENTRUNNER_DEMO_OPENAI_BASE_URL` is set (with `AGENTRUNNER_DEMO_OPENAI_API_KEY` and
`AGENTRUNNER_DEMO_MODEL`, default `gpt-4o-mini`); otherwise the bundled mock server
(`agentrunner_host.testing.openai_mock`) runs in this process, needing no network, and the demo says so.
The web console is on (`console.address`, port 8080 when free) and its URL is printed; on a terminal
the host keeps serving after the scripted conversations so the console can be used with both runners,
until Ctrl-C (`AGENTRUNNER_DEMO_NO_WAIT=1`, or output that is not a terminal, ends it at once).
Exits 0 when every turn ended as expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import json_format
from rich.console import Console

from agentrunner.results import kind_name
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from agentrunner_host.cli import run_request, stream_reply
from agentrunner_host.cli.render import KIND_STYLES
from agentrunner_host.config.model import load_config
from agentrunner_host.observability.telemetry import configure_logging
from agentrunner_host.server.app import HostApp
from agentrunner_host.testing.openai_mock import MockOpenAIServer

REFERENCE = "agentrunner_runners.reference:ReferenceRunner"
REFERENCE_ID = "plugin:langbot/reference/default"
LOCAL_AGENT = "agentrunner_runners.local_agent:LocalAgentRunner"
LOCAL_AGENT_ID = "plugin:langbot/local-agent/default"
#: environment variables naming a real OpenAI-compatible endpoint for the local-agent conversation
ENV_BASE_URL = "AGENTRUNNER_DEMO_OPENAI_BASE_URL"
ENV_API_KEY = "AGENTRUNNER_DEMO_OPENAI_API_KEY"
ENV_MODEL = "AGENTRUNNER_DEMO_MODEL"
#: set to end the demo after the scripted conversations even on a terminal
ENV_NO_WAIT = "AGENTRUNNER_DEMO_NO_WAIT"
DEFAULT_MODEL = "gpt-4o-mini"
LA_CONVERSATION = "demo-local-agent"
LA_PROMPT = (
    "You are the friendly assistant of the AgentRunner demo. Answer in one or two short sentences. "
    "When asked about the time, call the current_time tool with the right IANA time zone."
)


@dataclasses.dataclass(frozen=True)
class LocalAgentTurn:
    """One user message of the local-agent conversation, what the mock answers, and what to check."""

    text: str
    #: replies scripted into the mock; `template` ones are filled from the request the mock received
    mock_replies: tuple[dict[str, Any], ...]
    expect_tool: str = ""
    #: the reply must contain this (always with the mock; a warning only with a real model)
    expect_text: str = ""


_DELAY = {"chunk_delay": 0.03}
LA_SCRIPT: list[LocalAgentTurn] = [
    LocalAgentTurn(
        "Hi! I'm Ada, and my favourite fruit is the tangerine.",
        ({"content": "Hello Ada, nice to meet you! I'll remember that.", **_DELAY},),
    ),
    LocalAgentTurn(
        "What time is it in Tokyo right now?",
        (
            {
                "content": "",
                "tool_calls": [
                    {"id": "call_time", "name": "current_time", "arguments": '{"timezone": "Asia/Tokyo"}'}
                ],
            },
            {"template": "The host's current_time tool says it is {last_tool} in Tokyo.", **_DELAY},
        ),
        expect_tool="current_time",
        expect_text="+09:00",
    ),
    LocalAgentTurn(
        "Which fruit did I say is my favourite?",
        ({"template": 'You told me earlier: "{first_user}"', **_DELAY},),
        expect_text="tangerine",
    ),
]
#: (message, expected final status)
SCRIPT: list[tuple[str, int]] = [
    ("Hello, host!", common_pb2.RUN_STATUS_COMPLETED),
    ("What can you do?", common_pb2.RUN_STATUS_COMPLETED),
    ("slow:3", common_pb2.RUN_STATUS_COMPLETED),
    ("fail:controlled", common_pb2.RUN_STATUS_FAILED),
    ("Still there?", common_pb2.RUN_STATUS_COMPLETED),
]


async def start_runner(
    target: str, env: dict[str, str] | None = None
) -> tuple[asyncio.subprocess.Process, str]:
    """A runner process started with the SDK CLI on a free port (with `env` added to this process's
    environment); returns it and its address."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentrunner",
        "serve",
        target,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line:
            raise RuntimeError(f"{target} exited before listening")
        if line.startswith("AGENTRUNNER_LISTENING "):
            return proc, line.split()[1]


@dataclasses.dataclass
class ModelEndpoint:
    """Where the local agent's model lives: a configured endpoint, or the bundled mock (`mock` set)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    mock: MockOpenAIServer | None = None


async def model_endpoint() -> ModelEndpoint:
    base_url = os.environ.get(ENV_BASE_URL, "").strip()
    if base_url:
        return ModelEndpoint(
            base_url.rstrip("/"),
            os.environ.get(ENV_MODEL, "").strip() or DEFAULT_MODEL,
            ENV_API_KEY if os.environ.get(ENV_API_KEY) else None,
        )
    mock = MockOpenAIServer()
    await mock.start()
    return ModelEndpoint(mock.base_url, "mock-chat", mock=mock)


def demo_config(
    runner_address: str,
    workdir: Path,
    local_agent_address: str | None = None,
    endpoint: ModelEndpoint | None = None,
) -> Path:
    runners: list[dict[str, Any]] = [{"id": "reference", "address": runner_address}]
    agents: list[dict[str, Any]] = [
        {
            "id": "demo",
            "runner_id": REFERENCE_ID,
            "runner_config": {"prefix": "echo: "},
            "event_types": ["message.*", "interaction.submitted"],
            "timeout_seconds": 60,
        }
    ]
    bindings: list[dict[str, Any]] = [
        {"id": "everything", "event": "message.*", "target": {"agent": "demo"}},
        # answers to the reference runner's `ask:` forms arrive as events of their own
        {"id": "answers", "event": "interaction.submitted", "target": {"agent": "demo"}},
    ]
    models: list[dict[str, Any]] = []
    if local_agent_address and endpoint:
        runners.append({"id": "local-agent", "address": local_agent_address})
        models.append(
            {
                "id": "demo-chat",
                "base_url": endpoint.base_url,
                "model": endpoint.model,
                "api_key_env": endpoint.api_key_env,
                "timeout": 60,
            }
        )
        agents.append(
            {
                "id": "local-agent",
                "runner_id": LOCAL_AGENT_ID,
                "runner_config": {
                    "model": "demo-chat",
                    "prompt": [{"role": "system", "content": LA_PROMPT}],
                    "max-tool-iterations": 3,
                    "timeout": 90,
                },
                "resource_policy": {"tools": ["current_time"]},
                "timeout_seconds": 120,
            }
        )
        bindings.append(
            {
                "id": "local-agent-conversation",
                "scope": {"type": "conversation", "id": LA_CONVERSATION},
                "event": "message.*",
                "target": {"agent": "local-agent"},
            }
        )
    path = workdir / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "console": {"address": console_address()},
                "database": {
                    "url": f"sqlite+aiosqlite:///{workdir / 'agentrunner.db'}",
                    "artifact_dir": str(workdir / "artifacts"),
                },
                "runners": runners,
                "models": models,
                "agents": agents,
                "bindings": bindings,
            }
        )
    )
    return path


#: the console's port in the demo when it is free (else any free port); the URL is printed either way
CONSOLE_PORT = 8080


def console_address() -> str:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", CONSOLE_PORT))
        except OSError:
            return "127.0.0.1:0"
    return f"127.0.0.1:{CONSOLE_PORT}"


async def keep_serving(console: Console, url: str) -> None:
    """After the scripted conversations, on a terminal: the host stays up for the console until Ctrl-C."""
    console.print(
        f"\n[bold]The host keeps serving.[/bold] Open [bold]{url}[/bold] to chat with both runners "
        "(agent demo: try `ask:Which colour?` for a form, `slow:100` then Cancel; agent local-agent "
        "talks to the mock model, which echoes). Ctrl-C stops the demo."
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _completed_metadata(collected: list[Any]) -> dict[str, Any]:
    for r in collected:
        if r.HasField("run_completed"):
            return dict(json_format.MessageToDict(r.metadata)) if r.HasField("metadata") else {}
    return {}


async def reference_conversation(console: Console, address: str) -> bool:
    """The scripted reference-runner conversation; True when every turn ended as expected."""
    ok = True
    previous_history = -1
    for i, (text, expected) in enumerate(SCRIPT, 1):
        console.print(f"[cyan]you[/cyan] > {text}")
        console.print("[green]bot[/green] > ", end="")
        request = run_request(text, "", f"demo-{i}", "demo-conversation", "demo-bot", True)
        collected: list[Any] = []
        finished = await stream_reply(address, request, console, deadline_seconds=60, collect=collected)
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
                console.print("[red]   history did not grow: the runner did not see earlier turns[/red]")
                ok = False
            previous_history = items
        console.print()
    if previous_history < 2:
        console.print("[red]no turn saw the conversation's history[/red]")
        ok = False
    return ok


@dataclasses.dataclass
class _Reply:
    finished: host_service_pb2.RunFinished
    text: str = ""
    tools: list[str] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


class _Printer:
    """Prints one reply as it streams: text after "bot > " (a new line per message), notes (tool calls,
    failures) on lines of their own; gathers the `_Reply` the demo checks."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.reply = _Reply(host_service_pb2.RunFinished())
        self.shown: set[str] = set()  # message ids whose text is on screen
        self.line_open = False  # the cursor is after "bot > " text
        self.current = ""  # the message id whose text the cursor follows

    def say(self, text: str, message_id: str = "", style: str | None = None) -> None:
        if self.line_open and message_id != self.current:
            self.console.print()
            self.line_open = False
        self.current = message_id
        if not self.line_open:
            self.console.print("[green]bot[/green] > ", end="")
            self.line_open = True
        self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True, style=style)

    def note(self, line: str) -> None:
        self.close_line()
        self.console.print(line, soft_wrap=True)

    def close_line(self) -> None:
        if self.line_open:
            self.console.print()
            self.line_open = False

    def delta(self, delta: Any) -> None:
        self.shown.add(delta.message_id)
        style = KIND_STYLES[kind_name(delta.kind)] or None  # reasoning / progress dimmed
        if style is None:
            self.reply.text += delta.text
        self.say(delta.text, delta.message_id, style)

    def completed(self, r: result_pb2.RunResult, kind: str) -> None:
        """`message.completed` or `run.completed`: the message unless its deltas showed it."""
        message = getattr(r, kind).message
        answer = kind_name(message.kind) == "answer"
        if answer and message.content and kind == "message_completed":
            self.reply.text = message.content
        if message.content and message.message_id not in self.shown:
            self.shown.add(message.message_id)
            if answer:
                self.reply.text = message.content
            self.say(message.content, message.message_id, KIND_STYLES[kind_name(message.kind)] or None)
        if kind == "run_completed" and r.HasField("metadata"):
            self.reply.metadata = json_format.MessageToDict(r.metadata)

    def tool_started(self, call: Any) -> None:
        self.reply.tools.append(call.tool_name)
        args = json.dumps(json_format.MessageToDict(call.parameters)) if call.HasField("parameters") else ""
        self.note(f"[magenta]   tool[/magenta] {call.tool_name}({args})")

    def tool_completed(self, done: Any) -> None:
        preview = json_format.MessageToDict(done.result_preview).get("text", "")
        outcome = f"[red]{done.error_code}[/red]" if done.error_code else str(preview)[:120]
        self.note(f"[magenta]   result[/magenta] {outcome}")

    def result(self, r: result_pb2.RunResult) -> None:
        kind = r.WhichOneof("payload")
        if kind == "message_delta" and r.message_delta.text:
            self.delta(r.message_delta)
        elif kind in ("message_completed", "run_completed"):
            self.completed(r, kind)
        elif kind == "tool_call_started":
            self.tool_started(r.tool_call_started)
        elif kind == "tool_call_completed":
            self.tool_completed(r.tool_call_completed)
        elif kind == "run_failed":
            self.note(f"[red]   [{r.run_failed.code}] {r.run_failed.message}[/red]")


async def _render(address: str, request: host_service_pb2.HostServiceRunRequest, console: Console) -> _Reply:
    """Sends one event; prints streamed text as it arrives and each tool call on its own line."""
    printer = _Printer(console)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        async for update in stub.Run(request, timeout=120):
            if update.HasField("finished"):
                printer.reply.finished = update.finished
            if update.HasField("result"):
                printer.result(update.result)
    printer.close_line()
    return printer.reply


async def local_agent_conversation(console: Console, address: str, endpoint: ModelEndpoint) -> bool:
    """The local agent: streaming, a host-native tool call and a turn that needs the history."""
    ok = True
    for i, turn in enumerate(LA_SCRIPT, 1):
        if endpoint.mock is not None:
            endpoint.mock.state.script(*turn.mock_replies)
        console.print(f"[cyan]you[/cyan] > {turn.text}")
        request = run_request(turn.text, "", f"demo-la-{i}", LA_CONVERSATION, "demo-bot", True)
        reply = await _render(address, request, console)
        status = common_pb2.RunStatus.Name(reply.finished.status).removeprefix("RUN_STATUS_").lower()
        history = reply.metadata.get("history", {})
        kept = int(history.get("kept", 0))
        console.print(
            f"[dim]   ({status}; model {reply.metadata.get('model', '-')}; "
            f"{kept} earlier message(s) via the history API)[/dim]",
            soft_wrap=True,
        )
        problems: list[str] = []
        if reply.finished.status != common_pb2.RUN_STATUS_COMPLETED:
            problems.append(f"the run ended {status} ({reply.finished.reason})")
        if i > 1 and kept < 2:
            problems.append("the agent did not see the earlier turns")
        soft: list[str] = []
        if turn.expect_tool and turn.expect_tool not in reply.tools:
            soft.append(f"the model did not call {turn.expect_tool}")
        if turn.expect_text and turn.expect_text.lower() not in reply.text.lower():
            soft.append(f"the reply does not mention {turn.expect_text!r}")
        if endpoint.mock is not None:  # the mock is deterministic: anything unexpected is a defect
            problems.extend(soft)
        else:
            for warning in soft:
                console.print(f"[yellow]   note: {warning} (a real model may answer differently)[/yellow]")
        for problem in problems:
            console.print(f"[red]   {problem}[/red]")
        ok = ok and not problems
        console.print()
    return ok


async def main() -> int:
    configure_logging("WARNING")
    console = Console()
    (runner, address), (la_runner, la_address) = await asyncio.gather(
        start_runner(REFERENCE), start_runner(LOCAL_AGENT)
    )
    endpoint = await model_endpoint()
    ok = True
    with tempfile.TemporaryDirectory(prefix="agentrunner-demo-") as tmp:
        config = load_config(demo_config(address, Path(tmp), la_address, endpoint))
        console.print(
            f"[dim]fresh demo database {config.database.url}: migrating it automatically "
            "(a real host refuses an un-migrated database; run `agentrunner-host db upgrade`)[/dim]"
        )
        host = await HostApp.open(config, auto_upgrade=True)
        try:
            port = await host.start()
            console.print(
                f"[bold]host[/bold] 127.0.0.1:{port}  [bold]runner[/bold] {REFERENCE_ID} at {address}"
            )
            url = host.console.url if host.console is not None else ""
            console.print(f"[bold]console[/bold] {url}  (debug chat, runs, runners)\n")
            ok = await reference_conversation(console, f"127.0.0.1:{port}")
            console.rule("local agent")
            console.print(f"[bold]runner[/bold] {LOCAL_AGENT_ID} at {la_address}")
            if endpoint.mock is not None:
                console.print(
                    f"[yellow]No OpenAI-compatible endpoint configured ({ENV_BASE_URL} is not set): using the "
                    f"bundled mock model server at {endpoint.base_url}. Its replies are scripted; the quoted "
                    "parts are filled from the request it really received.[/yellow]\n"
                )
            else:
                console.print(
                    f"[bold]model[/bold] {endpoint.model} at {endpoint.base_url} (from {ENV_BASE_URL})\n"
                )
            ok = await local_agent_conversation(console, f"127.0.0.1:{port}", endpoint) and ok
            if sys.stdin.isatty() and not os.environ.get(ENV_NO_WAIT):
                await keep_serving(console, url)
        except grpc.RpcError as exc:
            console.print(f"[red]demo failed[/red]: {exc.code().name}")
            ok = False
        finally:
            await host.stop(1.0)
            if endpoint.mock is not None:
                await endpoint.mock.stop()
            for proc in (runner, la_runner):
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                await proc.wait()
    console.print(
        "[bold green]demo finished[/bold green]" if ok else "[bold red]demo had unexpected results[/bold red]"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
