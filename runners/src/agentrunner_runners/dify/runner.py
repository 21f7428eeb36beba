"""The official Dify runner: a Dify app's service API as a protocol-v1 runner.

Chat and agent apps: `POST {base-url}/chat-messages` (streaming); the events `message` /
`agent_message` (answer increments), `message_replace` (moderation rewrites the answer),
`agent_thought` (a tool call: `tool.call.started` / `tool.call.completed` and a progress note,
never answer text), `message_file` (an image the app returns,
as answer content), `message_end` (usage), `error` (a failure inside the 200 stream), `ping`; unknown
events are ignored. The conversation id Dify returns is kept in conversation state
(`external.conversation_id`) and reused only when it is UUID-shaped; one Dify no longer knows is
dropped and the turn retried once fresh.

Workflow apps: `POST {base-url}/workflows/run`; `node_started` (progress), `text_chunk` (answer
increments), `workflow_finished` (outputs, or `data.status` `failed` / `stopped`: the workflow's own
failure, `dify.workflow_failed`). The workflow gets
`langbot_conversation_id` (kept in `external.workflow_conversation_id`), `langbot_session_id` and the
user's text as inputs.

Attachments are read through the host's artifact API and uploaded to `/files/upload` (201) first.
`<think>` reasoning is shown apart from the answer, or dropped with `remove-think`.

Both app kinds are always called with `response_mode: streaming` (a surface that cannot stream gets
the assembled answer), so each failure arrives one way only. An `error` event or a failed workflow
that names a rate limit (`status` 429, "rate limit", "too many requests") is `dify.rate_limited`,
retryable; otherwise not retryable.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncGenerator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrunner import RunContext, results
from agentrunner.services import (
    ServiceError,
    ServiceRunner,
    ServiceTurn,
    ThinkSplitter,
    read_attachments,
    reported_failure,
    upload,
)
from agentrunner.services.config import HttpUrl
from agentrunner.v1 import common_pb2

CONVERSATION_KEY = "external.conversation_id"
WORKFLOW_CONVERSATION_KEY = "external.workflow_conversation_id"
_IGNORED = frozenset(
    {"ping", "workflow_started", "node_finished", "tts_message", "tts_message_end", "message_file_end"}
)


class DifyConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    base_url: HttpUrl = Field("https://api.dify.ai/v1", alias="base-url")
    app_type: Literal["chat", "agent", "workflow"] = Field("chat", alias="app-type")
    api_key: str = Field(alias="api-key", min_length=1)
    base_prompt: str = Field("", alias="base-prompt")
    remove_think: bool = Field(False, alias="remove-think")
    timeout: float = Field(30, gt=0, le=3600)


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def user_tag(ctx: RunContext) -> str:
    """Dify's `user`: `<actor_type>_<actor_id>`, else one per run."""
    actor = ctx.actor
    if actor.actor_id:
        return f"{actor.actor_type or 'user'}_{actor.actor_id}"
    return f"user_{ctx.run_id}"


class DifyRunner(ServiceRunner):
    """Dify chat / agent / workflow apps (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = DifyConfig
    provider = "dify"

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        if not isinstance(data, dict) or status < 400:
            return None
        message = str(data.get("message") or data.get("code") or f"HTTP {status}")
        if status == 404 and "conversation" in message.lower():
            return ServiceError(
                self.provider, "conversation_not_found", message, status=status, stale_id=True
            )
        return None  # the status mapping applies (401 auth, 429 rate limit, ...) with Dify's message

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:
        cfg: DifyConfig = ctx.config
        headers = {"Authorization": f"Bearer {cfg.api_key}"}
        files = await self._files(ctx, turn, headers)
        query = ctx.input.to_text() or cfg.base_prompt
        if cfg.app_type == "workflow":
            await self._workflow(ctx, turn, headers, query, files)
        else:
            await self._chat(ctx, turn, headers, query, files)

    async def _files(
        self, ctx: RunContext, turn: ServiceTurn, headers: dict[str, str]
    ) -> list[dict[str, Any]]:
        cfg: DifyConfig = ctx.config
        refs: list[dict[str, Any]] = []
        for item in await read_attachments(ctx, self.provider):
            answer = await upload(
                turn.upstream,
                f"{cfg.base_url}/files/upload",
                item,
                data={"user": user_tag(ctx)},
                headers=headers,
            )
            file_id = answer.get("id") if isinstance(answer, dict) else None
            if not file_id:
                raise turn.upstream.error("input_error", f"uploading {item.name!r}: no file id in the answer")
            refs.append({"type": item.kind, "transfer_method": "local_file", "upload_file_id": file_id})
        for ref in ctx.input.attachments:
            if not ref.artifact_id and ref.uri.startswith(("http://", "https://")):
                kind = ref.mime_type.partition("/")[0]
                refs.append(
                    {
                        "type": kind if kind in ("image", "audio", "video") else "document",
                        "transfer_method": "remote_url",
                        "url": ref.uri,
                    }
                )
        return refs

    async def _chat(
        self,
        ctx: RunContext,
        turn: ServiceTurn,
        headers: dict[str, str],
        query: str,
        files: list[dict[str, Any]],
    ) -> None:
        cfg: DifyConfig = ctx.config
        body = {
            "inputs": _params(ctx),
            "query": query,
            "user": user_tag(ctx),
            "response_mode": "streaming",
            "conversation_id": turn.ids.get(CONVERSATION_KEY, valid=is_uuid) or "",
            "files": files,
        }
        think = _Think(turn, remove=cfg.remove_think)
        tools = _Tools(turn)
        url = f"{cfg.base_url}/chat-messages"
        async with contextlib.aclosing(_events(turn, url, body, headers)) as events:
            async for kind, data in events:
                conversation = data.get("conversation_id")
                if isinstance(conversation, str) and is_uuid(conversation):
                    turn.ids.set(CONVERSATION_KEY, conversation)
                if kind in ("message", "agent_message"):
                    await think.feed(str(data.get("answer") or ""))
                elif kind == "message_replace":
                    await think.flush()
                    await turn.answer.snapshot(str(data.get("answer") or ""))
                elif kind == "agent_thought":
                    await tools.thought(data)
                elif kind == "message_file":
                    await _file(turn, cfg, data)
                elif kind == "message_end":
                    _usage(turn, data.get("metadata"))
                elif kind == "node_started":
                    await _node(turn, data)
                elif kind == "error":
                    raise _stream_error(turn, data)
        await think.flush()

    async def _workflow(
        self,
        ctx: RunContext,
        turn: ServiceTurn,
        headers: dict[str, str],
        query: str,
        files: list[dict[str, Any]],
    ) -> None:
        cfg: DifyConfig = ctx.config
        conversation = turn.ids.get(WORKFLOW_CONVERSATION_KEY) or str(uuid.uuid4())
        turn.ids.set(WORKFLOW_CONVERSATION_KEY, conversation)
        inputs = {
            **_params(ctx),
            "langbot_user_message_text": query,
            "langbot_session_id": ctx.conversation.conversation_id or ctx.conversation.session_id,
            "langbot_conversation_id": conversation,
        }
        body = {"inputs": inputs, "user": user_tag(ctx), "response_mode": "streaming", "files": files}
        think = _Think(turn, remove=cfg.remove_think)
        outputs: Any = None
        url = f"{cfg.base_url}/workflows/run"
        async with contextlib.aclosing(_events(turn, url, body, headers)) as events:
            async for kind, data in events:
                if kind == "text_chunk":
                    await think.feed(str((data.get("data") or {}).get("text") or ""))
                elif kind == "node_started":
                    await _node(turn, data)
                elif kind == "workflow_finished":
                    outputs = _finished(turn, data.get("data") or {})
                elif kind == "error":
                    raise _stream_error(turn, data)
        await think.flush()
        if not turn.answer.has_output and outputs:
            await think.feed(outputs)
            await think.flush()


class _Think:
    """Answer text through the `<think>` splitter: reasoning shown apart, or dropped."""

    def __init__(self, turn: ServiceTurn, *, remove: bool) -> None:
        self._turn = turn
        self._remove = remove
        self._split = ThinkSplitter()

    async def feed(self, text: str) -> None:
        await self._out(*self._split.feed(text))

    async def flush(self) -> None:
        await self._out(*self._split.close())

    async def _out(self, answer: str, reasoning: str) -> None:
        if reasoning and not self._remove:
            await self._turn.answer.reasoning(reasoning)
        await self._turn.answer.add(answer)


def _params(ctx: RunContext) -> dict[str, Any]:
    params = ctx.adapter.get("params")
    return dict(params) if isinstance(params, dict) else {}


def _data(turn: ServiceTurn, raw: str) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise turn.upstream.error("response_invalid", f"an event is not JSON: {raw[:80]!r}") from None
    if not isinstance(data, dict) or data.get("event") in _IGNORED:
        return None
    return data


async def _events(
    turn: ServiceTurn, url: str, body: dict[str, Any], headers: dict[str, str]
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """POSTs a streaming request and yields each event's name and JSON (pings and the like skipped)."""
    async with turn.upstream.stream("POST", url, json=body, headers=headers) as resp:
        async for event in turn.upstream.sse(resp):
            data = _data(turn, event.data)
            if data is not None:
                yield str(data.get("event") or event.event), data


class _Tools:
    """An agent app's tool calls (`agent_thought` with a `tool`): `tool.call.started` when the thought
    names the tool, `tool.call.completed` when its observation arrives, and a progress note."""

    def __init__(self, turn: ServiceTurn) -> None:
        self.turn = turn
        self.open: dict[str, str] = {}
        self.done: set[str] = set()

    async def thought(self, data: dict[str, Any]) -> None:
        tool = str(data.get("tool") or "")
        thought_id = str(data.get("id") or data.get("position") or "")
        if not tool or not thought_id or thought_id in self.done:
            return
        call_id = f"dify_{thought_id}"
        if thought_id not in self.open:
            self.open[thought_id] = tool
            await self.turn.ctx.emit(
                results.tool_started(call_id, tool, _tool_input(data.get("tool_input"), tool))
            )
            await self.turn.answer.progress(f"calling {tool}")
        observation = data.get("observation")
        if observation:
            self.done.add(thought_id)
            preview = {"text": str(observation)[:2000]}
            await self.turn.ctx.emit(results.tool_completed(call_id, self.open.pop(thought_id), preview))


def _tool_input(raw: Any, tool: str) -> dict[str, Any]:
    """Dify's `tool_input` (a JSON text, often keyed by the tool's name) as call parameters."""
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else raw
    except json.JSONDecodeError:
        return {"input": raw}
    if isinstance(value, dict) and isinstance(value.get(tool), dict) and len(value) == 1:
        value = value[tool]
    return value if isinstance(value, dict) else ({"input": value} if value else {})


async def _node(turn: ServiceTurn, data: dict[str, Any]) -> None:
    node = data.get("data") or {}
    if node.get("node_type") not in (None, "start", "end", "answer"):
        await turn.answer.progress(f"running {node.get('title') or node.get('node_type')}")


async def _file(turn: ServiceTurn, cfg: DifyConfig, data: dict[str, Any]) -> None:
    url = str(data.get("url") or "")
    if not url or data.get("belongs_to", "assistant") != "assistant":
        return
    if url.startswith("/"):
        url = cfg.base_url.removesuffix("/v1") + url
    if data.get("type") == "image":
        element = common_pb2.ContentElement(image=common_pb2.ImageContent(uri=url))
    else:
        element = common_pb2.ContentElement(file=common_pb2.FileContent(uri=url, name=url.rpartition("/")[2]))
    await turn.answer.add_content(element)


def _usage(turn: ServiceTurn, metadata: Any) -> None:
    usage = metadata.get("usage") if isinstance(metadata, dict) else None
    if isinstance(usage, dict):
        turn.set_usage(
            _int(usage.get("prompt_tokens")),
            _int(usage.get("completion_tokens")),
            _int(usage.get("total_tokens")),
        )


def _finished(turn: ServiceTurn, data: dict[str, Any]) -> str:
    """A finished workflow's answer text from its outputs; a failed (or stopped) workflow raises
    `workflow_failed` (`rate_limited` when its error names a rate limit)."""
    if data.get("error") or data.get("status") in ("failed", "stopped"):
        message = f"the workflow {data.get('status') or 'failed'}: {data.get('error') or 'no detail'}"
        raise reported_failure(
            turn.upstream.provider,
            "workflow_failed",
            turn.upstream.redact(message),
            details={"workflow_status": str(data.get("status") or "")},
        )
    if isinstance(data.get("total_tokens"), int):
        turn.set_usage(total_tokens=data["total_tokens"])
    outputs = data.get("outputs")
    if isinstance(outputs, str):
        return outputs
    if not isinstance(outputs, dict) or not outputs:
        return ""
    for key in ("answer", "text", "result", "output", "summary"):
        value = outputs.get(key)
        if isinstance(value, str):
            return value
    strings = [v for v in outputs.values() if isinstance(v, str)]
    return strings[0] if len(strings) == 1 else json.dumps(outputs, ensure_ascii=False)


def _stream_error(turn: ServiceTurn, data: dict[str, Any]) -> ServiceError:
    """An `error` event: `stream_error`, or `rate_limited` when its `status` is 429 or its text or
    code names a rate limit (the model behind the app was throttled)."""
    message = str(data.get("message") or data.get("code") or "error event")
    return reported_failure(
        turn.upstream.provider,
        "stream_error",
        turn.upstream.redact(f"Dify reported an error: {message}"),
        code=str(data.get("code") or ""),
        status=data.get("status"),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
