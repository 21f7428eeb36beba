"""Tool RPCs end to end: handler table -> ToolRegistry -> real MCP servers (stdio and streamable HTTP
processes written with the `mcp` SDK) and the host-native tools."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from google.protobuf import json_format, struct_pb2

from agentrunner.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    RuntimeFailureError,
    UnauthorizedError,
)
from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.capabilities.mcp_tools import McpServerConfig
from agentrunner_host.capabilities.models import ModelRegistry
from agentrunner_host.capabilities.tools import ToolRegistry, ToolsConfig
from agentrunner_host.proxy.capabilities import Backends, project_resources
from tests.capabilities.conftest import (
    RecordingArtifactSink,
    build_tools,
    make_proxy,
    make_snapshot,
    mcp_stdio_config,
    start_process,
    stop_process,
)
from tests.mocks.openai_server import MockOpenAIServer

# One set of MCP server processes for the whole module: starting Python processes dominates the cost.
pytestmark = pytest.mark.asyncio(loop_scope="module")
NO_MODELS = ModelRegistry([])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def openai_mock() -> AsyncIterator[MockOpenAIServer]:
    async with MockOpenAIServer() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mcp_http_url() -> AsyncIterator[str]:
    proc, port = await start_process("tests.mocks.mcp_http_server", "MOCK_MCP_HTTP_LISTENING")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await stop_process(proc)


@pytest.fixture(scope="module")
def artifact_sink() -> RecordingArtifactSink:
    return RecordingArtifactSink()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(mcp_http_url, openai_mock, artifact_sink) -> AsyncIterator[ToolRegistry]:
    registry = build_tools(mcp_http_url, openai_mock.base_url, artifact_sink)
    await registry.start()
    yield registry
    await registry.close()


BOTH = frozenset({"detail", "call"})


def params(**kwargs: Any) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(kwargs)
    return s


def grants(*names: str, ops: frozenset[str] = BOTH):
    return make_snapshot(tools={n: ops for n in names})


def text_of(response: pb.CallToolResponse) -> str:
    return "".join(c.text for c in response.contents if c.WhichOneof("kind") == "text")


async def test_tools_listed_from_both_servers_and_native_with_schemas(tools) -> None:
    names = {t.name: t for t in tools.list_tools()}
    for name in ("echo", "add", "slow", "huge", "fail", "web_echo", "web_add", "current_time", "fetch_url"):
        assert name in names, name
    assert names["add"].tool_type == "mcp" and names["current_time"].tool_type == "native"
    assert names["add"].parameters["properties"].keys() == {"a", "b"}
    resources = project_resources(
        Backends(NO_MODELS, tools), tools={"add": BOTH, "web_echo": frozenset({"call"}), "nope": BOTH}
    )
    projected = {t.tool_name: t for t in resources.tools}
    assert set(projected) == {"add", "web_echo"}
    schema = json_format.MessageToDict(projected["add"].parameters)
    assert schema["properties"]["a"]["type"] == "integer" and set(schema["required"]) == {"a", "b"}
    assert list(projected["web_echo"].operations) == ["call"]


async def test_get_tool_detail_and_call_over_stdio_and_http(tools) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    snapshot = grants("add", "web_echo")
    detail = await proxy.unary("GetToolDetail", pb.GetToolDetailRequest(tool_name="add"), snapshot)
    assert detail.tool.name == "add" and detail.tool.description == "Adds two integers."
    added = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name="add", parameters=params(a=2, b=40)), snapshot
    )
    assert not added.is_error and text_of(added) == "42"
    echoed = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name="web_echo", parameters=params(text="über")), snapshot
    )
    assert text_of(echoed) == "über"


@pytest.mark.parametrize(
    ("tool", "arguments", "field", "says"),
    [
        ("add", {"a": "two", "b": 2}, "parameters.a", "'two' is not of type 'integer'"),
        ("web_add", {"a": 1}, "parameters.b", "'b' is a required property"),
        ("plan", {"events": [{"name": "standup", "minutes": 15}, {"name": "review", "minutes": "long"}]},
         "parameters.events[1].minutes", "'long' is not of type 'integer'"),
    ],
)  # fmt: skip
async def test_arguments_are_checked_against_the_schema_before_the_call(
    tools, tool, arguments, field, says
) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    with pytest.raises(InvalidArgumentError) as err:
        await proxy.unary("CallTool", pb.CallToolRequest(tool_name=tool, parameters=params(**arguments)),
                          grants(tool))  # fmt: skip
    assert err.value.field == field and says in err.value.message and field in err.value.message
    fixed = {"events": [{"name": "review", "minutes": 30}]} if tool == "plan" else {"a": 1, "b": 2}
    response = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name=tool, parameters=params(**fixed)), grants(tool)
    )
    assert not response.is_error and text_of(response) in ("3", "review (30 min)")


async def test_tool_error_is_a_result_not_a_failure(tools) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    response = await proxy.unary(
        "CallTool",
        pb.CallToolRequest(tool_name="fail", parameters=params(reason="disk full")),
        grants("fail"),
    )
    assert response.is_error and "disk full" in text_of(response)


async def test_tool_timeout_is_deadline_exceeded_and_server_survives(tools) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    snapshot = grants("slow", "web_slow", "echo")
    with pytest.raises(DeadlineExceededError) as err:  # server's call_timeout is 1 s
        await proxy.unary(
            "CallTool", pb.CallToolRequest(tool_name="slow", parameters=params(seconds=5)), snapshot
        )
    assert err.value.retryable
    with pytest.raises(DeadlineExceededError):  # the run deadline clips it further
        await proxy.unary(
            "CallTool",
            pb.CallToolRequest(tool_name="web_slow", parameters=params(seconds=5)),
            snapshot,
            timeout=0.3,
        )
    ok = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name="echo", parameters=params(text="still here")), snapshot
    )
    assert text_of(ok) == "still here"


async def test_ungranted_tool_or_operation_is_unauthorized(tools) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    with pytest.raises(UnauthorizedError):
        await proxy.unary(
            "CallTool", pb.CallToolRequest(tool_name="add", parameters=params(a=1, b=1)), grants("echo")
        )
    with pytest.raises(UnauthorizedError):
        await proxy.unary("CallTool", pb.CallToolRequest(tool_name="add", parameters=params(a=1, b=1)),
                          grants("add", ops=frozenset({"detail"})))  # fmt: skip
    with pytest.raises(UnauthorizedError):
        await proxy.unary(
            "GetToolDetail", pb.GetToolDetailRequest(tool_name="add"), grants("add", ops=frozenset({"call"}))
        )
    with pytest.raises(NotFoundError):  # granted but no such tool on the host
        await proxy.unary("GetToolDetail", pb.GetToolDetailRequest(tool_name="ghost"), grants("ghost"))


async def test_oversized_result_is_cut_and_stored_as_artifact(tools, artifact_sink) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    response = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name="huge", parameters=params(size=50_000)), grants("huge")
    )
    assert response.truncated
    assert len(text_of(response)) < 2200  # cap is 2000 characters plus a short note
    assert response.artifact.artifact_id in text_of(response)
    run_id, data, mime = artifact_sink.stored[response.artifact.artifact_id]
    assert run_id == "run_1" and mime == "application/json"
    whole = json.loads(data)
    assert len(whole["contents"][0]["text"]) == 50_000


async def test_oversized_result_without_sink_is_only_cut(mcp_http_url) -> None:
    registry = ToolRegistry(ToolsConfig(mcp_servers=[McpServerConfig(name="h", transport="streamable-http",
                                                                   url=mcp_http_url)], max_result_chars=100))  # fmt: skip
    await registry.start()
    try:
        outcome = await registry.call("huge", {"size": 1000}, run_id="r")
        assert outcome.truncated and outcome.artifact is None
        assert outcome.contents[0].text == ("0123456789" * 10)
    finally:
        await registry.close()


async def test_native_tools_current_time_and_allow_listed_fetch(tools, openai_mock) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    snapshot = grants("current_time", "fetch_url")
    now = await proxy.unary(
        "CallTool",
        pb.CallToolRequest(tool_name="current_time", parameters=params(timezone="Asia/Shanghai")),
        snapshot,
    )
    assert text_of(now).endswith("+08:00") and now.structured["timezone"] == "Asia/Shanghai"
    fetched = await proxy.unary(
        "CallTool",
        pb.CallToolRequest(tool_name="fetch_url", parameters=params(url=f"{openai_mock.base_url}/models")),
        snapshot,
    )
    assert not fetched.is_error and '"mock-chat"' in text_of(fetched)
    refused = await proxy.unary("CallTool", pb.CallToolRequest(tool_name="fetch_url",
                                parameters=params(url=f"{openai_mock.base_url}/embeddings")), snapshot)  # fmt: skip
    assert refused.is_error and "allow-list" in text_of(refused)
    assert all(r["path"] != "/v1/embeddings" for r in openai_mock.state.requests)


async def test_dead_server_loses_only_its_tools_and_comes_back_on_refresh(tools) -> None:
    proxy = make_proxy(NO_MODELS, tools, None)
    snapshot = grants("crash", "echo", "web_echo")
    with pytest.raises(RuntimeFailureError) as err:
        await proxy.unary("CallTool", pb.CallToolRequest(tool_name="crash"), snapshot)
    assert err.value.retryable
    names = {t.name for t in tools.list_tools()}
    assert "echo" not in names and "crash" not in names
    assert {"web_echo", "current_time"} <= names
    with pytest.raises(NotFoundError):
        await proxy.unary(
            "CallTool", pb.CallToolRequest(tool_name="echo", parameters=params(text="x")), snapshot
        )
    ok = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name="web_echo", parameters=params(text="x")), snapshot
    )
    assert text_of(ok) == "x"
    await tools.refresh()  # reconnects the stdio server (a fresh process)
    again = await proxy.unary(
        "CallTool", pb.CallToolRequest(tool_name="echo", parameters=params(text="back")), snapshot
    )
    assert text_of(again) == "back"


async def test_server_that_fails_to_start_is_left_out() -> None:
    registry = ToolRegistry(ToolsConfig(mcp_servers=[
        McpServerConfig(name="bad", transport="stdio", command="/nonexistent/mcp-server", startup_timeout=3),
        mcp_stdio_config(name="good"),
    ]))  # fmt: skip
    await registry.start()
    try:
        names = {t.name for t in registry.list_tools()}
        assert "echo" in names and "current_time" in names
    finally:
        await registry.close()
