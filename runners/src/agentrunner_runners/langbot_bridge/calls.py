"""One function per plugin API action: the ProxyService call it becomes and the answer the SDK expects.

Each takes the open run and the action's payload (as the plugin SDK sends it) and answers the dict the
SDK reads (`{"message", "usage"}`, `{"tool"}`, `{"result"}`, a `HistoryPage`, an `AgentRun`, ...), or an
async iterator for the one streamed action (`invoke_llm_stream`). Host errors propagate as
`AgentRunnerError` (the router answers them in the runtime's error shape).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agentrunner.api import tool_text
from agentrunner.errors import NotFoundError
from agentrunner.v1 import common_pb2
from agentrunner.v1 import proxy_service_pb2 as P
from agentrunner_runners.langbot_bridge import context as ctxmap
from agentrunner_runners.langbot_bridge import convert
from agentrunner_runners.langbot_bridge.context import EVENT_REPLY_TOOL, plain
from agentrunner_runners.langbot_bridge.results import ResultTranslator
from agentrunner_runners.langbot_bridge.runs import BridgedRun

Data = dict[str, Any]


def _model_args(data: Data) -> tuple[str, list[common_pb2.ModelMessage], list[common_pb2.ToolDefinition]]:
    messages = [convert.model_message(m) for m in data.get("messages") or [] if isinstance(m, Mapping)]
    tools = [convert.tool_definition(f) for f in data.get("funcs") or [] if isinstance(f, Mapping)]
    return str(data["llm_model_uuid"]), messages, tools


def _extra(data: Data) -> dict[str, Any] | None:
    extra = data.get("extra_args")
    return dict(extra) if isinstance(extra, Mapping) else None


# -- models ---------------------------------------------------------------------------------------
async def count_tokens(run: BridgedRun, data: Data) -> Data:
    model, messages, tools = _model_args(data)
    resp = await run.ctx.api.count_tokens(model, messages, tools=tools)
    return {"tokens": int(resp.tokens)}


async def invoke_llm(run: BridgedRun, data: Data) -> Data:
    model, messages, tools = _model_args(data)
    resp = await run.ctx.api.invoke_model(
        model, messages, tools=tools, extra_args=_extra(data), remove_think=data.get("remove_think") is True
    )
    return {"message": convert.message(resp.message), "usage": convert.usage(resp.usage)}


async def invoke_llm_stream(run: BridgedRun, data: Data) -> AsyncIterator[Data]:
    model, messages, tools = _model_args(data)
    stream = run.ctx.api.stream_model(
        model, messages, tools=tools, extra_args=_extra(data), remove_think=data.get("remove_think") is True
    )
    first = await anext(stream, None)  # the call's own errors surface here, before any chunk is sent

    async def items() -> AsyncIterator[Data]:
        sequence = 0
        item = first
        try:
            while item is not None:
                if item.WhichOneof("item") == "chunk":
                    sequence += 1
                    yield {"chunk": convert.stream_chunk(item.chunk, sequence)}
                elif item.WhichOneof("item") == "usage":
                    yield {"usage": convert.usage(item.usage)}
                item = await anext(stream, None)
        finally:
            await stream.aclose()

    return items()


async def invoke_rerank(run: BridgedRun, data: Data) -> Data:
    top_k = data.get("top_k")
    resp = await run.ctx.api.rerank_documents(
        str(data["rerank_model_uuid"]),
        str(data.get("query") or ""),
        [str(d) for d in data.get("documents") or []],
        top_k=int(top_k) if isinstance(top_k, int) else 0,
    )
    return {"results": [{"index": r.index, "relevance_score": r.relevance_score} for r in resp.results]}


# -- tools and knowledge --------------------------------------------------------------------------
async def get_tool_detail(run: BridgedRun, data: Data) -> Data:
    resp = await run.ctx.api.get_tool_detail(str(data["tool_name"]))
    tool = resp.tool
    return {
        "tool": {"name": tool.name, "description": tool.description, "parameters": plain(tool.parameters)}
    }


async def _reply_full(run: BridgedRun, text: str, quote_origin: bool) -> Data:
    resp = await run.ctx.api.send_reply(
        f"reply-{secrets.token_hex(8)}",
        common_pb2.REPLY_MODE_FULL,
        common_pb2.AssistantMessage(content=text),
        quote_origin=quote_origin,
    )
    return convert.reply_result(resp)


async def call_tool(run: BridgedRun, data: Data) -> Data:
    name = str(data["tool_name"])
    params = data.get("parameters", data.get("tool_parameters"))
    params = dict(params) if isinstance(params, Mapping) else {}
    if name == EVENT_REPLY_TOOL:  # `ctx.reply(text)`: a reply to the current event, not a host tool
        return {
            "result": await _reply_full(
                run, str(params.get("text") or ""), params.get("quote_origin") is True
            )
        }
    resp = await run.ctx.api.call_tool(name, params)
    result: Data = {"content": tool_text(resp), "is_error": resp.is_error}
    if resp.HasField("structured"):
        result["structured"] = plain(resp.structured)
    return {"result": result}


async def retrieve_knowledge(run: BridgedRun, data: Data) -> Data:
    top_k = data.get("top_k")
    filters = data.get("filters")
    resp = await run.ctx.api.retrieve_knowledge(
        str(data["kb_id"]),
        str(data.get("query_text") or ""),
        top_k=int(top_k) if isinstance(top_k, int) else 0,
        filters=dict(filters) if isinstance(filters, Mapping) and filters else None,
    )
    return {
        "results": [
            {
                "id": r.chunk_id or r.document_id,
                "content": [{"type": "text", "text": r.content}],
                "metadata": {**plain(r.metadata), "document_id": r.document_id},
                "distance": 1.0 - r.score,
                "score": r.score,
            }
            for r in resp.results
        ]
    }


# -- prompt, history, events, steering -------------------------------------------------------------
async def get_prompt(run: BridgedRun, data: Data) -> Data:
    resp = await run.ctx.api.get_prompt()
    return {"prompt": [convert.message(m) for m in resp.messages]}


async def history_page(run: BridgedRun, data: Data) -> Data:
    direction = P.PAGE_DIRECTION_FORWARD if data.get("direction") == "forward" else P.PAGE_DIRECTION_BACKWARD
    limit = data.get("limit")
    resp = await run.ctx.api.list_history(
        conversation_id=str(data.get("conversation_id") or ""),
        before_cursor=str(data.get("before_cursor") or ""),
        after_cursor=str(data.get("after_cursor") or ""),
        limit=int(limit) if isinstance(limit, int) else 0,
        direction=direction,
        include_artifacts=data.get("include_attachments") is True,
    )
    return {
        "items": [convert.transcript_item(i) for i in resp.items],
        "next_cursor": resp.next_cursor or None,
        "prev_cursor": resp.prev_cursor or None,
        "has_more": resp.has_more,
        "total_count": resp.total_count if resp.HasField("total_count") else None,
    }


async def history_search(run: BridgedRun, data: Data) -> Data:
    filters = data.get("filters") if isinstance(data.get("filters"), Mapping) else {}
    assert isinstance(filters, Mapping)
    roles = filters.get("roles")
    top_k = data.get("top_k")
    resp = await run.ctx.api.search_history(
        str(data.get("query") or ""),
        conversation_id=str(filters.get("conversation_id") or ""),
        roles=[str(r) for r in roles] if isinstance(roles, list) else (),
        top_k=int(top_k) if isinstance(top_k, int) else 0,
    )
    items = [convert.transcript_item(i) for i in resp.items]
    return {"items": items, "total_count": len(items), "query": resp.query or str(data.get("query") or "")}


async def event_get(run: BridgedRun, data: Data) -> Data:
    resp = await run.ctx.api.get_event(str(data["event_id"]))
    return convert.event_record(resp.event)


async def event_page(run: BridgedRun, data: Data) -> Data:
    limit = data.get("limit")
    resp = await run.ctx.api.list_events(
        conversation_id=str(data.get("conversation_id") or ""),
        event_types=[str(t) for t in data.get("event_types") or []],
        before_cursor=str(data.get("before_cursor") or ""),
        limit=int(limit) if isinstance(limit, int) else 0,
    )
    return {
        "items": [convert.event_record(e) for e in resp.items],
        "next_cursor": resp.next_cursor or None,
        "prev_cursor": None,
        "has_more": resp.has_more,
    }


async def steering_pull(run: BridgedRun, data: Data) -> Data:
    limit = data.get("limit")
    if data.get("mode") in ("one", "one-at-a-time"):
        limit = 1
    resp = await run.ctx.api.pull_steering(limit=int(limit) if isinstance(limit, int) else 0)
    return {
        "items": [
            {
                "claimed_run_id": run.ctx.run_id,
                "runner_id": run.runner_id,
                "claimed_at": ctxmap.seconds(item.receive_time),
                "event": ctxmap.event(item.event),
                "input": ctxmap.run_input(item.input),
                "actor": ctxmap.actor(item.actor) if item.HasField("actor") else None,
                "metadata": {"steering_id": item.steering_id},
            }
            for item in resp.items
        ]
    }


# -- state and storage ----------------------------------------------------------------------------
async def state_get(run: BridgedRun, data: Data) -> Data:
    return {"value": ctxmap.integral(await run.ctx.api.get_state(str(data["scope"]), str(data["key"])))}


async def state_set(run: BridgedRun, data: Data) -> Data:
    await run.ctx.api.set_state(str(data["scope"]), str(data["key"]), data.get("value"))
    return {"success": True}


async def state_delete(run: BridgedRun, data: Data) -> Data:
    return {"success": await run.ctx.api.delete_state(str(data["scope"]), str(data["key"]))}


async def state_list(run: BridgedRun, data: Data) -> Data:
    limit = data.get("limit")
    resp = await run.ctx.api.list_state(
        str(data["scope"]),
        prefix=str(data.get("prefix") or ""),
        limit=int(limit) if isinstance(limit, int) else 0,
    )
    return {"keys": list(resp.keys), "has_more": resp.has_more}


def _area(data: Data) -> str:
    area = data.get("owner_type")
    if area not in ("plugin", "workspace"):
        raise ValueError(f"unknown storage owner type {area!r}")
    return str(area)


async def storage_set(run: BridgedRun, data: Data) -> Data:
    value = base64.b64decode(str(data.get("value_base64") or ""), validate=True)
    await run.ctx.api.set_storage(_area(data), str(data["key"]), value)
    return {}


async def storage_get(run: BridgedRun, data: Data) -> Data:
    value = await run.ctx.api.get_storage(_area(data), str(data["key"]))
    if value is None:
        raise NotFoundError(f"no storage value under {str(data['key'])[:100]!r}")
    return {"value_base64": base64.b64encode(value).decode("ascii")}


async def storage_keys(run: BridgedRun, data: Data) -> Data:
    resp = await run.ctx.api.list_storage(_area(data))
    return {"keys": list(resp.keys)}


async def storage_delete(run: BridgedRun, data: Data) -> Data:
    await run.ctx.api.delete_storage(_area(data), str(data["key"]))
    return {}


# -- run records ----------------------------------------------------------------------------------
def _target(run: BridgedRun, data: Data) -> str:
    target = str(data.get("target_run_id") or "")
    return "" if target == run.ctx.run_id else target


async def run_get(run: BridgedRun, data: Data) -> Data:
    return convert.run_record((await run.ctx.api.get_run_record(_target(run, data))).run)


async def run_list(run: BridgedRun, data: Data) -> Data:
    statuses = [
        common_pb2.RunStatus.Value("RUN_STATUS_" + str(s).upper())
        for s in data.get("statuses") or []
        if "RUN_STATUS_" + str(s).upper() in common_pb2.RunStatus.keys()
    ]
    limit = data.get("limit")
    resp = await run.ctx.api.list_run_records(
        conversation_id=str(data.get("conversation_id") or ""),
        statuses=statuses,
        before_cursor=str(data.get("before_cursor") or ""),
        limit=int(limit) if isinstance(limit, int) else 0,
    )
    items = [convert.run_record(r) for r in resp.runs]
    return {
        "items": items,
        "next_cursor": resp.next_cursor or None,
        "has_more": resp.has_more,
        "total_count": len(items),
    }


async def run_events_page(run: BridgedRun, data: Data) -> Data:
    after = str(data.get("after_cursor") or "0")
    limit = data.get("limit")
    resp = await run.ctx.api.list_run_record_events(
        _target(run, data),
        after_sequence=int(after) if after.isdigit() else 0,
        limit=int(limit) if isinstance(limit, int) else 0,
    )
    items = [convert.run_event(r) for r in resp.results]
    last = str(items[-1]["sequence"]) if items else None
    return {"items": items, "next_cursor": last if resp.has_more else None, "has_more": resp.has_more}


async def run_cancel(run: BridgedRun, data: Data) -> Data:
    resp = await run.ctx.api.cancel_run_record(_target(run, data), reason=str(data.get("reason") or ""))
    return convert.run_record(resp.run)


async def run_append_result(run: BridgedRun, data: Data) -> Data:
    raw = data.get("result") if isinstance(data.get("result"), Mapping) else {}
    assert isinstance(raw, Mapping)
    result = ResultTranslator().translate(raw)
    if result is None:
        raise ValueError(f"result type {str(raw.get('type'))[:50]!r} cannot be appended")
    resp = await run.ctx.api.append_run_result(result, run_id=_target(run, data))
    return convert.run_event(resp.result)


async def run_finalize(run: BridgedRun, data: Data) -> Data:
    status = common_pb2.RunStatus.Value("RUN_STATUS_" + str(data.get("status") or "completed").upper())
    resp = await run.ctx.api.finalize_run_record(
        status, run_id=_target(run, data), reason=str(data.get("reason") or "")
    )
    return convert.run_record(resp.run)


# -- replies and platform -------------------------------------------------------------------------
_REPLY_MODES = {
    "update": common_pb2.REPLY_MODE_UPDATE,
    "finish": common_pb2.REPLY_MODE_FINISH,
    "abort": common_pb2.REPLY_MODE_ABORT,
}


async def reply_stream(run: BridgedRun, data: Data) -> Data:
    mode = _REPLY_MODES[str(data.get("operation"))]
    message = (
        None
        if mode == common_pb2.REPLY_MODE_ABORT
        else common_pb2.AssistantMessage(content=str(data.get("text") or ""))
    )
    resp = await run.ctx.api.send_reply(str(data["stream_id"]), mode, message)
    return {"result": convert.reply_result(resp)}


async def call_platform_api(run: BridgedRun, data: Data) -> Data:
    params = data.get("params") if isinstance(data.get("params"), Mapping) else {}
    assert isinstance(params, Mapping)
    bot_id = str(data.get("bot_uuid") or "")
    if data.get("context_tool") == EVENT_REPLY_TOOL:  # `ctx.api.reply_message(chain, quote_origin)`
        text = convert.chain_text(params.get("message"))
        return {"result": await _reply_full(run, text, params.get("quote_origin") is True)}
    if data.get("action") == "send_message":
        resp = await run.ctx.api.send_message(
            str(params.get("target_type") or ""),
            str(params.get("target_id") or ""),
            common_pb2.AssistantMessage(content=convert.chain_text(params.get("message"))),
            bot_id=bot_id,
        )
        return {"result": {"delivered": resp.delivered, "message_id": resp.platform_message_id or None}}
    platform = await run.ctx.api.request_platform_action(
        str(data["action"]), payload=dict(params), bot_id=bot_id
    )
    return {"result": plain(platform.result)}
