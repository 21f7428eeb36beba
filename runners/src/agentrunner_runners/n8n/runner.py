"""The official n8n runner: an n8n workflow behind a webhook as a protocol-v1 runner.

One `POST <webhook-url>` per turn with the user's text (`chatInput`, `message`, `user_message_text`),
stable `conversation_id` / `session_id` (minted once per conversation, kept in conversation state as
`external.conversation_id` / `external.session_id`), `user_id`, and the adapter's business params.
Authentication: none, basic, JWT (HMAC, signed per request with PyJWT) or a custom header.

The answer is read however the workflow responds:
- streamed (`Respond: Streaming`): `begin` / `item` / `end` / `error` chunks and n8n's
  `{"type":"keepalive"}` (every 30 s of the execution, so often first), newline-separated or
  concatenated; a body is a stream when its first JSON value is such a chunk; each `item`'s `content`
  is an increment, the other chunks are protocol and never answer text; an `error` chunk fails the run;
- a JSON body (`Respond: When last node finishes`): `body[output-key]` (default `response`; a list of
  entries uses the first), else the JSON itself;
- a text body: the text;
- the immediate acknowledgement (`Respond: Immediately`, `{"message":"Workflow was started"}`): the
  workflow will answer elsewhere; the run completes with `finish_reason` `acknowledged` and no answer.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx
import jwt
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from agentrunner import RunContext
from agentrunner.services import JsonSequence, ServiceError, ServiceRunner, ServiceTurn
from agentrunner.services.config import HttpUrl
from agentrunner.services.errors import reported_failure
from agentrunner.services.parsers import InvalidJson

CONVERSATION_KEY = "external.conversation_id"
SESSION_KEY = "external.session_id"
_ACK = re.compile(r"^\s*workflow (was|got|has been) started", re.I)
MAX_BODY = 16 << 20
#: the message of n8n's HTTP 500 for a workflow that failed before answering
_WORKFLOW_ERROR = "Error in workflow"
_CHUNK_TYPES = frozenset({"begin", "item", "end", "error", "keepalive"})
_CHUNK_KEYS = frozenset({"type", "content", "metadata"})
_REQUIRED = {
    "basic-username": "basic",
    "jwt-secret": "jwt",
    "header-name": "header",
    "header-value": "header",
}


class N8nConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    webhook_url: HttpUrl = Field(alias="webhook-url")
    auth_type: Literal["none", "basic", "jwt", "header"] = Field("none", alias="auth-type")
    basic_username: str = Field("", alias="basic-username", validate_default=True)
    basic_password: str = Field("", alias="basic-password")
    jwt_secret: str = Field("", alias="jwt-secret", validate_default=True)
    jwt_algorithm: Literal["HS256", "HS384", "HS512"] = Field("HS256", alias="jwt-algorithm")
    header_name: str = Field("", alias="header-name", validate_default=True)
    header_value: str = Field("", alias="header-value", validate_default=True)
    timeout: float = Field(120, gt=0, le=3600)
    output_key: str = Field("response", alias="output-key")

    @field_validator("basic_username", "jwt_secret", "header_name", "header_value")
    @classmethod
    def _needed(cls, value: str, info: ValidationInfo) -> str:
        alias = info.field_name.replace("_", "-") if info.field_name else ""
        if not value and info.data.get("auth_type") == _REQUIRED.get(alias):
            raise ValueError(f"is required when auth-type is {_REQUIRED[alias]}")
        return value


class N8nRunner(ServiceRunner):
    """n8n webhook workflows (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = N8nConfig
    provider = "n8n"

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        """n8n's 5xx for a workflow that failed ("Error in workflow") is the workflow failing, as its
        streamed `error` chunk is; any other status goes through the HTTP mapping."""
        message = data.get("message") if isinstance(data, dict) else None
        if status < 500 or not (isinstance(message, str) and message.startswith(_WORKFLOW_ERROR)):
            return None
        return reported_failure(
            self.provider, "workflow_failed", f"n8n reported an error: {message}", status=status
        )

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:
        cfg: N8nConfig = ctx.config
        text = ctx.input.to_text()
        conversation = turn.ids.get(CONVERSATION_KEY) or f"n8n_conversation_{secrets.token_hex(8)}"
        session = turn.ids.get(SESSION_KEY) or f"n8n_session_{secrets.token_hex(8)}"
        turn.ids.set(CONVERSATION_KEY, conversation)
        turn.ids.set(SESSION_KEY, session)
        params = ctx.adapter.get("params")
        body: dict[str, Any] = {
            **(params if isinstance(params, dict) else {}),
            "chatInput": text,
            "message": text,
            "user_message_text": text,
            "conversation_id": conversation,
            "session_id": session,
            "user_id": f"{ctx.actor.actor_type or 'user'}_{ctx.actor.actor_id or ctx.run_id}",
        }
        if ctx.event.HasField("event_time"):
            body["msg_create_time"] = ctx.event.event_time.seconds
        headers, auth = _auth(cfg)
        async with turn.upstream.stream(
            "POST", cfg.webhook_url, json=body, headers=headers, auth=auth
        ) as resp:
            await _read(turn, cfg, resp)


def _auth(cfg: N8nConfig) -> tuple[dict[str, str], httpx.Auth | None]:
    if cfg.auth_type == "basic":
        return {}, httpx.BasicAuth(cfg.basic_username, cfg.basic_password)
    if cfg.auth_type == "jwt":
        now = int(time.time())
        token = jwt.encode(
            {"iat": now, "exp": now + 3600, "sub": "n8n-webhook"}, cfg.jwt_secret, cfg.jwt_algorithm
        )
        return {"Authorization": f"Bearer {token}"}, None
    if cfg.auth_type == "header":
        return {cfg.header_name: cfg.header_value}, None
    return {}, None


def _chunk_type(value: Any) -> str | None:
    """The type of an n8n streaming chunk, None for any other JSON value.

    n8n writes `{"type": begin|item|end|error, "content"?, "metadata"}` per chunk and
    `{"type":"keepalive"}` every 30 s of the execution; nothing else has only those keys.
    """
    if isinstance(value, dict) and value.get("type") in _CHUNK_TYPES and value.keys() <= _CHUNK_KEYS:
        return str(value["type"])
    return None


class _Body:
    """One webhook response, read as it arrives: an item stream when its first JSON value is an n8n
    chunk (a keepalive included), else one JSON answer, else text.

    In a stream only `item` contents are answer text; `begin` / `end` / `keepalive` (and values that
    are not chunks) are protocol, never an answer; an `error` chunk fails the run.
    """

    def __init__(self, turn: ServiceTurn) -> None:
        self.turn = turn
        self.raw = bytearray()  # kept until the body turns out to be an item stream
        self.parser = JsonSequence()
        self.values: list[Any] = []
        self.streaming = False
        self.text = False

    async def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            self.raw.extend(chunk)
            if len(self.raw) > MAX_BODY:
                raise self.turn.upstream.error(
                    "response_invalid", f"the response is larger than {MAX_BODY} bytes"
                )
        if not self.text:
            await self._parsed(lambda: self.parser.feed(chunk))

    async def close(self) -> None:
        if not self.text:
            await self._parsed(self.parser.close)

    async def _parsed(self, parse: Callable[[], list[Any]]) -> None:
        try:
            for value in parse():
                await self._value(value)
        except InvalidJson as exc:
            if self.streaming:
                raise self.turn.upstream.error("response_invalid", f"broken item stream: {exc}") from None
            self.text = True

    async def _value(self, value: Any) -> None:
        kind = _chunk_type(value)
        if not self.values and not self.streaming and kind is not None:
            self.streaming = True
        if not self.streaming:
            self.values.append(value)
        elif kind == "item":
            content = value.get("content")
            if content is not None:
                await self.turn.answer.add(
                    content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
                )
        elif kind == "error":
            # an error the workflow reports is a failed run, a rate limit it names a retryable one
            raise reported_failure(
                self.turn.upstream.provider,
                "workflow_failed",
                self.turn.upstream.redact(f"n8n reported an error: {_error_detail(value)}"),
            )


def _error_detail(chunk: dict[str, Any]) -> str:
    """An `error` chunk's message (n8n sends `content: null` for most node errors) and failed node."""
    detail = chunk.get("content") or "the workflow failed"
    metadata = chunk.get("metadata")
    node = metadata.get("nodeName") if isinstance(metadata, dict) else None
    return f"{detail} (node {node!r})" if isinstance(node, str) and node else str(detail)


async def _read(turn: ServiceTurn, cfg: N8nConfig, resp: httpx.Response) -> None:
    """Reads the body as a stream of items, a JSON answer, or text (decided by its first value)."""
    body = _Body(turn)
    async for chunk in turn.upstream.chunks(resp):
        await body.feed(chunk)
    await body.close()
    if body.text:
        await turn.answer.final(body.raw.decode("utf-8", errors="replace").strip())
    elif not body.streaming:
        await _answer(turn, cfg, body.values, body.raw)


async def _answer(turn: ServiceTurn, cfg: N8nConfig, values: list[Any], raw: bytearray) -> None:
    """A non-streamed body: the output key, the acknowledgement, or the JSON as text."""
    if not values:
        return  # empty body: the base reports n8n.empty_response
    body = values[0] if len(values) == 1 else values
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, dict):
        if cfg.output_key in body:
            value = body[cfg.output_key]
            await turn.answer.final(
                value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            )
            return
        message = body.get("message")
        if set(body) == {"message"} and isinstance(message, str) and _ACK.match(message):
            turn.acknowledge(message)
            return
    if isinstance(body, str):
        await turn.answer.final(body)
        return
    await turn.answer.final(raw.decode("utf-8", errors="replace").strip())
