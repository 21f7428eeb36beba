"""A harness runner (claude-code, with the bundled fake `claude`) served as a runtime: its MCP bridge
and its proxy calls go to the host address the runtime dialed, never to the `host_api_endpoint` the
host advertises (here an address nothing listens on, so a call sent there would fail)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_runners.testing import install_fake
from agentrunner_runners.testing.fake_claude import MCP_PREFIX
from tests.integration.conftest import audit_outcomes
from tests.runtimes.processes import host_cli, start_host, start_runtime, write_config

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(300)]
CLAUDE = "agentrunner_runners.claude_code:ClaudeCodeRunner"
CLAUDE_ID = "plugin:langbot/claude-code-agent/default"


async def test_the_mcp_bridge_of_a_runtime_calls_the_host_it_dialed(tmp_path: Path) -> None:
    claude = install_fake(tmp_path / "bin", "claude")
    root, db_file = tmp_path / "workspaces", tmp_path / "host.db"
    config = write_config(
        tmp_path / "host.yaml",
        {
            "instance_id": "harness-runtime",
            "listen": {"address": "127.0.0.1:0", "advertise_address": "127.0.0.1:9"},
            "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp_path / "a")},
            "agents": [
                {
                    "id": "claude",
                    "runner_id": CLAUDE_ID,
                    "timeout_seconds": 120,
                    "runner_config": {"command": str(claude), "workspace": str(root)},
                    "resource_policy": {"tools": ["current_time"]},
                }
            ],
            "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "claude"}}],
        },
    )
    assert host_cli("db", "upgrade", "--config", str(config)).returncode == 0
    host, address = start_host(config)
    env = {
        "AGENTRUNNER_HARNESS_ROOTS": str(root),
        "FAKE_CLAUDE_HOME": str(tmp_path / "claude-home"),
        "AGENTRUNNER_HARNESS_ENV_PASSTHROUGH": "FAKE_CLAUDE_HOME",
    }
    runtime = start_runtime(address, "workstation", target=CLAUDE, env=env)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            req = host_service_pb2.HostServiceRunRequest()
            req.event.event_type = "message.received"
            req.event.conversation.conversation_id = "c1"
            req.event.input.text = (
                'mcp langbot langbot_call_tool {"tool_name": "current_time", "arguments": {}}'
            )
            updates = [u async for u in stub.Run(req, timeout=120)]
    finally:
        runtime.stop()
        host.stop()
    answers = [
        u.result.message_completed.message
        for u in updates
        if u.HasField("result")
        and u.result.HasField("message_completed")
        and u.result.message_completed.message.kind != common_pb2.MESSAGE_KIND_PROGRESS
    ]
    assert len(answers) == 1, updates
    called = json.loads(answers[0].content.removeprefix(MCP_PREFIX))
    assert "langbot_call_tool" in called["tools"] and not called["is_error"], called
    assert json.loads(called["text"])["text"]  # the host tool's answer (the current time)
    assert audit_outcomes(db_file, updates[0].accepted.run_id, "CallTool") == ["OK"]
