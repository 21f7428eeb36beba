"""The official Tbox runner: an Ant Group Tbox app as a protocol-v1 runner, over plain HTTP.

The public runner uses the vendor SDK, whose host is hard-coded; this one speaks the same HTTP to
`{base-url}` (default `https://api.tbox.cn`), so self-hosted gateways and tests can point it anywhere:
`POST /api/chat` with `Authorization: <api-key>` (no "Bearer") and `source: AGENT_SDK`, body `appId`,
`query`, `stream`, `userId`, `conversationId` (kept in conversation state as
`external.conversation_id`; one Tbox no longer knows is dropped and the turn retried once fresh) and
`files` (attachments uploaded first to `/api/file/upload`).

Streamed answers are SSE `event:message` blocks whose `data` is `{type, lane, payload}`, `payload`
a JSON string: `header` (a lane's media type), `chunk` (text increments, or image URLs on an image
lane), `thinking` (reasoning, never answer), `error`, `revoke`, `followup`, `end`. Lanes interleave:
the first text lane streams live, other text lanes follow it at the end, image lanes are answer
content. The non-streamed body is `{"errorCode": "0", "errorMsg": "success", "data":
{"conversationId", "result": [...]}}`, and it is taken as the answer also where a stream was asked
for; a non-zero `errorCode` (even with HTTP 200) is a failure. An error's human text is its
`errorMsg`, `message` or (the `event:error` block, as the official SDK reads it) `description`.

Failures Tbox reports (a business error body, an `error` message or `event:error` block mid-stream)
that name a rate limit (a 429, "rate limit", "too many requests", "throttl…") are
`tbox.rate_limited`, retryable, streamed or not; others are not retryable.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrunner import RunContext
from agentrunner.services import (
    ServiceError,
    ServiceRunner,
    ServiceTurn,
    read_attachments,
    reported_failure,
    upload,
)
from agentrunner.services.config import HttpUrl
from agentrunner.v1 import common_pb2

CONVERSATION_KEY = "external.conversation_id"
_STALE = re.compile(r"conversation.*(not exist|not found|invalid)", re.I)


class TboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    base_url: HttpUrl = Field("https://api.tbox.cn", alias="base-url")
    api_key: str = Field(alias="api-key", min_length=1)
    app_id: str = Field(alias="app-id", min_length=1)
    streaming: bool = True
    timeout: float = Field(120, gt=0, le=3600)


class TboxRunner(ServiceRunner):
    """Tbox apps (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = TboxConfig
    provider = "tbox"

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        if not isinstance(data, dict) or "errorCode" not in data:
            return None
        code = str(data.get("errorCode"))
        if code == "0" and status < 400:
            return None
        message = _message_of(data) or f"errorCode {code}"
        detail = {"service_code": code}
        if status in (401, 403):
            return ServiceError(
                self.provider, "auth_error", f"Tbox refused the key: {message}", status=status, details=detail
            )
        if status >= 400:
            return None  # the HTTP status mapping, with Tbox's message
        if _STALE.search(message):
            return ServiceError(
                self.provider, "conversation_not_found", message, stale_id=True, details=detail
            )
        return reported_failure(self.provider, "api_error", f"Tbox error {code}: {message}", code=code)

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:
        cfg: TboxConfig = ctx.config
        headers = {"Authorization": cfg.api_key, "source": "AGENT_SDK"}
        body: dict[str, Any] = {
            "appId": cfg.app_id,
            "query": ctx.input.to_text(),
            "stream": turn.streaming,
            "searchEngine": False,
            "userId": f"{ctx.actor.actor_type or 'user'}_{ctx.actor.actor_id or ctx.run_id}",
        }
        stored = turn.ids.get(CONVERSATION_KEY)
        if stored:
            body["conversationId"] = stored
        files = []
        for item in await read_attachments(ctx, self.provider):
            answer = await upload(turn.upstream, f"{cfg.base_url}/api/file/upload", item, headers=headers)
            file_id = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(file_id, str) or not file_id:
                raise turn.upstream.error("input_error", f"uploading {item.name!r}: no file id in the answer")
            files.append(
                {
                    "fileId": file_id,
                    "type": "IMAGE" if item.is_image else item.kind.upper().replace("DOCUMENT", "FILE"),
                }
            )
        if files:
            body["files"] = files
        url = f"{cfg.base_url}/api/chat"
        async with turn.upstream.stream("POST", url, json=body, headers=headers) as resp:
            if not turn.streaming or turn.upstream.is_json(resp):  # a whole answer, even when streaming
                data = await turn.upstream.read_json(resp)
                turn.upstream.check_json(data)
                await _whole(turn, data)
                return
            lanes = _Lanes(turn)
            async for event in turn.upstream.sse(resp):
                await lanes.event(event.event, event.data)
            await lanes.finish()


class _Lanes:
    """Interleaved lanes into one answer: the first text lane live, others appended, images as content."""

    def __init__(self, turn: ServiceTurn) -> None:
        self.turn = turn
        self.media: dict[str, str] = {}
        self.live = ""  # the text lane streamed live
        self.later: dict[str, str] = {}  # other text lanes, appended at the end
        self.follow_up: list[str] = []

    async def event(self, name: str, raw: str) -> None:
        data = _json(self.turn, raw)
        if name == "error":
            raise _stream_error(self.turn, data)
        if name != "message" or not isinstance(data, dict):
            return
        kind = data.get("type")
        lane = str(data.get("lane") or "default")
        payload = data.get("payload")
        if isinstance(payload, str):
            payload = _json(self.turn, payload) if payload.strip() else {}
        payload = payload if isinstance(payload, dict) else {}
        conversation = payload.get("conversationId")
        if isinstance(conversation, str) and conversation:
            self.turn.ids.set(CONVERSATION_KEY, conversation)
        if kind == "header":
            self.media[lane] = str(payload.get("mediaType") or "text")
        elif kind == "chunk":
            await self._chunk(lane, payload)
        elif kind == "thinking":
            text = (
                (payload.get("ext_data") or {}).get("text")
                if isinstance(payload.get("ext_data"), dict)
                else None
            )
            if isinstance(text, str):
                await self.turn.answer.reasoning(text)
        elif kind == "error":
            raise _stream_error(self.turn, payload)
        elif kind == "revoke":
            raise self.turn.upstream.error("api_error", "Tbox withdrew the answer (content moderation)")
        elif kind == "followup":
            items = payload.get("followups") or payload.get("texts") or []
            self.follow_up.extend(str(i) for i in items if isinstance(i, str))

    async def _chunk(self, lane: str, payload: dict[str, Any]) -> None:
        media = self.media.get(lane, "text")  # a chunk before its lane's header is text
        if media == "image":
            urls = payload.get("url")
            for url in [urls] if isinstance(urls, str) else urls or []:
                if isinstance(url, str) and url:
                    await self.turn.answer.add_content(
                        common_pb2.ContentElement(image=common_pb2.ImageContent(uri=url))
                    )
            return
        text = payload.get("text")
        if not isinstance(text, str) or not text:
            return
        if not self.live:
            self.live = lane
        if lane == self.live:
            await self.turn.answer.add(text)
        else:
            self.later[lane] = self.later.get(lane, "") + text

    async def finish(self) -> None:
        for text in self.later.values():
            await self.turn.answer.add(("\n\n" if self.turn.answer.text else "") + text)
        if self.follow_up:
            self.turn.metadata["follow_up"] = self.follow_up


async def _whole(turn: ServiceTurn, data: Any) -> None:
    body = data.get("data") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise turn.upstream.error("response_invalid", "the answer has no data object")
    conversation = body.get("conversationId")
    if isinstance(conversation, str) and conversation:
        turn.ids.set(CONVERSATION_KEY, conversation)
    for item in body.get("reasoningContent") or []:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            await turn.answer.reasoning(item["text"])
    for item in body.get("result") or []:
        if not isinstance(item, dict):
            continue
        if item.get("mediaType") == "image":
            for url in item.get("url") or []:
                await turn.answer.add_content(
                    common_pb2.ContentElement(image=common_pb2.ImageContent(uri=str(url)))
                )
        elif isinstance(item.get("chunk"), str):
            await turn.answer.add(item["chunk"])


def _json(turn: ServiceTurn, raw: str) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        raise turn.upstream.error("response_invalid", f"an event is not JSON: {raw[:80]!r}") from None


def _message_of(data: dict[str, Any]) -> str:
    """An error's human text: `errorMsg`, `message`, or `description` (the `event:error` block)."""
    for key in ("errorMsg", "message", "description", "msg"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _stream_error(turn: ServiceTurn, data: Any) -> ServiceError:
    """An error Tbox reported mid-stream (an `error` message or an `event:error` block)."""
    if not isinstance(data, dict):
        return turn.upstream.error("stream_error", f"Tbox reported an error: {str(data)[:200]}")
    code = data.get("errorCode") or data.get("code")
    text = _message_of(data) or "no detail"
    message = f"Tbox reported an error: {text}" + (f" (code {code})" if code else "")
    return reported_failure(turn.upstream.provider, "stream_error", turn.upstream.redact(message), code=code)
