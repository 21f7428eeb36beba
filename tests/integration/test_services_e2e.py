"""The external-service runners end to end: the host (CLI, SQLite), each runner as its own process, and
the mock services (their own process, real wire formats, awkward write splits) standing in for Dify,
n8n, Langflow, Coze, DashScope and Tbox. Tests speak `HostService.Run` like a client (and once the
host's `run` CLI) and read what reached the "service" from the mock's request record."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import (
    CLI,
    ROOT,
    Proc,
    cli,
    run_request,
    write_config,
)

pytestmark = pytest.mark.asyncio

#: name -> (serve target, runner id)
SERVICES: dict[str, tuple[str, str]] = {
    "dify": ("agentrunner_runners.dify:DifyRunner", "plugin:langbot/dify-agent/default"),
    "n8n": ("agentrunner_runners.n8n:N8nRunner", "plugin:langbot/n8n-agent/default"),
    "langflow": ("agentrunner_runners.langflow:LangflowRunner", "plugin:langbot/langflow-agent/default"),
    "coze": ("agentrunner_runners.coze:CozeRunner", "plugin:langbot/coze-agent/default"),
    "dashscope": ("agentrunner_runners.dashscope:DashScopeRunner", "plugin:langbot/dashscope-agent/default"),
    "tbox": ("agentrunner_runners.tbox:TboxRunner", "plugin:langbot/tbox-agent/default"),
}


def good_config(name: str, base: str) -> dict[str, Any]:
    return {
        "dify": {"base-url": f"{base}/dify/v1", "api-key": "app-e2e-secret-key"},
        "n8n": {"webhook-url": f"{base}/n8n/webhook/chat"},
        "langflow": {"base-url": f"{base}/langflow", "flow-id": "flow-e2e", "api-key": "lf-e2e-key"},
        "coze": {"api-base": f"{base}/coze", "api-key": "pat-e2e-key", "bot-id": "7350001"},
        "dashscope": {"base-url": f"{base}/dashscope/api/v1", "api-key": "sk-e2e-key", "app-id": "appe2e"},
        "tbox": {"base-url": f"{base}/tbox", "api-key": "tbox-e2e-key", "app-id": "tbox-app"},
    }[name]


BAD_CONFIG: dict[str, tuple[dict[str, Any], str]] = {
    "dify": ({"app-type": "robot"}, "app-type"),
    "n8n": ({"auth-type": "basic"}, "basic-username"),
    "langflow": ({"tweaks": "{oops"}, "tweaks"),
    "coze": ({"bot-id": ""}, "bot-id"),
    "dashscope": ({"app-type": "chatbot"}, "app-type"),
    "tbox": ({"base-url": "api.tbox.cn"}, "base-url"),
}

#: the chat request's path suffix, and how it carries the external conversation ("" when it does not)
CHAT: dict[str, tuple[str, Any]] = {
    "dify": ("/chat-messages", lambda r: r["body"].get("conversation_id", "")),
    "n8n": ("/webhook/chat", lambda r: r["body"].get("session_id", "")),
    "langflow": ("/flow-e2e", lambda r: r["body"].get("session_id", "")),
    "coze": ("/v3/chat", lambda r: r["query"].get("conversation_id", "")),
    "dashscope": ("/completion", lambda r: r["body"]["input"].get("session_id", "")),
    "tbox": ("/api/chat", lambda r: r["body"].get("conversationId", "")),
}
#: services whose runner mints the conversation id itself (sent from the first turn on)
RUNNER_MINTED = {"n8n", "langflow"}


@dataclass
class Stack:
    address: str
    mock: str
    db_file: Path

    def requests(self, service: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.mock}/_admin/requests", timeout=10) as resp:
            return [r for r in json.loads(resp.read()) if r["service"] == service]


def _start_runner(target: str) -> Proc:
    """A runner process (SDK CLI), given time to start: seven Python processes start at once here."""
    args = [sys.executable, "-m", "agentrunner", "serve", target, "--host", "127.0.0.1", "--port", "0"]
    return Proc(args, "AGENTRUNNER_LISTENING", None, 90)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("services")
    procs: list[Proc] = []
    try:
        # every process starts at once, and the database is migrated meanwhile (on a loaded 2-core
        # machine each Python start takes seconds)
        db_file = tmp / "host.db"
        database = {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")}
        db_only = write_config(tmp / "db.yaml", {"database": database})
        with ThreadPoolExecutor(len(SERVICES) + 2) as pool:
            upgrade = pool.submit(cli, "db", "upgrade", "--config", str(db_only))
            mock_start = pool.submit(
                Proc,
                [sys.executable, "-m", "agentrunner_runners.testing.mock_services", "--port", "0"],
                "MOCK_SERVICES_LISTENING",
                None,
                90,
            )
            starts = {name: pool.submit(_start_runner, target) for name, (target, _) in SERVICES.items()}
            mock = mock_start.result()
            procs.append(mock)
            for start in starts.values():
                procs.append(start.result())
            upgraded = upgrade.result()
            assert upgraded.returncode == 0, upgraded.stderr
        base = f"http://127.0.0.1:{mock.value}"
        runners, agents, bindings = [], [], []
        for name, (_, runner_id) in SERVICES.items():
            runners.append({"id": name, "address": starts[name].result().value})
            bad, _ = BAD_CONFIG[name]
            for agent_id, runner_config in (
                (name, good_config(name, base)),
                (f"{name}-bad", {**good_config(name, base), **bad}),
            ):
                agents.append(
                    {
                        "id": agent_id,
                        "runner_id": runner_id,
                        "runner_config": runner_config,
                        "timeout_seconds": 30,
                    }
                )
                bindings.append(
                    {
                        "id": agent_id,
                        "scope": {"type": "conversation", "id": agent_id},
                        "event": "message.*",
                        "target": {"agent": agent_id},
                    }
                )
        config = write_config(
            tmp / "host.yaml",
            {
                "instance_id": "services-host",
                "listen": {"address": "127.0.0.1:0"},
                "database": database,
                "runners": runners,
                "agents": agents,
                "bindings": bindings,
            },
        )
        host = Proc(
            [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
            "AGENTRUNNER_HOST_LISTENING",
            timeout=90,
        )
        procs.append(host)
        yield Stack(host.value, base, db_file)
    finally:
        for proc in reversed(procs):
            proc.kill()


@dataclass
class Outcome:
    run_id: str
    results: list[result_pb2.RunResult]
    finished: host_service_pb2.RunFinished

    def of(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.results if r.WhichOneof("payload") == kind]

    @property
    def status(self) -> str:
        return common_pb2.RunStatus.Name(self.finished.status)

    @property
    def answer(self) -> str:
        done = self.of("run_completed")
        if done and done[0].message.content:
            return done[0].message.content
        messages = self.of("message_completed")
        return messages[-1].message.content if messages else ""


async def ask(stack: Stack, text: str, conversation: str, **kwargs: Any) -> Outcome:
    req = run_request(text, conversation_id=conversation, **kwargs)
    async with grpc.aio.insecure_channel(stack.address) as channel:
        updates = [u async for u in host_service_pb2_grpc.HostServiceStub(channel).Run(req, timeout=60)]
    assert updates[-1].HasField("finished"), updates[-1]
    results = [u.result for u in updates if u.HasField("result")]
    return Outcome(updates[0].accepted.run_id, results, updates[-1].finished)


def field(body: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_two_turns_reuse_the_external_conversation(stack: Stack, name: str) -> None:
    conversation = name
    first = await ask(stack, "first turn: Grüße 😀", conversation)
    assert first.status == "RUN_STATUS_COMPLETED", first.results
    assert "first turn: Grüße 😀" in first.answer
    assert len(first.of("message_delta")) > 2  # streamed through the host as it arrived
    second = await ask(stack, "second turn", conversation)
    assert second.status == "RUN_STATUS_COMPLETED", second.results
    suffix, carried = CHAT[name]
    sent = [r for r in stack.requests(name) if r["path"].endswith(suffix)][-2:]
    first_id, second_id = (carried(r) for r in sent)
    assert second_id  # the second turn continues the first's conversation
    assert first_id == (second_id if name in RUNNER_MINTED else "")


async def test_dify_turn_through_the_host_cli(stack: Stack) -> None:
    out = await asyncio.to_thread(
        lambda: __import__("subprocess").run(
            [*CLI, "run", "hello from the CLI", "--host", stack.address, "--conversation", "dify"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
        )
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Dify heard: hello from the CLI" in out.stdout


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_cancel_closes_the_upstream_request(stack: Stack, name: str) -> None:
    req = run_request("mock:slow wait for it", conversation_id=name)
    before = len(stack.requests(name))
    async with grpc.aio.insecure_channel(stack.address) as channel:
        call = host_service_pb2_grpc.HostServiceStub(channel).Run(req, timeout=60)
        async for update in call:
            if update.HasField("result") and update.result.HasField("message_delta"):
                break  # the service is answering; the user gives up
        call.cancel()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        record = stack.requests(name)[before:]
        if record and record[-1]["disconnected"]:
            break
        await asyncio.sleep(0.1)
    assert record and record[-1]["scenario"] == "slow" and record[-1]["disconnected"], record


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_bad_config_fails_naming_the_field(stack: Stack, name: str) -> None:
    out = await ask(stack, "hello", f"{name}-bad")
    [failed] = out.of("run_failed")
    assert failed.code == "runner.config_invalid"
    assert json_format.MessageToDict(failed.details)["field"] == BAD_CONFIG[name][1]


async def test_n8n_acknowledgement_completes_without_an_answer(stack: Stack) -> None:
    out = await ask(stack, "mock:ack start the nightly job", "n8n")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    [done] = out.of("run_completed")
    assert done.finish_reason == "acknowledged" and not done.HasField("message")
    assert out.of("message_completed") == [] and out.of("message_delta") == []


@pytest.mark.parametrize(
    ("name", "upload_path"),
    [("dify", "/files/upload"), ("coze", "/v1/files/upload"), ("tbox", "/api/file/upload")],
)
async def test_an_image_attachment_reaches_the_service_as_an_upload(
    stack: Stack, name: str, upload_path: str
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    image = {"name": "pic.png", "mime_type": "image/png", "content": png}
    out = await ask(stack, "what is in the picture?", name, attachments=[image])
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert out.answer.endswith(("(with 1 file(s))", "(with 1 image(s))")), out.answer
    upload = [r for r in stack.requests(name) if r["path"].endswith(upload_path)][-1]
    assert upload["files"][0]["size"] == len(png) and upload["files"][0]["content_type"] == "image/png"
