"""Fixtures and builders for the local-agent suite: a host double per test and scripted answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest_asyncio

from agentrunner.testing import HostDouble, make_context
from agentrunner.v1 import common_pb2, context_pb2
from agentrunner_runners.local_agent import LocalAgentRunner

PROMPT = [{"role": "system", "content": "You are Bob the test agent. PROMPT-MARKER-7"}]


@pytest_asyncio.fixture
async def host() -> AsyncIterator[HostDouble]:
    async with HostDouble(heartbeat_interval=0.1) as double:
        yield double


def model(model_id: str = "m1", *, vision: bool = False, window: int = 0, ops: tuple[str, ...] = ()) -> Any:
    return context_pb2.ModelResource(
        model_id=model_id,
        model_type="llm",
        provider="test",
        vision=vision,
        context_window_tokens=window,
        operations=list(ops),
    )


def answer(
    text: str = "",
    *,
    calls: Sequence[tuple[str, dict[str, Any]]] = (),
    usage: tuple[int, int] | None = None,
    call_ids: list[str] | None = None,
) -> dict[str, Any]:
    """An InvokeModelResponse as JSON: text and/or tool calls `(name, args)`."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": (call_ids[i] if call_ids else f"c{i}"), "name": n, "arguments_json": json.dumps(a)}
            for i, (n, a) in enumerate(calls)
        ]
    out: dict[str, Any] = {"message": message, "finish_reason": "tool_calls" if calls else "stop"}
    if usage:
        out["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return out


def context(text: str = "hello", *, config: dict[str, Any] | None = None, models: Any = ("m1",), **kw: Any):
    """A RunContext for the local agent with a model and the bound prompt (override with `config`)."""
    cfg = {"model": "m1", "prompt": PROMPT}
    cfg.update(config or {})
    resolved = [model(m) if isinstance(m, str) else m for m in models]
    kw.setdefault("streaming", False)
    return make_context(text, manifest=LocalAgentRunner.get_manifest(), config=cfg, models=resolved, **kw)


def texts(message: common_pb2.ModelMessage) -> str:
    """Everything a model message says in text."""
    parts = [message.content] + [c.text for c in message.contents if c.WhichOneof("kind") == "text"]
    return "\n".join(p for p in parts if p)


def item(seq: int, role: str, content: str, **kw: Any) -> dict[str, Any]:
    """A TranscriptItem as JSON."""
    return {
        "transcript_id": f"t{seq}",
        "seq": seq,
        "role": role,
        "item_type": "message",
        "content": content,
        "cursor": f"cur{seq}",
        "event_id": f"e{seq}",
        **kw,
    }
