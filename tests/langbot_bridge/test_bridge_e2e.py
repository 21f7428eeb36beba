"""LangBot Runner plugins behind the real host, end to end: every part a real process on loopback.

The host is started through its CLI (`db upgrade`, `serve`) on SQLite, and starts the bridge itself (a
`runners:` entry of kind `langbot-plugins` over `tests/langbot_bridge/plugins/`); the bridge starts the
public plugin runtime (`langbot-plugin` 0.7.18), which starts one worker per plugin. The OpenAI-compatible
mock (`agentrunner_host.testing.openai_mock`) answers the model calls and an MCP server over stdio
provides the `add` tool. Tests speak `HostService` like a client. The plugins were written for these
tests against the public SDK, unchanged: `qa/kit` (echo, llm, history, state, tool, reply, log, ask,
boom, forever, probe) and `qa/crashy` (crash, spoof).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import (
    CLI,
    ROOT,
    Proc,
    audit_outcomes,
    cli,
    http_json,
    run_request,
    write_config,
)

pytestmark = pytest.mark.asyncio

PLUGINS = Path(__file__).parent / "plugins"
KIT = "plugin:qa/kit/"
CRASHY = "plugin:qa/crashy/"
Update = host_service_pb2.HostServiceRunResponse


@dataclass
class Stack:
    address: str
    db_file: Path
    marker: Path
    mock: str
    host: Proc


@dataclass
class Outcome:
    updates: list[Any]

    @property
    def run_id(self) -> str:
        return str(self.updates[0].accepted.run_id)

    @property
    def results(self) -> list[result_pb2.RunResult]:
        return [u.result for u in self.updates if u.HasField("result")]

    def of(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.results if r.WhichOneof("payload") == kind]

    @property
    def status(self) -> str:
        finished = [u.finished for u in self.updates if u.HasField("finished")]
        return common_pb2.RunStatus.Name(finished[-1].status) if finished else "none"

    @property
    def answer(self) -> str:
        done = self.of("run_completed")
        return done[0].message.content if done else ""

    @property
    def streamed(self) -> str:
        text = ""
        for delta in self.of("message_delta"):
            text = delta.cumulative_text if delta.HasField("cumulative_text") else text + delta.text
        return text


def _agent(name: str, runner_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": name, "runner_id": runner_id, **extra}


def _binding(name: str) -> dict[str, Any]:
    """Events of the bot named like the agent go to it (the tests pick the agent by `bot_id`)."""
    return {
        "id": name,
        "scope": {"type": "bot", "id": name},
        "event": "*",
        "target": {"agent": name},
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("langbot-bridge")
    procs: list[Proc] = []
    try:
        mock = Proc(
            [sys.executable, "-m", "agentrunner_host.testing.openai_mock", "--port", "0"],
            "MOCK_OPENAI_LISTENING",
        )
        procs.append(mock)
        base = f"http://127.0.0.1:{mock.value}"
        marker = tmp / "cancelled.txt"
        (tmp / "plugins.yaml").write_text("qa/kit: {greeting: {env: QA_GREETING}}\n")
        agents = [
            _agent("echo", KIT + "echo", runner_config={"prefix": "> "}),
            _agent("snapshots", KIT + "echo", runner_config={"style": "snapshots"}),
            _agent("llm", KIT + "llm", runner_config={"model": "chat"}),
            _agent("history", KIT + "history"),
            _agent("state", KIT + "state"),
            _agent("tool", KIT + "tool", resource_policy={"tools": ["add"]}),
            _agent("reply", KIT + "reply"),
            _agent("log", KIT + "log"),
            _agent("ask", KIT + "ask", event_types=["message.received", "interaction.submitted"]),
            _agent("boom", KIT + "boom"),
            _agent("forever", KIT + "forever", runner_config={"marker": str(marker)}),
            _agent("deadline", KIT + "forever", runner_config={"marker": str(marker)}, timeout_seconds=3),
            _agent("probe", KIT + "probe", state_policy={"scopes": ["conversation"]}),
            _agent("crash", CRASHY + "crash"),
            _agent("spoof", CRASHY + "spoof"),
        ]
        db_file = tmp / "host.db"
        config = write_config(
            tmp / "host.yaml",
            {
                "instance_id": "langbot-bridge-host",
                "listen": {"address": "127.0.0.1:0"},
                "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
                "runners": [
                    {
                        "id": "langbot",
                        "kind": "langbot-plugins",
                        "plugins_dir": str(PLUGINS),
                        "args": ["--skip-deps-check", "--plugin-config", str(tmp / "plugins.yaml")],
                        "env": ["QA_GREETING"],
                    }
                ],
                "models": [{"id": "chat", "base_url": f"{base}/v1", "model": "mock-chat"}],
                "tools": {
                    "mcp_servers": [
                        {
                            "name": "stdio",
                            "transport": "stdio",
                            "command": sys.executable,
                            "args": ["-m", "tests.mocks.mcp_stdio_server"],
                            "cwd": str(ROOT),
                        }
                    ]
                },
                "agents": agents,
                "bindings": [
                    *(_binding(a["id"]) for a in agents),
                    {
                        "id": "many",
                        "scope": {"type": "bot", "id": "many"},
                        "event": "*",
                        "target": {"agent": "echo"},
                    },
                ],
            },
        )
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        host = Proc(  # the host starts the bridge and waits for its plugins' workers (a few seconds each)
            [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
            "AGENTRUNNER_HOST_LISTENING",
            {"QA_GREETING": "bonjour", "OPENAI_API_KEY": "sk-host-secret"},
            timeout=120,
        )
        procs.append(host)
        yield Stack(host.value, db_file, marker, base, host)
    finally:
        for proc in reversed(procs):
            proc.kill()


def request_for(agent: str, text: str, conversation: str = "") -> host_service_pb2.HostServiceRunRequest:
    request = run_request(text, conversation_id=conversation or agent)
    request.event.bot_id = agent
    return request


async def ask(stack: Stack, agent: str, text: str, *, conversation: str = "") -> Outcome:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return Outcome([u async for u in stub.Run(request_for(agent, text, conversation), timeout=60)])


async def test_the_host_lists_every_plugin_runner_with_its_translated_manifest(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        listed = await stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=10)
    manifests = {r.manifest.id: r.manifest for r in listed.runners}
    assert {KIT + n for n in ("echo", "llm", "ask", "forever")} | {CRASHY + "crash"} <= set(manifests)
    llm = manifests[KIT + "llm"]
    assert [f.name for f in llm.config_schema] == ["model"]
    assert llm.config_schema[0].type == 10  # CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR
    assert llm.capabilities.streaming and llm.capabilities.event_context
    assert manifests[KIT + "ask"].capabilities.interactions
    assert manifests[KIT + "forever"].capabilities.interrupt
    assert manifests[KIT + "echo"].metadata["component_kind"] == "Runner"


async def test_a_streaming_echo_arrives_as_increments_with_its_final_text(stack: Stack) -> None:
    out = await ask(stack, "echo", "hello plugin world")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert [d.text for d in out.of("message_delta")] == [">", " hello", " plugin", " world"]
    assert out.streamed == "> hello plugin world"
    assert out.answer == "> hello plugin world"
    snapshots = await ask(stack, "snapshots", "one two three")  # LangBot-style snapshots in `content`
    assert [d.text for d in snapshots.of("message_delta")] == ["one", " two", " three"]
    assert snapshots.answer == "one two three"


async def test_plugin_settings_come_from_the_plugin_config_file_and_the_environment(stack: Stack) -> None:
    out = await ask(stack, "echo", "greet", conversation="greet")
    assert out.answer == "> bonjour"


async def test_invoke_llm_reaches_the_host_model_and_usage_lands_on_the_terminal_result(stack: Stack) -> None:
    out = await ask(stack, "llm", "say pineapple")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert "pineapple" in out.answer
    terminal = out.results[-1]
    assert terminal.HasField("usage") and terminal.usage.total_tokens > 0
    streamed = await ask(stack, "llm", "stream: mango juice", conversation="llm-stream")
    assert streamed.status == "RUN_STATUS_COMPLETED", streamed.results
    assert "mango juice" in streamed.answer and streamed.streamed == streamed.answer
    assert len(streamed.of("message_delta")) > 1
    counted = await ask(stack, "llm", "tokens: how many tokens is this", conversation="llm-tokens")
    assert counted.status == "RUN_STATUS_COMPLETED", counted.results
    assert counted.answer.startswith("tokens=") and int(counted.answer.removeprefix("tokens=")) > 0
    chats = [r for r in http_json(f"{stack.mock}/_admin/requests") if r["path"].endswith("/chat/completions")]
    assert any(r["body"].get("stream") for r in chats) and any(not r["body"].get("stream") for r in chats)


async def test_history_round_trips_through_history_page(stack: Stack) -> None:
    first = await ask(stack, "history", "first question", conversation="hist")
    assert first.answer == "seen 0: "
    second = await ask(stack, "history", "second question", conversation="hist")
    assert second.answer == "seen 2: user:first question | assistant:seen 0: "


async def test_state_round_trips_through_state_get_set_and_state_updated(stack: Stack) -> None:
    first = await ask(stack, "state", "alpha", conversation="st")
    assert first.answer == "counter=1 last=None", first.results
    second = await ask(stack, "state", "beta", conversation="st")
    assert second.answer == "counter=2 last=alpha"
    assert [s.key for s in second.of("state_updated")] == ["last_input"]


async def test_call_tool_reaches_the_host_tool_and_is_traced(stack: Stack) -> None:
    out = await ask(stack, "tool", "add please")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert out.answer == "tools=add,event_reply params=['a', 'b'] add=5"  # event_reply: ctx.reply's grant
    assert [t.tool_name for t in out.of("tool_call_started")] == ["add"]
    assert audit_outcomes(stack.db_file, out.run_id, "CallTool") == ["OK"]


async def test_reply_and_reply_stream_reach_the_client_as_replies(stack: Stack) -> None:
    out = await ask(stack, "reply", "reply to me")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    replies = [u.reply for u in out.updates if u.HasField("reply")]
    texts = [(common_pb2.ReplyMode.Name(r.mode), r.message.content) for r in replies]
    assert texts[0] == ("REPLY_MODE_FULL", "quick reply")
    assert ("REPLY_MODE_UPDATE", "streamed reply") in texts
    assert texts[-1][0] == "REPLY_MODE_FINISH"
    assert out.answer == "done replying"


async def test_ctx_log_becomes_a_run_log_result(stack: Stack) -> None:
    out = await ask(stack, "log", "log something")
    (entry,) = out.of("run_log")
    assert entry.text == "plugin says hi" and entry.level == result_pb2.RUN_LOG_LEVEL_WARNING
    assert out.answer == "logged"


async def test_an_interaction_is_requested_and_its_answer_starts_the_next_run(stack: Stack) -> None:
    request = request_for("ask", "deploy?")
    request.event.delivery.interactions.field_types.append(common_pb2.INTERACTION_FIELD_TYPE_TEXT)
    request.event.delivery.interactions.action_styles.append(common_pb2.INTERACTION_ACTION_STYLE_PRIMARY)
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        asked = Outcome([u async for u in stub.Run(request, timeout=60)])
        (interaction,) = [u.interaction for u in asked.updates if u.HasField("interaction")]
        assert interaction.request.title == "Proceed?" and [a.id for a in interaction.request.actions] == [
            "yes",
            "no",
        ]
        answer = host_service_pb2.SubmitInteractionRequest(
            interaction_id=interaction.request.interaction_id, action_id="yes"
        )
        answered = Outcome([u async for u in stub.SubmitInteraction(answer, timeout=60)])
    assert asked.status == "RUN_STATUS_COMPLETED", asked.results
    assert answered.status == "RUN_STATUS_COMPLETED", answered.results
    assert answered.answer.startswith("answered ") and " with yes " in answered.answer


async def test_a_plugin_that_raises_fails_its_run_typed_and_the_host_goes_on(stack: Stack) -> None:
    out = await ask(stack, "boom", "explode")
    (failure,) = out.of("run_failed")
    assert out.status == "RUN_STATUS_FAILED"
    assert failure.code == "runner.exception" and "boom from the plugin" in failure.message
    assert (await ask(stack, "echo", "still here", conversation="after-boom")).answer == "> still here"


async def test_an_ungranted_call_is_refused_by_the_host_and_audited(stack: Stack) -> None:
    out = await ask(stack, "probe", "read the actor")
    assert out.answer.startswith("refused: ") and "UNAUTHORIZED" in out.answer, out.answer
    assert audit_outcomes(stack.db_file, out.run_id, "GetState") == ["UNAUTHORIZED"]


async def _start_forever(stub: host_service_pb2_grpc.HostServiceStub, conversation: str) -> tuple[Any, str]:
    call = stub.Run(request_for("forever", "run forever", conversation), timeout=120)
    updates = []
    async for update in call:
        updates.append(update)
        if update.HasField("result") and update.result.HasField("message_delta"):
            return call, updates[0].accepted.run_id
    raise AssertionError(f"the forever runner never started: {updates}")


async def test_cancel_reaches_the_plugin(stack: Stack) -> None:
    stack.marker.unlink(missing_ok=True)
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call, run_id = await _start_forever(stub, "forever")
        await stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="test"), timeout=10)
        rest = Outcome([u async for u in call])
    assert rest.status == "RUN_STATUS_CANCELLED"
    for _ in range(50):
        if stack.marker.exists():
            break
        await asyncio.sleep(0.1)
    assert stack.marker.read_text() == f"cancelled {run_id}"


async def test_the_deadline_reaches_the_plugin(stack: Stack) -> None:
    stack.marker.unlink(missing_ok=True)
    started = time.monotonic()
    out = await ask(stack, "deadline", "run forever")
    assert out.status == "RUN_STATUS_TIMEOUT", out.results
    assert out.of("run_failed")[0].code == "deadline_exceeded"
    assert 2.5 < time.monotonic() - started < 10
    for _ in range(50):
        if stack.marker.exists():
            break
        await asyncio.sleep(0.1)
    assert stack.marker.read_text() == f"cancelled {out.run_id}"


async def test_a_plugin_cannot_use_another_plugins_run(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call, victim = await _start_forever(stub, "forever-victim")
        try:
            out = await ask(stack, "spoof", victim)
        finally:
            call.cancel()
    assert out.answer.startswith("spoof refused") and "belongs to another plugin" in out.answer, out.answer
    assert audit_outcomes(stack.db_file, victim, "SetState") == []


async def test_a_crashing_plugin_worker_fails_its_run_typed_and_is_restarted(stack: Stack) -> None:
    crashed = await ask(stack, "crash", "crash")
    (failure,) = crashed.of("run_failed")
    assert crashed.status == "RUN_STATUS_FAILED"
    assert failure.code == "langbot.plugin_crashed" and failure.retryable, failure
    assert (await ask(stack, "echo", "other plugin unaffected", conversation="crash-other")).answer.endswith(
        "unaffected"
    )
    started = time.monotonic()
    again = await ask(stack, "crash", "ping", conversation="crash-2")
    assert again.status == "RUN_STATUS_COMPLETED", again.results
    assert again.answer == "alive: ping"
    assert time.monotonic() - started < 40


async def test_200_concurrent_runs_through_one_bridge_all_complete(stack: Stack) -> None:
    """More runs at once than the runtime takes on one connection (128): the bridge queues the rest."""
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)

        async def one(i: int) -> Outcome:
            request = request_for("many", f"wait {i}", f"many-{i}")
            return Outcome([u async for u in stub.Run(request, timeout=120)])

        outs = await asyncio.gather(*(one(i) for i in range(200)))
    statuses = [o.status for o in outs]
    assert statuses.count("RUN_STATUS_COMPLETED") == 200, sorted(set(statuses))
    assert sorted(o.answer for o in outs) == sorted(f"> wait {i}" for i in range(200))
    assert (
        _runs_overlapping(stack.db_file, "many-") > 128
    )  # open at once: the runtime alone refuses the 129th


def _runs_overlapping(db_file: Path, prefix: str) -> int:
    with contextlib.closing(sqlite3.connect(db_file)) as conn:
        rows = conn.execute(
            "SELECT created_at, finished_at FROM runs WHERE conversation_id LIKE ?", (prefix + "%",)
        )
        spans = [(str(a), str(b)) for a, b in rows if a and b]
    return max((sum(1 for a2, b2 in spans if a2 <= a < b2) for a, _ in spans), default=0)


async def test_a_crashing_runtime_fails_its_open_runs_typed_and_is_restarted(stack: Stack) -> None:
    children = psutil.Process(stack.host.popen.pid).children(recursive=True)
    (runtime,) = [p for p in children if " rt " in " ".join(p.cmdline()) + " "]
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call, _ = await _start_forever(stub, "forever-runtime-crash")
        runtime.kill()  # SIGKILL the plugin runtime itself, mid-run
        rest = Outcome([u async for u in call])
    (failure,) = rest.of("run_failed")
    assert rest.status == "RUN_STATUS_FAILED"
    assert failure.code == "langbot.runtime_crashed" and failure.retryable, failure
    out = Outcome([])
    for _ in range(120):  # the bridge restarts it (1 s backoff); the run waits for the plugins to register
        out = await ask(stack, "echo", "runtime back", conversation="after-runtime-crash")
        if out.status == "RUN_STATUS_COMPLETED":
            break
        await asyncio.sleep(0.5)
    assert out.answer == "> runtime back", out.results


async def test_a_killed_bridge_takes_its_plugins_along_and_the_host_starts_it_again(stack: Stack) -> None:
    def plugin_side() -> list[psutil.Process]:
        children = psutil.Process(stack.host.popen.pid).children(recursive=True)
        return [p for p in children if "langbot" in " ".join(p.cmdline())]

    before = plugin_side()
    bridge = next(p for p in before if "agentrunner_runners.langbot_bridge" in p.cmdline())
    bridge.kill()  # SIGKILL: the bridge cannot clean up; its runtime is tied to it (PR_SET_PDEATHSIG)
    _, alive = psutil.wait_procs(before, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
    out = Outcome([])
    for _ in range(120):  # the host restarts it (1 s backoff) and it serves again once its plugins registered
        with contextlib.suppress(grpc.RpcError):
            out = await ask(stack, "echo", "back again", conversation="after-kill")
            if out.status == "RUN_STATUS_COMPLETED":
                break
        await asyncio.sleep(0.5)
    assert out.answer == "> back again", out.results


async def test_no_host_secret_reaches_the_bridge_or_the_plugins_and_none_outlives_the_host(
    stack: Stack,
) -> None:
    """Runs last (it kills the module's host): the bridge, the runtime and the plugin workers see no
    secret of the host's environment, and all of them end when the host is SIGKILLed."""
    children = psutil.Process(stack.host.popen.pid).children(recursive=True)
    plugin_side = [p for p in children if "langbot" in " ".join(p.cmdline())]
    assert len(plugin_side) >= 4, [p.cmdline() for p in children]  # bridge, runtime, two workers
    for proc in plugin_side:
        environ = proc.environ()
        assert "OPENAI_API_KEY" not in environ and "sk-host-secret" not in environ.values(), proc.cmdline()
    bridge = next(p for p in plugin_side if "agentrunner_runners.langbot_bridge" in p.cmdline())
    assert bridge.environ()["QA_GREETING"] == "bonjour"  # named in the entry's `env`
    stack.host.kill()
    _, alive = psutil.wait_procs(plugin_side, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
