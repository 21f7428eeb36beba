"""The official Coze runner: a Coze bot's v3 chat API as a protocol-v1 runner.

`POST {api-base}/v3/chat[?conversation_id=…]` (SSE): `conversation.chat.created` (the conversation
id), `conversation.message.delta` (answer `content` increments; `reasoning_content` is reasoning, never
answer), `conversation.message.completed` (the full answer again, which is not sent twice; also
`function_call` / `tool_response` messages, shown as progress, `follow_up` suggestions, kept in the
terminal's metadata, and `verbose` messages, ignored), `conversation.chat.completed` (usage
`input_count` / `output_count` / `token_count`), `conversation.chat.failed` (`last_error`),
`conversation.chat.requires_action` (a client-side tool call this runner cannot answer), `error`,
`done`. JSON bodies with a non-zero `code` (with HTTP 200 or an error status) are Coze's business
errors. A failed chat is `coze.chat_failed`; a failed chat, an `error` event or a business error that
is a rate limit (code 4013, or wording such as "rate is too high") is `coze.rate_limited`, retryable.

Text goes as `content_type: text`; with attachments, each file is uploaded to `/v1/files/upload` and
the message is an `object_string` of text and `image` / `file` parts. The conversation id is kept in
conversation state (`external.conversation_id`); one Coze no longer knows is dropped and the turn
retried once fresh.
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

CONVERSATION_KEY = "external.conversation_id"
_AUTH_CODES = frozenset({4100, 4101, 4102, 700012006})
_STALE = re.compile(r"conversation.*(not exist|not found|n't exist|invalid)", re.I)
_RATE = re.compile(r"rate|too (many|frequent)|limit", re.I)
#: Coze's rate-limit error codes (its 429 answers carry 4013)
_RATE_CODES = frozenset({4013})


class CozeConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    api_key: str = Field(alias="api-key", min_length=1)
    bot_id: str = Field(alias="bot-id", min_length=1)
    api_base: HttpUrl = Field("https://api.coze.cn", alias="api-base")
    auto_save_history: bool = Field(True, alias="auto-save-history")
    timeout: float = Field(120, gt=0, le=3600)


class CozeRunner(ServiceRunner):
    """Coze bots (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = CozeConfig
    provider = "coze"

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        if not isinstance(data, dict):
            return None
        code = data.get("code")
        if code in (0, None, "0") and status < 400:
            return None
        message = str(data.get("msg") or data.get("message") or f"code {code}")
        detail = {"service_code": code}
        if status in (401, 403) or code in _AUTH_CODES:
            return ServiceError(
                self.provider, "auth_error", f"Coze refused the key: {message}", status=status, details=detail
            )
        if _STALE.search(message):
            return ServiceError(
                self.provider, "conversation_not_found", message, stale_id=True, details=detail
            )
        if status == 429 or _RATE.search(message):
            return (
                None
                if status >= 400
                else ServiceError(self.provider, "rate_limited", message, details=detail)
            )
        if status >= 400:
            return None  # the HTTP status mapping, with Coze's message
        return ServiceError(self.provider, "api_error", f"Coze error {code}: {message}", details=detail)

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:
        cfg: CozeConfig = ctx.config
        headers = {"Authorization": f"Bearer {cfg.api_key}"}
        message = await self._message(ctx, turn, headers)
        params = ctx.adapter.get("params")
        body: dict[str, Any] = {
            "bot_id": cfg.bot_id,
            "user_id": f"{ctx.actor.actor_type or 'user'}_{ctx.actor.actor_id or ctx.run_id}",
            "stream": True,
            "auto_save_history": cfg.auto_save_history,
            "additional_messages": [message],
        }
        if isinstance(params, dict) and params:
            body["custom_variables"] = {
                k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()
            }
        query = {}
        stored = turn.ids.get(CONVERSATION_KEY)
        if stored:
            query["conversation_id"] = stored
        reader = _Reader(turn)
        url = f"{cfg.api_base}/v3/chat"
        async with turn.upstream.stream("POST", url, json=body, headers=headers, params=query) as resp:
            async for event in turn.upstream.sse(resp):
                if await reader.event(event.event, event.data):
                    break
        if reader.follow_up:
            turn.metadata["follow_up"] = reader.follow_up

    async def _message(self, ctx: RunContext, turn: ServiceTurn, headers: dict[str, str]) -> dict[str, Any]:
        cfg: CozeConfig = ctx.config
        text = ctx.input.to_text()
        files = await read_attachments(ctx, self.provider)
        if not files:
            return {"role": "user", "content": text, "content_type": "text"}
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for item in files:
            answer = await upload(turn.upstream, f"{cfg.api_base}/v1/files/upload", item, headers=headers)
            file_id = (answer.get("data") or {}).get("id") if isinstance(answer, dict) else None
            if not file_id:
                raise turn.upstream.error("input_error", f"uploading {item.name!r}: no file id in the answer")
            parts.append({"type": "image" if item.is_image else "file", "file_id": file_id})
        return {
            "role": "user",
            "content": json.dumps(parts, ensure_ascii=False),
            "content_type": "object_string",
        }


class _Reader:
    """Coze's events into the turn; one answer assembled from per-message deltas and completions."""

    def __init__(self, turn: ServiceTurn) -> None:
        self.turn = turn
        self.streamed: dict[str, str] = {}  # answer text streamed per message id
        self.follow_up: list[str] = []

    async def event(self, name: str, raw: str) -> bool:
        """Handles one event; True at `done`."""
        if name == "done":
            return True
        try:
            data = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            raise self.turn.upstream.error(
                "response_invalid", f"a {name} event is not JSON: {raw[:80]!r}"
            ) from None
        if not isinstance(data, dict):
            return False
        conversation = data.get("conversation_id")
        if name.startswith("conversation.chat.") and isinstance(conversation, str) and conversation:
            self.turn.ids.set(CONVERSATION_KEY, conversation)
        if name == "conversation.message.delta":
            await self._delta(data)
        elif name == "conversation.message.completed":
            await self._completed(data)
        elif name == "conversation.chat.completed":
            usage = data.get("usage") or {}
            self.turn.set_usage(usage.get("input_count"), usage.get("output_count"), usage.get("token_count"))
        elif name == "conversation.chat.failed":
            error = data.get("last_error") or {}
            code = error.get("code")
            raise reported_failure(
                self.turn.upstream.provider,
                "chat_failed",
                self.turn.upstream.redact(
                    f"the chat failed: {error.get('msg') or 'no detail'} (code {code})"
                ),
                code=code,
                status=429 if code in _RATE_CODES else None,
            )
        elif name == "conversation.chat.requires_action":
            raise self.turn.upstream.error(
                "api_error",
                "the bot asked for a client-side tool call (requires_action), which this runner cannot answer",
            )
        elif name == "error":
            message = data.get("msg") or data.get("message") or "error event"
            code = data.get("code")
            raise reported_failure(
                self.turn.upstream.provider,
                "stream_error",
                self.turn.upstream.redact(f"Coze reported an error: {message} (code {code})"),
                code=code,
                status=429 if code in _RATE_CODES else None,
            )
        return False

    async def _delta(self, data: dict[str, Any]) -> None:
        if data.get("role", "assistant") != "assistant" or data.get("type", "answer") != "answer":
            return
        reasoning = data.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            await self.turn.answer.reasoning(reasoning)
        content = data.get("content")
        if isinstance(content, str) and content:
            message_id = str(data.get("id") or "")
            if message_id not in self.streamed and self.turn.answer.text:
                await self.turn.answer.add("\n\n")  # a second answer message of the same chat
            self.streamed[message_id] = self.streamed.get(message_id, "") + content
            await self.turn.answer.add(content)

    async def _completed(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        content = data.get("content")
        content = content if isinstance(content, str) else ""
        if kind == "answer" and data.get("role", "assistant") == "assistant":
            message_id = str(data.get("id") or "")
            sent = self.streamed.get(message_id)
            if sent is None:  # an answer message that was not streamed
                if content:
                    await self.turn.answer.add(("\n\n" if self.turn.answer.text else "") + content)
                    self.streamed[message_id] = content
            elif content.startswith(sent) and len(content) > len(sent):
                await self.turn.answer.add(content[len(sent) :])  # the repeat is never sent twice
                self.streamed[message_id] = content
        elif kind == "function_call":
            try:
                name = json.loads(content).get("name") or "a tool"
            except (json.JSONDecodeError, AttributeError):
                name = "a tool"
            await self.turn.answer.progress(f"calling {name}")
        elif kind in ("tool_response", "tool_output"):
            await self.turn.answer.progress("tool result received")
        elif kind == "follow_up" and content:
            self.follow_up.append(content)
