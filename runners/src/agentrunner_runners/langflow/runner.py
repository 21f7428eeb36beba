"""The official Langflow runner: a Langflow flow as a protocol-v1 runner.

`POST {base-url}/api/v1/run/{flow-id}?stream=true|false` with `x-api-key`, the user's text as
`input_value`, `input_type` / `output_type`, `tweaks` and a `session_id` kept in conversation state
(`external.session_id`, minted once per conversation) so the flow's memory follows the conversation.

The answer is the text of every output of the flow (each Chat Output), joined by a blank line: in the
order Langflow lists them in the result, or, streamed, in the order they arrive (the `end` result
replaces the streamed text only when its texts differ). Streaming (`streaming: true` and a surface that streams): the body is
JSON events separated by blank lines: `token` (`data.chunk` of the AI message `data.id`), `add_message`
(an AI message's full text; a `partial` one, which Langflow 1.x sends for a streamed message's first
chunk before that chunk's own `token`, only marks where the message starts), `end` (the whole result),
`error`; other events are ignored. Otherwise one JSON result with `outputs[0].outputs[i]` per output,
the text at `results.message.text`, the older `outputs.message.message`, or `messages[0].message`.

A flow that fails (a component raises) is `langflow.flow_failed` whether it arrives as a streamed
`error` event or as the HTTP 500 whose body is Langflow's exception body (`detail` = `{"message": …}`);
one whose message names a rate limit (an LLM's 429) is `langflow.rate_limited`, retryable, either way.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrunner import RunContext
from agentrunner.config import JsonConfig
from agentrunner.services import JsonSequence, ServiceError, ServiceRunner, ServiceTurn, reported_failure
from agentrunner.services.config import HttpUrl

SESSION_KEY = "external.session_id"
#: Between the texts of two outputs of one flow.
OUTPUT_SEPARATOR = "\n\n"


class LangflowConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    base_url: HttpUrl = Field("http://localhost:7860", alias="base-url")
    api_key: str = Field("", alias="api-key")
    # one path segment: `manifest.yaml` declares its `pattern`, which the SDK checks before a run and
    # the host's `config check` applies too (one rule for both)
    flow_id: str = Field(alias="flow-id", min_length=1)
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

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        """A 5xx carrying Langflow's exception body is the flow failing, as a streamed `error` is."""
        message = _exception_message(data) if status >= 500 else None
        if message is None:
            return None  # the HTTP status mapping (401/403 key, 404 flow, 429, other 5xx)
        return flow_failed(self.provider, message, status=status)

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
                messages = _Messages(turn)
                async for event in turn.upstream.json_values(resp, JsonSequence(data_prefix=True)):
                    if await messages.event(event):
                        break  # `end`: the run is over (Langflow may keep the connection open)
            else:
                result = await turn.upstream.read_json(resp)
                await _result(turn, result)


class _Messages:
    """The AI messages of a streamed run by message id, in the order they started; the answer shown so
    far is their texts joined by `OUTPUT_SEPARATOR` (each change goes out as a snapshot)."""

    def __init__(self, turn: ServiceTurn) -> None:
        self.turn = turn
        self.texts: dict[str, str] = {}

    async def event(self, event: Any) -> bool:
        """Handles one event; True at `end`."""
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
            return False
        kind, data = event.get("event"), event["data"]
        if kind == "token":
            chunk = data.get("chunk")
            if isinstance(chunk, str) and chunk:
                key = str(data.get("id") or "")
                self.texts[key] = self.texts.get(key, "") + chunk
                await self._show()
        elif kind == "add_message":
            await self._message(data)
        elif kind == "end":
            await self._end(data.get("result"))
            return True
        elif kind == "error":
            raise flow_failed(self.turn.upstream.provider, _error_text(data))
        return False

    async def _message(self, data: dict[str, Any]) -> None:
        if data.get("sender") != "Machine" or data.get("category", "message") not in ("message", None):
            return
        key = str(data.get("id") or "")
        properties = data.get("properties")
        if isinstance(properties, dict) and properties.get("state") == "partial":
            # The first chunk of a streamed message, sent again as its first `token`: only the
            # message's place in the order is taken from it (counting its text too doubled that chunk).
            self.texts.setdefault(key, "")
            return
        text = data.get("text")
        if isinstance(text, str) and text:
            self.texts[key] = text  # a whole message, or the complete text of a streamed one
            await self._show()

    async def _end(self, result: Any) -> None:
        """The whole result: its answer replaces the streamed one only when its texts differ (outputs
        that finished in another order than the flow lists them stay in the order they were shown)."""
        shown = sorted(t for t in self.texts.values() if t)
        if isinstance(result, dict) and shown and sorted(output_texts(result)) == shown:
            _session(self.turn, result)
            return
        await _result(self.turn, result)

    async def _show(self) -> None:
        await self.turn.answer.snapshot(OUTPUT_SEPARATOR.join(t for t in self.texts.values() if t))


async def _result(turn: ServiceTurn, result: Any) -> None:
    """The answer of a whole run result (the non-streaming body, or the `end` event's result)."""
    if not isinstance(result, dict):
        raise turn.upstream.error("response_invalid", "the result is not a JSON object")
    _session(turn, result)
    text = OUTPUT_SEPARATOR.join(output_texts(result))
    if text:
        await turn.answer.final(text)


def _session(turn: ServiceTurn, result: dict[str, Any]) -> None:
    session = result.get("session_id")
    if isinstance(session, str) and session:
        turn.ids.set(SESSION_KEY, session)


def output_texts(result: dict[str, Any]) -> list[str]:
    """Every output's message text (`outputs[0].outputs[i]`, in Langflow's order), empty ones left out."""
    try:
        outputs = result["outputs"][0]["outputs"]
    except (KeyError, IndexError, TypeError):
        return []
    if not isinstance(outputs, list):
        return []
    texts = [_output_text(output) for output in outputs if isinstance(output, dict)]
    return [t for t in texts if t]


def _output_text(output: dict[str, Any]) -> str:
    """One output's message text: the current shape, the older one, or `messages[0].message`."""
    paths = (
        ("results", "message", "text"),
        ("results", "message", "data", "text"),
        ("outputs", "message", "message"),
    )
    for path in paths:
        value: Any = output
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            return value
    messages = output.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        message = messages[0].get("message")
        if isinstance(message, str):
            return message
    return ""


def flow_failed(provider: str, detail: str, *, status: int | None = None) -> ServiceError:
    """The flow's run failed: `flow_failed`, or `rate_limited` when the failure names a rate limit."""
    text = re.sub(r"\s+", " ", detail).strip() or "no detail"
    return reported_failure(provider, "flow_failed", f"the flow failed: {text}"[:1000], status=status)


def _error_text(data: dict[str, Any]) -> str:
    """An `error` event's message: `text` (Langflow 1.x's error message), `error` or `message`."""
    for key in ("text", "error", "message"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return "no detail"


def _exception_message(data: Any) -> str | None:
    """The message of Langflow's exception body: `{"detail": "<JSON {message, traceback, …}>"}`, or the
    older plain `{"detail": "Error running graph: …"}`."""
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, str):
        if detail.startswith("Error running graph"):
            return detail
        try:
            detail = json.loads(detail)
        except json.JSONDecodeError:
            return None
    message = detail.get("message") if isinstance(detail, dict) else None
    if isinstance(message, list):
        message = "; ".join(str(m) for m in message)
    return message if isinstance(message, str) else None
