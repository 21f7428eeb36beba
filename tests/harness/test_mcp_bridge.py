"""The per-run LangBot MCP bridge: both transports, tools forwarded with the run token, refusals
passed through, a wrong bearer token refused, nothing left running after the run."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import json
import os
import sys
from typing import Any

import httpx
import pytest

from agentrunner import Runner, results
from agentrunner.harness import McpBridge
from agentrunner.protocol import RUN_TOKEN_HEADER
from agentrunner.testing import HostDouble


async def _client_call(config: dict[str, Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from mcp import ClientSession

    async def use(session: ClientSession) -> dict[str, Any]:
        await session.initialize()
        names = [t.name for t in (await session.list_tools()).tools]
        result = await session.call_tool(tool, arguments)
        return {
            "tools": names,
            "is_error": bool(result.is_error),
            "text": "".join(getattr(c, "text", "") for c in result.content),
        }

    if config["type"] == "http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        async with (
            create_mcp_http_client(headers=config["headers"]) as client,
            streamable_http_client(config["url"], http_client=client) as (r, w),
            ClientSession(r, w) as s,
        ):
            return await use(s)
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=config["command"], args=config["args"], env={**os.environ, **config["env"]}
    )
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        return await use(s)


class BridgeUser(Runner):
    manifest = {
        "id": "plugin:test/bridge/default",
        "capabilities": ["tool_calling"],
        "permissions": {"tools": ["call"], "history": ["page"], "knowledge_bases": ["retrieve"]},
    }

    async def run(self, ctx):
        plan = json.loads(ctx.input.text)
        report: dict[str, Any] = {}
        async with McpBridge(ctx) as bridge:
            config = (
                bridge.stdio_server_config() if plan["transport"] == "stdio" else bridge.http_server_config()
            )
            for name, (tool, args) in plan["calls"].items():
                report[name] = await _client_call(config, tool, args)
            async with httpx.AsyncClient() as http:
                report["no_token"] = (await http.post(bridge.url, json={})).status_code
                report["bad_token"] = (
                    await http.post(bridge.url, json={}, headers={"Authorization": "Bearer nope"})
                ).status_code
            report["url"] = bridge.url
        yield results.completed(json.dumps(report))


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_the_bridge_forwards_tools_over_both_transports(transport: str) -> None:
    plan = {
        "transport": transport,
        "calls": {
            "granted": ["langbot_call_tool", {"tool_name": "add", "arguments": {"a": 1, "b": 2}}],
            "refused": ["langbot_call_tool", {"tool_name": "rm_rf", "arguments": {}}],
            "history": ["langbot_history_page", {"limit": 5}],
            "bad_args": ["langbot_history_page", {"limit": "many"}],
        },
    }

    def call_tool(req: Any, call: Any) -> Any:
        if req.tool_name != "add":
            from agentrunner.errors import UnauthorizedError

            raise UnauthorizedError(f"tool {req.tool_name} is not authorized for this run")
        return {"contents": [{"text": "3"}]}

    async with HostDouble() as host:
        host.on("CallTool", call_tool)
        host.on("ListHistory", {"items": [{"role": "user", "content": "earlier"}], "has_more": False})
        out = await host.run(BridgeUser, json.dumps(plan), tools=["add"], timeout=100, deadline=100)
        report = json.loads(out.text)
        calls = host.calls_to("CallTool")
    assert report["granted"] == {
        "tools": report["granted"]["tools"],
        "is_error": False,
        "text": report["granted"]["text"],
    }
    assert set(report["granted"]["tools"]) == {
        "langbot_get_current_event",
        "langbot_history_page",
        "langbot_call_tool",
    }
    assert json.loads(report["granted"]["text"])["text"] == "3"
    assert report["refused"]["is_error"] and "UNAUTHORIZED" in report["refused"]["text"]
    assert json.loads(report["history"]["text"])["items"][0]["content"] == "earlier"
    assert report["bad_args"]["is_error"] and "limit" in report["bad_args"]["text"]
    assert (report["no_token"], report["bad_token"]) == (401, 401)
    # both tool calls reached the host (the ungranted one too: the host refuses and audits), with the run token
    assert [c.request.tool_name for c in calls] == ["add", "rm_rf"]
    assert all(c.metadata[RUN_TOKEN_HEADER] == host.tokens[out.run_id] for c in calls)
    # the run's stream shows the bridge's tool calls, paired
    assert out.types.count("tool.call.started") == 2 and out.types.count("tool.call.completed") == 2
    refused = out.of_type("tool.call.completed")[1].tool_call_completed
    assert refused.error_code == "unauthorized"
    # the bridge is gone with the run
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(report["url"], json={})


@pytest.mark.asyncio
async def test_a_run_without_tools_or_history_is_offered_only_the_event_tool() -> None:
    class Lister(Runner):
        manifest = {"id": "plugin:test/lister/default"}

        async def run(self, ctx):
            async with McpBridge(ctx) as bridge:
                yield results.completed(json.dumps(bridge.tool_names))

    async with HostDouble() as host:
        out = await host.run(Lister, "x")
    assert json.loads(out.text) == ["langbot_get_current_event"]


def test_the_stdio_proxy_refuses_to_start_without_its_environment() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "agentrunner.harness.mcp_proxy"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=60,
    )
    assert done.returncode == 2 and "LANGBOT_MCP_URL" in done.stderr
