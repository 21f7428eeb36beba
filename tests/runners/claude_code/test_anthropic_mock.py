"""The Anthropic Messages API mock's own contract (the real Claude Code CLI drives it in `tests/real`):
run as a process (`make demo-claude`'s other way in), SSE events in the documented order, scripted tool
loops, error bodies."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import httpx_sse
import pytest

from tests.integration.conftest import ROOT


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrunner_runners.testing.anthropic_mock", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, port = proc.stdout.readline().split()
        assert ready == "ANTHROPIC_MOCK_LISTENING"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _stream(base_url: str, messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    body = {
        "model": "claude-x",
        "max_tokens": 100,
        "stream": True,
        "messages": messages,
        "tools": [{"name": "T"}],
    }
    with (
        httpx.Client() as client,
        httpx_sse.connect_sse(client, "POST", f"{base_url}/v1/messages", json=body) as source,
    ):
        return [(event.event, json.loads(event.data)) for event in source.iter_sse()]


def test_an_echo_streams_the_documented_event_order(base_url: str) -> None:
    events = _stream(base_url, [{"role": "user", "content": "héllo there"}])
    kinds = [kind for kind, _ in events]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta")
    assert text == "Mock heard: héllo there (turn 1)"
    assert (
        events[-2][1]["delta"]["stop_reason"] == "end_turn" and events[-2][1]["usage"]["output_tokens"] == 20
    )


def test_a_script_steps_through_a_tool_loop(base_url: str) -> None:
    steps = [
        {"tool_use": {"name": "Lookup", "input": {"q": "déjà vu"}}},
        {"text": "found: {tool_result}"},
    ]
    httpx.post(f"{base_url}/_admin/script", json={"match": "look it up", "steps": steps}).raise_for_status()
    first = _stream(base_url, [{"role": "user", "content": [{"type": "text", "text": "look it up"}]}])
    start = next(d for k, d in first if k == "content_block_start")["content_block"]
    raw = "".join(d["delta"]["partial_json"] for k, d in first if k == "content_block_delta")
    assert start["name"] == "Lookup" and json.loads(raw) == {"q": "déjà vu"}
    assert first[-2][1]["delta"]["stop_reason"] == "tool_use"
    result = {"type": "tool_result", "tool_use_id": start["id"], "content": "42"}
    second = _stream(
        base_url,
        [
            {"role": "user", "content": "look it up"},
            {"role": "assistant", "content": [{**start, "input": {"q": "déjà vu"}}]},
            {"role": "user", "content": [result]},
        ],
    )
    assert "".join(d["delta"]["text"] for k, d in second if k == "content_block_delta") == "found: 42"


def test_errors_have_the_documented_shape(base_url: str) -> None:
    steps = [{"status": 529}]
    httpx.post(f"{base_url}/_admin/script", json={"match": "overload me", "steps": steps}).raise_for_status()
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "overload me"}],
        "tools": [{}],
    }
    response = httpx.post(f"{base_url}/v1/messages", json=body)
    assert response.status_code == 529
    assert response.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    missing = httpx.get(f"{base_url}/v1/no/such/path")
    assert missing.status_code == 404 and missing.json()["type"] == "error"
    logged = httpx.get(f"{base_url}/_admin/requests").json()
    assert any(r["path"] == "/v1/no/such/path" for r in logged)
