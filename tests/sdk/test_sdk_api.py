"""`ctx.api` against the host double: every proxy family, metadata, timeouts, typed errors, pre-checks."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

from agentrunner import HostApi, RunContext, Runner, results, tool_text
from agentrunner.api import host_channel
from agentrunner.errors import (
    AgentRunnerError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    RuntimeFailureError,
    UnauthorizedError,
)
from agentrunner.testing import PROXY_METHODS, HostDouble
from agentrunner.v1 import common_pb2, proxy_service_pb2

pytestmark = pytest.mark.asyncio

box: dict[str, Any] = {}


class ApiRunner(Runner):
    manifest = {
        "id": "plugin:test/api/default",
        "label": "api",
        "capabilities": ["tool_calling", "knowledge_retrieval", "steering"],
        "permissions": {
            "models": ["invoke", "stream", "rerank", "count_tokens"],
            "tools": ["detail", "call"],
            "knowledge_bases": ["list", "retrieve"],
            "history": ["page", "search"],
            "events": ["get", "page"],
            "artifacts": ["metadata", "read", "write"],
            "storage": ["plugin", "workspace", "binding"],
            "state": ["conversation", "runner"],
            "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
            "prompt": True,
            "platform_api": ["message.edit", "send_message"],
        },
    }
    script: ClassVar[Callable[[RunContext], Awaitable[Any]]]

    async def run(self, ctx):
        box["ctx"] = ctx
        box["out"] = await ApiRunner.script(ctx)
        yield results.completed()


RESOURCES = {"models": ["m1", "r1"], "tools": ["calc"], "knowledge_bases": ["kb1"]}


async def run_script(host: HostDouble, script: Callable[[RunContext], Awaitable[Any]], **kw: Any) -> Any:
    ApiRunner.script = script
    box.clear()
    args = {**RESOURCES, **kw}
    out = await host.run(ApiRunner, "go", **args)
    assert out.completed, out.failure
    return box["out"]


def _answer_every_family(host: HostDouble) -> None:
    """Scripted answers of every ProxyService method the SDK's API calls."""
    host.on("InvokeModel", {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"})
    host.on(
        "StreamModel",
        [{"chunk": {"content": "a"}}, {"chunk": {"content": "b"}}, {"usage": {"total_tokens": 5}}],
    )
    host.on("RerankDocuments", {"results": [{"index": 1, "relevance_score": 0.9}]})
    host.on("CountTokens", {"tokens": 12, "exact": True})
    host.on("GetToolDetail", {"tool": {"name": "calc", "description": "adds"}})
    host.on("CallTool", lambda req, call: {"contents": [{"text": str(int(req.parameters["a"]) + 1)}]})
    host.on("ListKnowledgeBases", {"knowledge_bases": [{"kb_id": "kb1"}]})
    host.on("RetrieveKnowledge", {"results": [{"content": "chunk", "score": 0.5}]})
    host.on("GetPrompt", {"messages": [{"role": "system", "content": "be nice"}]})
    host.on("ListHistory", {"items": [{"content": "old"}], "has_more": True})
    host.on("SearchHistory", {"items": [{"content": "match"}], "query": "q"})
    host.on("GetEvent", {"event": {"event_id": "e1"}})
    host.on("ListEvents", {"items": [{"event_id": "e1"}, {"event_id": "e2"}]})
    host.on("GetArtifactMetadata", {"artifact": {"ref": {"artifact_id": "a1", "size_bytes": 4}}})
    host.on("ReadArtifact", {"data": "AAE=", "size_bytes": 2})
    host.on("DownloadArtifact", [{"data": "YWI="}, {"data": "Y2Q=", "offset": 2}])
    host.on("GetState", {"found": True, "value": {"n": 2}})
    host.on("DeleteState", {"deleted": True})
    host.on("ListState", {"keys": ["a", "b"]})
    host.on("GetStorage", {"found": True, "value": "eHl6"})
    host.on("DeleteStorage", {"deleted": True})
    host.on("ListStorage", {"keys": ["k"]})
    host.on("PullSteering", {"items": [{"steering_id": "s1", "input": {"text": "more"}}]})
    host.on("RequestPlatformAction", {"result": {"ok": True}})
    host.on("GetRunRecord", {"run": {"run_id": "r0"}})
    host.on("ListRunRecords", {"runs": [{"run_id": "r0"}]})
    host.on("ListRunRecordEvents", {"results": [{"sequence": 1}]})
    host.on("CancelRunRecord", {"run": {"run_id": "r0"}})
    host.on("AppendRunResult", {"result": {"sequence": 7}})
    host.on("FinalizeRunRecord", {"run": {"run_id": "r0"}})


async def _call_every_family(ctx: RunContext) -> dict[str, Any]:
    """Every method of `ctx.api` once (and the two reply helpers), each answer reduced to one value."""
    api = ctx.api
    msgs = [{"role": "user", "content": "hi"}]
    return {
        "invoke": (await api.invoke_model("m1", msgs, extra_args={"temperature": 0})).message.content,
        "stream": [x.chunk.content async for x in api.stream_model("m1", msgs) if x.HasField("chunk")],
        "rerank": (await api.rerank_documents("r1", "q", ["a", "b"])).results[0].index,
        "tokens": (await api.count_tokens("m1", msgs)).tokens,
        "detail": (await api.get_tool_detail("calc")).tool.description,
        "tool": tool_text(await api.call_tool("calc", {"a": 1}, tool_call_id="c1")),
        "kbs": len((await api.list_knowledge_bases()).knowledge_bases),
        "kb": (await api.retrieve_knowledge("kb1", "q", top_k=3)).results[0].content,
        "prompt": (await api.get_prompt()).messages[0].content,
        "history": (await api.list_history(limit=10)).items[0].content,
        "search": (await api.search_history("q")).items[0].content,
        "event": (await api.get_event("e1")).event.event_id,
        "events": len((await api.list_events()).items),
        "artifact": (await api.get_artifact_metadata("a1")).artifact.ref.size_bytes,
        "read": (await api.read_artifact("a1", length=2)).data,
        "download": await api.download_artifact("a1"),
        "upload": (
            await api.upload_artifact(b"x" * 3_000_000, name="big.bin", chunk_size=500_000)
        ).size_bytes,
        "state_get": await api.get_state("conversation", "k"),
        "state_set": await api.set_state("runner", "k", [1, "x"]),  # type: ignore[func-returns-value]  # (None, recorded)
        "state_del": await api.delete_state("conversation", "k"),
        "state_list": list((await api.list_state("conversation", prefix="a")).keys),
        "storage_get": await api.get_storage("plugin", "k"),
        "storage_set": await api.set_storage("workspace", "k", b"v"),  # type: ignore[func-returns-value]
        "storage_del": await api.delete_storage("binding", "k"),
        "storage_list": list((await api.list_storage("plugin")).keys),
        "steering": (await api.pull_steering()).items[0].input.text,
        "action": (await api.request_platform_action("message.edit")).result["ok"],
        "run_get": (await api.get_run_record()).run.run_id,
        "run_list": len((await api.list_run_records()).runs),
        "run_events": (await api.list_run_record_events()).results[0].sequence,
        "run_cancel": (await api.cancel_run_record("r0", reason="x")).run.run_id,
        "run_append": (await api.append_run_result(results.delta("x"))).result.sequence,
        "run_finalize": (
            await api.finalize_run_record(common_pb2.RUN_STATUS_COMPLETED, run_id="r0")
        ).run.run_id,
        "reply": (await ctx.reply("hello")).delivered,
        "send": (await ctx.send_message("group", "g1", "hi all")).delivered,
    }


#: what `_call_every_family` gets back from `_answer_every_family`
EVERY_FAMILY: dict[str, Any] = {
    "invoke": "hi",
    "stream": ["a", "b"],
    "rerank": 1,
    "tokens": 12,
    "detail": "adds",
    "tool": "2",
    "kbs": 1,
    "kb": "chunk",
    "prompt": "be nice",
    "history": "old",
    "search": "match",
    "event": "e1",
    "events": 2,
    "artifact": 4,
    "read": b"\x00\x01",
    "download": b"abcd",
    "upload": 3_000_000,
    "state_get": {"n": 2},
    "state_set": None,
    "state_del": True,
    "state_list": ["a", "b"],
    "storage_get": b"xyz",
    "storage_set": None,
    "storage_del": True,
    "storage_list": ["k"],
    "steering": "more",
    "action": True,
    "run_get": "r0",
    "run_list": 1,
    "run_events": 1,
    "run_cancel": "r0",
    "run_append": 7,
    "run_finalize": "r0",
    "reply": True,
    "send": True,
}


async def test_every_family_round_trips_with_metadata(host: HostDouble) -> None:
    _answer_every_family(host)
    out = await run_script(host, _call_every_family, deadline=20.0)
    assert out == EVERY_FAMILY
    ctx: RunContext = box["ctx"]
    assert {c.method for c in host.calls} == set(PROXY_METHODS)  # every RPC, Control included
    for call in host.calls:
        assert call.metadata["x-agentrunner-run-token"] == host.tokens[ctx.run_id]
        assert call.metadata["x-agentrunner-run-id"] == ctx.run_id
        version, trace_id, span_id, flags = call.metadata["traceparent"].split("-")
        assert (version, trace_id, flags) == ("00", ctx.trace_id, "01") and len(span_id) == 16
        assert call.time_remaining is not None
        assert call.method == "Control" or call.time_remaining <= 20.5
    req = host.calls_to("CallTool")[0].request
    assert isinstance(req, proxy_service_pb2.CallToolRequest) and req.tool_call_id == "c1"
    assert host.calls_to("SetState")[0].request.scope == common_pb2.STATE_SCOPE_RUNNER
    assert host.calls_to("SetStorage")[0].request.value == b"v"
    assert host.calls_to("InvokeModel")[0].request.messages[0].content == "hi"


@pytest.mark.parametrize(
    ("reason", "cls", "retryable"),
    [
        ("UNAUTHORIZED", UnauthorizedError, False),
        ("NOT_FOUND", NotFoundError, False),
        ("DEADLINE_EXCEEDED", DeadlineExceededError, True),
        ("PAYLOAD_TOO_LARGE", PayloadTooLargeError, False),
        ("RATE_LIMITED", RateLimitedError, True),
        ("INVALID_ARGUMENT", InvalidArgumentError, False),
        ("RUNTIME_ERROR", RuntimeFailureError, False),
    ],
)
async def test_error_reasons_arrive_typed(
    host: HostDouble, reason: str, cls: type[AgentRunnerError], retryable: bool
) -> None:
    host.on("CallTool", error=reason, message=f"scripted {reason.lower()}")

    async def script(ctx: RunContext) -> Any:
        try:
            await ctx.api.call_tool("calc", {})
        except Exception as exc:
            return exc
        return None

    exc = await run_script(host, script)
    assert type(exc) is cls
    assert exc.reason == reason and exc.retryable is retryable
    assert exc.message == f"scripted {reason.lower()}"


async def test_stream_errors_arrive_typed(host: HostDouble) -> None:
    host.on("StreamModel", [{"chunk": {"content": "a"}}, RateLimitedError("later")])

    async def script(ctx: RunContext) -> Any:
        got = []
        try:
            async for item in ctx.api.stream_model("m1", [{"role": "user", "content": "x"}]):
                got.append(item.chunk.content)
        except RateLimitedError as exc:
            return got, exc.retryable
        return got, None

    assert await run_script(host, script) == (["a"], True)


async def test_local_prechecks_fail_fast_without_a_call(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> list[str]:
        errors = []
        attempts: list[Callable[[], Awaitable[Any]]] = [
            lambda: ctx.api.invoke_model("unknown-model", []),
            lambda: ctx.api.call_tool("rm-rf"),
            lambda: ctx.api.retrieve_knowledge("kb-other", "q"),
            lambda: ctx.api.get_prompt(),
            lambda: ctx.api.list_history(),
            lambda: ctx.api.get_storage("workspace", "k"),
        ]
        for attempt in attempts:
            try:
                await attempt()
            except UnauthorizedError as exc:
                errors.append(exc.message)
        return errors

    # Resources given, but no pull APIs and no storage granted for this run.
    out = await run_script(
        host, script, apis={"prompt_get": False, "history_page": False}, storage=["plugin"]
    )
    assert len(out) == 6
    assert "unknown-model" in out[0] and "rm-rf" in out[1] and "kb-other" in out[2]
    assert [c.method for c in host.calls if c.method != "Control"] == []


async def test_operation_not_granted_on_a_resource(host: HostDouble) -> None:
    from agentrunner.v1 import context_pb2

    async def script(ctx: RunContext) -> str:
        try:
            await ctx.api.invoke_model("m-rerank-only", [])
        except UnauthorizedError as exc:
            return exc.message
        return ""

    only_rerank = context_pb2.ModelResource(model_id="m-rerank-only", operations=["rerank"])
    message = await run_script(host, script, models=[only_rerank])
    assert "'invoke'" in message
    assert [c.method for c in host.calls if c.method != "Control"] == []


async def test_timeout_is_the_smaller_of_default_and_remaining_deadline(host: HostDouble) -> None:
    async def script(ctx: RunContext) -> None:
        await ctx.api.list_history()  # default 30 s, run deadline ~3 s
        await ctx.api.get_state("conversation", "k")  # default 15 s

    await run_script(host, script, deadline=3.0)
    history, state = [c for c in host.calls if c.method != "Control"]
    assert history.time_remaining is not None and 1.0 < history.time_remaining <= 3.5
    assert state.time_remaining is not None and state.time_remaining <= 3.5

    await run_script(host, script, deadline=60.0)
    history, state = [c for c in host.calls if c.method != "Control"][2:]
    assert history.time_remaining is not None and 20.0 < history.time_remaining <= 30.5
    assert state.time_remaining is not None and 10.0 < state.time_remaining <= 15.5


async def test_expired_deadline_fails_locally_and_channels_are_shared(host: HostDouble) -> None:
    api = HostApi(host.endpoint, run_id="r1", run_token="t", remaining=lambda: -0.5, precheck=False)
    with pytest.raises(DeadlineExceededError):
        await api.list_history()
    assert host.calls == []
    assert host_channel(host.endpoint) is host_channel(host.endpoint)


async def test_wrong_run_token_is_rejected_by_the_host_double(host: HostDouble) -> None:
    from agentrunner.errors import RunTokenInvalidError

    api = HostApi(host.endpoint, run_id="r1", run_token="forged", precheck=False)
    with pytest.raises(RunTokenInvalidError):
        await api.get_prompt()


async def test_retry_info_travels_with_the_error() -> None:
    from google.rpc import error_details_pb2

    status = RateLimitedError("slow down", retry_delay=1.5).to_status()
    kinds = [d.TypeName() for d in status.details]
    assert kinds == ["google.rpc.ErrorInfo", "google.rpc.RetryInfo"]
    retry = error_details_pb2.RetryInfo()
    status.details[1].Unpack(retry)
    assert retry.retry_delay.ToNanoseconds() == 1_500_000_000
