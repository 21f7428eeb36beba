"""Every model, tool and knowledge RPC through the real host's ProxyService (CLI `serve`), against the
OpenAI-compatible mock, both MCP servers and a knowledge base ingested with `agentrunner-host kb ingest`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from tests.integration.conftest import (
    CORPUS,
    PROBE_ID,
    ROOT,
    Proc,
    audit_outcomes,
    cli,
    http_json,
    probe,
    start_host,
    write_config,
)

pytestmark = pytest.mark.asyncio
USER = [{"role": "user", "content": "hi there"}]


@pytest.fixture(scope="module")
def cap_host(tmp_path_factory: pytest.TempPathFactory, probe_runner: Proc) -> Iterator[tuple[str, Path, str]]:
    tmp = tmp_path_factory.mktemp("caps")
    openai = Proc([sys.executable, "-m", "tests.mocks.openai_server", "--port", "0"], "MOCK_OPENAI_LISTENING")
    mcp_http = Proc(
        [sys.executable, "-m", "tests.mocks.mcp_http_server", "--port", "0"], "MOCK_MCP_HTTP_LISTENING"
    )
    base = f"http://127.0.0.1:{openai.value}"
    db_file = tmp / "host.db"
    config = write_config(
        tmp / "host.yaml",
        {
            "instance_id": "caps-host",
            "listen": {"address": "127.0.0.1:0"},
            "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
            "runners": [{"id": "probe", "address": probe_runner.value}],
            "models": [
                {"id": "chat", "base_url": f"{base}/v1", "model": "mock-chat", "api_key_env": "MOCK_KEY"},
                {"id": "embed", "kind": "openai-embedding", "base_url": f"{base}/v1", "model": "mock-embed"},
                {"id": "rerank", "kind": "rerank", "base_url": f"{base}/v1", "model": "mock-rerank"},
            ],
            "tools": {
                "mcp_servers": [
                    {
                        "name": "stdio",
                        "transport": "stdio",
                        "command": sys.executable,
                        "args": ["-m", "tests.mocks.mcp_stdio_server"],
                        "cwd": str(ROOT),
                    },
                    {
                        "name": "http",
                        "transport": "streamable-http",
                        "url": f"http://127.0.0.1:{mcp_http.value}/mcp",
                        "tool_prefix": "web_",
                    },
                ],
                "max_result_chars": 500,
            },
            "knowledge_bases": [
                {"id": "docs", "name": "Help center", "embedding_model": "embed"},
                {"id": "other", "name": "Not selected"},
            ],
            "agents": [
                {
                    "id": "probe",
                    "runner_id": PROBE_ID,
                    "runner_config": {"model": "chat", "reranker": "rerank", "kbs": ["docs"]},
                    "resource_policy": {"tools": ["echo", "huge", "web_add", "current_time"]},
                }
            ],
            "bindings": [{"id": "probe", "event": "message.*", "target": {"agent": "probe"}}],
        },
    )
    host = None
    try:
        assert cli("db", "upgrade", "--config", str(config)).returncode == 0
        # the embedding model rate-limits once: the ingest waits as told and completes in one invocation
        http_json(f"{base}/_admin/script?endpoint=embeddings", {"status": 429, "retry_after_ms": 250})
        ingest = cli("kb", "ingest", "docs", str(CORPUS), "--config", str(config))
        assert ingest.returncode == 0 and "12 added" in ingest.stdout, ingest.stdout + ingest.stderr
        embeds = [r["at"] for r in http_json(f"{base}/_admin/requests") if r["endpoint"] == "embeddings"]
        assert len(embeds) >= 2 and embeds[1] - embeds[0] >= 0.25, embeds
        http_json(f"{base}/_admin/reset", {})
        host = start_host(config, env={"MOCK_KEY": "sk-test"})
        yield host.value, db_file, base
    finally:
        for proc in (host, mcp_http, openai):
            if proc is not None:
                proc.kill()


async def test_models_tools_and_knowledge_through_the_host(cap_host: tuple[str, Path, str]) -> None:
    address, db_file, _ = cap_host
    steps = [
        {"rpc": "InvokeModel", "req": {"model_id": "chat", "messages": USER}},
        {"rpc": "StreamModel", "req": {"model_id": "chat", "messages": USER}},
        {"rpc": "RerankDocuments", "req": {"model_id": "rerank", "query": "refund policy",
                                           "documents": ["shipping times", "refund policy for orders"]}},
        {"rpc": "CountTokens", "req": {"model_id": "chat", "messages": USER}},
        {"rpc": "GetToolDetail", "req": {"tool_name": "echo"}},
        {"rpc": "CallTool", "req": {"tool_name": "echo", "parameters": {"text": "ping"}}},
        {"rpc": "CallTool", "req": {"tool_name": "web_add", "parameters": {"a": 2, "b": 3}}},
        {"rpc": "CallTool", "req": {"tool_name": "huge", "parameters": {"size": 5000}}},
        {"rpc": "ListKnowledgeBases", "req": {}},
        {"rpc": "RetrieveKnowledge", "req": {"kb_id": "docs", "query_text": "how do I reset my password", "top_k": 3}},
        # not granted: a model not selected, a tool outside the policy, a knowledge base not selected
        {"rpc": "InvokeModel", "req": {"model_id": "embed", "messages": USER}},
        {"rpc": "CallTool", "req": {"tool_name": "add", "parameters": {"a": 1, "b": 2}}},
        {"rpc": "RetrieveKnowledge", "req": {"kb_id": "other", "query_text": "x"}},
    ]  # fmt: skip
    report, run_id = await probe(address, steps)
    ctx = report["ctx"]
    assert ctx["models"] == {"chat": ["count_tokens", "invoke", "stream"], "rerank": ["rerank"]}
    assert ctx["tools"] == {
        "current_time": ["timezone"],
        "echo": ["text"],
        "huge": ["size"],
        "web_add": ["a", "b"],
    }
    assert ctx["kbs"] == ["docs"]
    out = report["steps"]
    assert out[0]["ok"]["message"]["content"] == "echo: hi there"
    assert "".join(c.get("chunk", {}).get("content", "") for c in out[1]["ok"]) == "echo: hi there"
    assert out[2]["ok"]["results"][0]["index"] == 1
    assert int(out[3]["ok"]["tokens"]) > 0
    assert out[4]["ok"]["tool"]["name"] == "echo"
    assert out[5]["ok"]["contents"][0]["text"] == "ping"
    assert out[6]["ok"]["contents"][0]["text"] == "5"
    huge = out[7]["ok"]
    assert huge["truncated"] and huge["artifact"]["artifactId"]  # stored whole as an artifact of the run
    assert [k["kbId"] for k in out[8]["ok"]["knowledgeBases"]] == ["docs"]
    assert (
        out[9]["ok"]["results"][0]["documentId"].endswith("password-reset.md")
        or "password" in out[9]["ok"]["results"][0]["content"].lower()
    )
    for i in (10, 11, 12):
        assert out[i]["error"]["code"] == "PERMISSION_DENIED", out[i]
    assert audit_outcomes(db_file, run_id, "InvokeModel") == ["OK", "UNAUTHORIZED"]
    assert audit_outcomes(db_file, run_id, "CallTool") == ["OK", "OK", "OK", "UNAUTHORIZED"]
    assert audit_outcomes(db_file, run_id, "RetrieveKnowledge") == ["OK", "UNAUTHORIZED"]
    # per-run model usage and call counts in the run ledger
    async with grpc.aio.insecure_channel(address) as channel:
        run = (
            await host_service_pb2_grpc.HostServiceStub(channel).GetRun(
                host_service_pb2.GetRunRequest(run_id=run_id), timeout=5
            )
        ).run
    model_usage: Any = run.metadata["model_usage"]  # a Struct inside the metadata Struct
    usage = dict(model_usage["chat"])
    assert usage["calls"] == 2 and usage["total_tokens"] > 0
    assert dict(model_usage["rerank"])["calls"] == 1


async def test_cancelling_a_model_stream_closes_the_upstream_request(cap_host: tuple[str, Path, str]) -> None:
    address, _, base = cap_host
    http_json(f"{base}/_admin/reset", {})
    http_json(f"{base}/_admin/script", {"chunks": [f"part{i} " for i in range(50)], "chunk_delay": 0.2})
    report, _ = await probe(
        address, [{"rpc": "StreamModel", "req": {"model_id": "chat", "messages": USER}, "take": 2}]
    )
    assert len(report["steps"][0]["ok"]) == 2
    for _ in range(50):
        streams = http_json(f"{base}/_admin/streams")
        if streams and streams[-1]["closed"]:
            break
        await asyncio.sleep(0.1)
    assert streams[-1]["closed"] and streams[-1]["client_disconnected"], streams
    assert streams[-1]["chunks_sent"] < 50
