"""Fixtures of the capability suite: real mock servers and a proxy front that calls the handler table.

`CapabilityProxy` is the one seam tests talk through: today it calls the handlers with a real
`ProxyCall`; once the lead wires the handlers into the gRPC servicer, a variant that sends the same
requests over a channel can replace the `proxy` fixture without touching the tests.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agentrunner.v1 import common_pb2
from agentrunner_host.capabilities.knowledge import KnowledgeService, create_knowledge_schema
from agentrunner_host.capabilities.mcp_tools import McpServerConfig
from agentrunner_host.capabilities.models import ModelConfig, ModelRegistry
from agentrunner_host.capabilities.native_tools import NativeToolsConfig
from agentrunner_host.capabilities.retry import RetryConfig
from agentrunner_host.capabilities.tools import ToolRegistry, ToolsConfig
from agentrunner_host.ports import AuthorizationSnapshot, RunSession
from agentrunner_host.proxy.api import ProxyCall
from agentrunner_host.proxy.capabilities import capability_handlers
from agentrunner_host.store import sqlite_vec
from tests.mocks.openai_server import MockOpenAIServer

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
ALL_MODEL_OPS = frozenset({"invoke", "stream", "rerank", "count_tokens"})
#: the default policy's shape with short waits (tests that measure waits set their own)
FAST_RETRY = RetryConfig(initial_backoff=0.02, max_backoff=0.1, budget_tokens=1000)


class RecordingUsageSink:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, common_pb2.Usage, int]] = []

    async def record_model_usage(
        self, run_id: str, model_id: str, usage: common_pb2.Usage, calls: int
    ) -> None:
        self.records.append((run_id, model_id, usage, calls))


class RecordingArtifactSink:
    def __init__(self) -> None:
        self.stored: dict[str, tuple[str, bytes, str]] = {}

    async def store_tool_result(
        self, run_id: str, name: str, data: bytes, mime_type: str
    ) -> common_pb2.ArtifactRef:
        artifact_id = f"art_{len(self.stored) + 1}"
        self.stored[artifact_id] = (run_id, data, mime_type)
        return common_pb2.ArtifactRef(
            artifact_id=artifact_id, mime_type=mime_type, size_bytes=len(data), name=name
        )


def make_snapshot(
    *,
    models: Mapping[str, frozenset[str]] | None = None,
    tools: Mapping[str, frozenset[str]] | None = None,
    knowledge_bases: Mapping[str, frozenset[str]] | None = None,
    run_id: str = "run_1",
) -> AuthorizationSnapshot:
    return AuthorizationSnapshot(
        run_id=run_id,
        runner_id="runner_1",
        agent_id="agent_1",
        binding_id="binding_1",
        models=dict(models or {}),
        tools=dict(tools or {}),
        knowledge_bases=dict(knowledge_bases or {}),
    )


class CapabilityProxy:
    """Calls a handler table the way the proxy servicer does: one authenticated ProxyCall per call."""

    def __init__(self, handlers: Mapping[str, Any]) -> None:
        self.handlers = handlers

    def _call(self, method: str, snapshot: AuthorizationSnapshot, timeout: float | None) -> ProxyCall:
        session = RunSession(
            run_id=snapshot.run_id,
            token_hash="x",
            runner_id=snapshot.runner_id,
            expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5),
            snapshot=snapshot,
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        return ProxyCall(session=session, method=method, deadline=deadline)

    async def unary(
        self,
        method: str,
        request: Any,
        snapshot: AuthorizationSnapshot,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        return await self.handlers[method](self._call(method, snapshot, timeout), request)

    def stream(
        self, method: str, request: Any, snapshot: AuthorizationSnapshot, timeout: float | None = None
    ) -> AsyncIterator[Any]:
        return self.handlers[method](self._call(method, snapshot, timeout), request)


@pytest_asyncio.fixture
async def openai_mock() -> AsyncIterator[MockOpenAIServer]:
    async with MockOpenAIServer() as server:
        yield server


@pytest.fixture
def usage_sink() -> RecordingUsageSink:
    return RecordingUsageSink()


@pytest_asyncio.fixture
async def models(
    openai_mock: MockOpenAIServer, usage_sink: RecordingUsageSink
) -> AsyncIterator[ModelRegistry]:
    base, fast = openai_mock.base_url, FAST_RETRY
    registry = ModelRegistry(
        [
            ModelConfig(
                id="chat",
                base_url=base,
                model="mock-chat",
                api_key_env="MOCK_KEY",
                vision=True,
                context_window=128000,
                extra_args={"temperature": 0.1, "max_tokens": 100},
                retry=fast,
            ),
            ModelConfig(id="chat-text", base_url=base, model="mock-text", api_key_env="MOCK_KEY", retry=fast),
            ModelConfig(id="chat-fast-timeout", base_url=base, model="mock-chat", timeout=0.3, retry=fast),
            ModelConfig(id="embed", kind="openai-embedding", base_url=base, model="mock-embed", retry=fast),
            ModelConfig(id="rerank", kind="rerank", base_url=base, model="mock-rerank", retry=fast),
        ],
        usage_sink=usage_sink,
        environ={"MOCK_KEY": "sk-test-key"},
    )
    yield registry
    await registry.aclose()


def mcp_stdio_config(name: str = "stdio", **kwargs: Any) -> McpServerConfig:
    return McpServerConfig(
        name=name,
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.mocks.mcp_stdio_server"],
        cwd=str(REPO_ROOT),
        **kwargs,
    )


async def start_process(module: str, ready_prefix: str) -> tuple[asyncio.subprocess.Process, int]:
    """Starts `python -m module --port 0` and returns it with the port it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, "--port", "0", cwd=str(REPO_ROOT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    async with asyncio.timeout(20):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError(f"{module} exited before listening")
            if line.startswith(ready_prefix):
                return proc, int(line.split()[1])


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest_asyncio.fixture
async def mcp_http_url() -> AsyncIterator[str]:
    proc, port = await start_process("tests.mocks.mcp_http_server", "MOCK_MCP_HTTP_LISTENING")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await stop_process(proc)


@pytest.fixture
def artifact_sink() -> RecordingArtifactSink:
    return RecordingArtifactSink()


def build_tools(
    mcp_http_url: str, openai_base_url: str, artifact_sink: RecordingArtifactSink
) -> ToolRegistry:
    """Both mock MCP servers (stdio spawned by the registry, HTTP already running) plus native tools."""
    return ToolRegistry(
        ToolsConfig(
            mcp_servers=[
                mcp_stdio_config(call_timeout=1.0),
                McpServerConfig(
                    name="http",
                    transport="streamable-http",
                    url=mcp_http_url,
                    tool_prefix="web_",
                    call_timeout=1.0,
                ),
            ],
            native=NativeToolsConfig(fetch_url_allow=[f"{openai_base_url}/models"]),
            max_result_chars=2000,
        ),
        artifact_sink=artifact_sink,
    )


@pytest_asyncio.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    sqlite_vec.register()  # what `Database` does before its first connection
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'kb.db'}")
    async with engine.begin() as conn:
        await create_knowledge_schema(conn)
    yield engine
    await engine.dispose()


@pytest_asyncio.fixture
async def knowledge(sqlite_engine: AsyncEngine) -> KnowledgeService:
    return KnowledgeService(sqlite_engine, [])


def make_proxy(
    models: ModelRegistry, tools: ToolRegistry | None, knowledge: KnowledgeService | None
) -> CapabilityProxy:
    return CapabilityProxy(capability_handlers(models, tools, knowledge))  # type: ignore[arg-type]
