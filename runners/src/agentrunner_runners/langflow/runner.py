"""The official Langflow runner: a Langflow flow as a protocol-v1 runner.

`POST {base-url}/api/v1/run/{flow-id}?stream=true|false` with `x-api-key`, the user's text as
`input_value`, `input_type` / `output_type`, `tweaks` and a `session_id` kept in conversation state
(`external.session_id`, minted once per conversation) so the flow's memory follows the conversation.

Streaming (`streaming: true` and a surface that streams): the body is JSON events separated by blank
lines: `token` (`data.chunk`, an answer increment), `add_message` (the AI message's full text, a
snapshot), `end` (the whole result), `error`; other events are ignored. Otherwise one JSON result
whose answer is at `outputs[0].outputs[0].results.message.text`, or the older
`outputs[0].outputs[0].outputs.message.message`, or `messages[0].message`.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrunner import RunContext
from agentrunner.config import JsonConfig
from agentrunner.services import JsonSequence, ServiceRunner, ServiceTurn
from agentrunner.services.config import HttpUrl

SESSION_KEY = "external.session_id"


class LangflowConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    base_url: HttpUrl = Field("http://localhost:7860", alias="base-url")
    api_key: str = Field("", alias="api-key")
    flow_id: str = Field(alias="flow-id", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    input_type: str = Field("chat", alias="input-type")
    output_type: str = Field("chat", alias="output-type")
    tweaks: JsonConfig[dict[str, Any]] = Field(default_factory=dict)
    streaming: bool = True
    timeout: float = Field(120, gt=0, le=3600)


class LangflowRunner(ServiceRunner):
    """Langflow flows (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = LangflowConfig
    provider = "langflow"

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:
        cfg: LangflowConfig = ctx.config
        session = turn.ids.get(SESSION_KEY) or str(uuid.uuid4())
        turn.ids.set(SESSION_KEY, session)
        body = {
            "input_value": ctx.input.to_text(),
            "input_type": cfg.input_type,
            "output_type": cfg.output_type,
            "session_id": session,
            "tweaks": cfg.tweaks or None,
        }
        headers = {"x-api-key": cfg.api_key} if cfg.api_key else {}
        url = f"{cfg.base_url}/api/v1/run/{cfg.flow_id}"
        params = {"stream": "true" if turn.streaming else "false"}
        async with turn.upstream.stream("POST", url, json=body, headers=headers, params=params) as resp:
            if turn.streaming:
                async for event in turn.upstream.json_values(resp, JsonSequence(data_prefix=True)):
                    await _event(turn, event)
            else:
                result = await turn.upstream.read_json(resp)
                await _result(turn, result)


async def _event(turn: ServiceTurn, event: Any) -> None:
    if not isinstance(event, dict):
        return
    kind, data = event.get("event"), event.get("data")
    if not isinstance(data, dict):
        return
    if kind == "token":
        chunk = data.get("chunk")
        if isinstance(chunk, str):
            await turn.answer.add(chunk)
    elif kind == "add_message":
        if data.get("sender") == "Machine" and isinstance(data.get("text"), str) and data["text"]:
            await turn.answer.snapshot(data["text"])
    elif kind == "end":
        result = data.get("result")
        if isinstance(result, dict):
            await _result(turn, result)
    elif kind == "error":
        detail = data.get("error") or data.get("text") or "the flow failed"
        raise turn.upstream.error("stream_error", f"Langflow reported an error: {detail}")


async def _result(turn: ServiceTurn, result: Any) -> None:
    """The answer of a whole run result (the non-streaming body, or the `end` event's result)."""
    if not isinstance(result, dict):
        raise turn.upstream.error("response_invalid", "the result is not a JSON object")
    session = result.get("session_id")
    if isinstance(session, str) and session:
        turn.ids.set(SESSION_KEY, session)
    text = answer_text(result)
    if text:
        await turn.answer.final(text)


def answer_text(result: dict[str, Any]) -> str:
    """`outputs[0].outputs[0]`'s message text, in the current shape, the older one, or `messages`."""
    try:
        first = result["outputs"][0]["outputs"][0]
    except (KeyError, IndexError, TypeError):
        return ""
    if not isinstance(first, dict):
        return ""
    paths = (
        ("results", "message", "text"),
        ("results", "message", "data", "text"),
        ("outputs", "message", "message"),
    )
    for path in paths:
        value: Any = first
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            return value
    messages = first.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        message = messages[0].get("message")
        if isinstance(message, str):
            return message
    return ""
