"""A tiny SDK runner for the integration suite: it calls the proxy RPCs its input asks for, through
`ctx.api` (raw `call`/`stream`, so the host's own authorization is what answers), and replies with a
JSON report of every outcome plus what it saw in its context.

Input: a JSON list of steps `{"rpc": "ListHistory", "req": {...}, "take": N}`; string values
`$latest_cursor`, `$event_id`, `$attachment0` and `$run_id` are replaced from the context. `take` reads
only the first N messages of a server-streaming RPC and then cancels it. Input `{"results": [...]}`
(RunResult JSON) makes it yield exactly those results instead. Served with
`python -m agentrunner serve tests.integration.probe_runner:ProbeRunner --port 0`. An `UploadArtifact`
step takes `{"rpc": "UploadArtifact", "header": {...}, "body_b64": "...", "chunk": N}` and streams the
header and the body in `chunk`-byte pieces as given (no size or digest of its own).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import grpc
from google.protobuf import json_format

from agentrunner import RunContext, Runner, results
from agentrunner.errors import AgentRunnerError, from_rpc_error
from agentrunner.v1 import proxy_service_pb2, result_pb2

STREAMING = {"StreamModel", "DownloadArtifact"}


class ProbeRunner(Runner):
    manifest: ClassVar[dict[str, Any]] = {
        "id": "plugin:test/probe/default",
        "label": "Probe",
        "description": "Calls proxy RPCs on request (integration tests).",
        "capabilities": ["streaming", "interrupt", "tool_calling"],
        "permissions": {
            "models": ["invoke", "stream", "rerank", "count_tokens"],
            "tools": ["detail", "call"],
            "knowledge_bases": ["list", "retrieve"],
            "history": ["page", "search"],
            "events": ["get", "page"],
            "artifacts": ["metadata", "read", "write"],
            "state": ["conversation", "actor"],
            "storage": ["plugin"],
            "runs": ["get", "list", "events_page"],
            "prompt": True,
        },
        "config": [
            {"name": "model", "type": "llm-model-selector", "label": "Model"},
            {"name": "reranker", "type": "rerank-model-selector", "label": "Reranker"},
            {"name": "kbs", "type": "knowledge-base-multi-selector", "label": "Knowledge bases"},
        ],
    }

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        raw = ctx.raw
        subst = {
            "$latest_cursor": raw.context.latest_cursor,
            "$event_id": raw.event.event_id,
            "$run_id": raw.run_id,
            "$attachment0": raw.input.attachments[0].artifact_id if raw.input.attachments else "",
        }
        steps = json.loads(ctx.input.to_text() or "[]")
        if isinstance(steps, dict):
            for item in steps["results"]:
                yield json_format.ParseDict(item, result_pb2.RunResult())
            return
        report: dict[str, Any] = {"ctx": _context_info(raw), "steps": []}
        for step in steps:
            report["steps"].append(await _step(ctx, step, subst))
        yield results.completed(json.dumps(report))


def _context_info(raw: Any) -> dict[str, Any]:
    access = raw.context
    return {
        "latest_cursor": access.latest_cursor,
        "has_history_before": access.has_history_before,
        "transcript_seq": access.transcript_seq if access.HasField("transcript_seq") else None,
        "event_seq": access.event_seq if access.HasField("event_seq") else None,
        "attachments": [json_format.MessageToDict(a) for a in raw.input.attachments],
        "state": json_format.MessageToDict(raw.state),
        "models": {m.model_id: sorted(m.operations) for m in raw.resources.models},
        "tools": {
            t.tool_name: sorted(t.parameters.fields.get("properties", {}).struct_value.fields)
            for t in raw.resources.tools
        },
        "kbs": sorted(k.kb_id for k in raw.resources.knowledge_bases),
    }


def _replace(value: Any, subst: dict[str, str]) -> Any:
    if isinstance(value, str):
        return subst.get(value, value)
    if isinstance(value, dict):
        return {k: _replace(v, subst) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, subst) for v in value]
    return value


async def _step(ctx: RunContext, step: dict[str, Any], subst: dict[str, str]) -> dict[str, Any]:
    rpc = step["rpc"]
    if rpc == "UploadArtifact":
        return await _upload(ctx, step)
    request = json_format.ParseDict(
        _replace(step.get("req", {}), subst), getattr(proxy_service_pb2, f"{rpc}Request")()
    )
    try:
        if rpc in STREAMING:
            items = []
            async for item in ctx.api.stream(rpc, request):
                items.append(json_format.MessageToDict(item))
                if step.get("take") and len(items) >= step["take"]:
                    break
            return {"rpc": rpc, "ok": items}
        response = await ctx.api.call(rpc, request)
        return {"rpc": rpc, "ok": json_format.MessageToDict(response)}
    except AgentRunnerError as exc:
        return {
            "rpc": rpc,
            "error": {"code": exc.status_code.name, "reason": exc.reason, "message": exc.message},
        }


async def _upload(ctx: RunContext, step: dict[str, Any]) -> dict[str, Any]:
    """A raw client-streamed upload (the SDK's `upload_artifact` would compute size and digest itself)."""
    import base64

    header = json_format.ParseDict(step.get("header", {}), proxy_service_pb2.UploadArtifactHeader())
    body = base64.b64decode(step.get("body_b64", ""))
    size = int(step.get("chunk", 65536))

    async def requests() -> AsyncIterator[proxy_service_pb2.UploadArtifactRequest]:
        yield proxy_service_pb2.UploadArtifactRequest(header=header)
        for i in range(0, len(body), size):
            yield proxy_service_pb2.UploadArtifactRequest(chunk=body[i : i + size])

    try:
        response = await ctx.api.stub.UploadArtifact(requests(), timeout=30, metadata=ctx.api.metadata())
        return {"rpc": "UploadArtifact", "ok": json_format.MessageToDict(response)}
    except grpc.RpcError as exc:
        err = from_rpc_error(exc)
        return {
            "rpc": "UploadArtifact",
            "error": {"code": err.status_code.name, "reason": err.reason, "message": err.message},
        }
