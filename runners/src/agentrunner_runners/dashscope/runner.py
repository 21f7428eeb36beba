"""The official DashScope runner: an Alibaba Cloud Model Studio (Bailian) app as a protocol-v1 runner.

`POST {base-url}/apps/{app-id}/completion` with `X-DashScope-SSE: enable`: `input.prompt`,
`input.session_id` (kept in conversation state as `external.conversation_id`), `input.biz_params`
(the adapter's business params), `input.image_list` (image attachments given by URL), and
`parameters.incremental_output` / `has_thoughts` (workflow apps add `flow_stream_mode=message_format`).

Each SSE `result` event carries `output.text` (or, for workflow apps, `output.workflow_message.message
.content`): increments when the request asked for `incremental_output`, cumulative snapshots when it
did not; which one is decided from the request sent, never guessed from the text. `finish_reason` is
the string `"null"` until the last event. `output.thoughts` are progress, never the answer;
`<ref>[n]</ref>` markers become `[n]` and `doc_references` a references list after the answer (also
in the terminal's `metadata.references`). `event:error` blocks, and JSON bodies where the stream was
expected, are failures: the same rule for both, a rate limit (HTTP 429, a `Throttling*` or
`LimitRequests` code, rate-limit wording) is `dashscope.rate_limited`, retryable, other reported
errors are not.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrunner import RunContext
from agentrunner.services import ServiceError, ServiceRunner, ServiceTurn, mentions_rate_limit
from agentrunner.services.config import HttpUrl
from agentrunner.services.parsers import partial_suffix

CONVERSATION_KEY = "external.conversation_id"
_AUTH = ("InvalidApiKey", "AccessDenied", "Unauthorized")
_OPEN, _CLOSE = "<ref>", "</ref>"
#: a `<ref>` marker longer than this is not one: its text is passed through as it is
_MAX_MARKER = 64


class DashScopeConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    base_url: HttpUrl = Field("https://dashscope.aliyuncs.com/api/v1", alias="base-url")
    api_key: str = Field(alias="api-key", min_length=1)
    app_id: str = Field(
        alias="app-id", min_length=1
    )  # `pattern` in manifest.yaml: one rule with config check
    app_type: Literal["agent", "workflow"] = Field("agent", alias="app-type")
    incremental_output: bool = Field(True, alias="incremental-output")
    references_quote: str = "参考资料来自:"
    timeout: float = Field(120, gt=0, le=3600)


class DashScopeRunner(ServiceRunner):
    """DashScope agent and workflow apps (manifest: `manifest.yaml` next to this module)."""

    manifest_file = "manifest.yaml"
    config_model = DashScopeConfig
    provider = "dashscope"

    def json_error(self, data: Any, status: int) -> ServiceError | None:
        if not isinstance(data, dict) or not data.get("code"):
            return None
        return _error(self.provider, data, status)

    async def exchange(self, ctx: RunContext, turn: ServiceTurn) -> None:
        cfg: DashScopeConfig = ctx.config
        data_in: dict[str, Any] = {"prompt": ctx.input.to_text()}
        session = turn.ids.get(CONVERSATION_KEY)
        if session:
            data_in["session_id"] = session
        params = ctx.adapter.get("params")
        if isinstance(params, dict) and params:
            data_in["biz_params"] = params
        images = _image_urls(turn, ctx)
        if images:
            data_in["image_list"] = images
        parameters: dict[str, Any] = {"incremental_output": cfg.incremental_output, "has_thoughts": True}
        if cfg.app_type == "workflow":
            parameters["flow_stream_mode"] = "message_format"
        headers = {
            "Authorization": f"Bearer {cfg.api_key}",
            "X-DashScope-SSE": "enable",
            "Accept": "text/event-stream",
        }
        url = f"{cfg.base_url}/apps/{cfg.app_id}/completion"
        body = {"input": data_in, "parameters": parameters, "debug": {}}
        reader = _Reader(turn, cfg)
        async with turn.upstream.stream("POST", url, json=body, headers=headers) as resp:
            async for event in turn.upstream.sse(resp):
                await reader.event(event.event, event.data)
        await reader.finish()


class _Reader:
    def __init__(self, turn: ServiceTurn, cfg: DashScopeConfig) -> None:
        self.turn = turn
        self.cfg = cfg
        self.refs = RefRenderer()
        self.raw = ""  # the cumulative text (snapshot mode)
        self.thoughts: list[str] = []
        self.references: list[dict[str, str]] = []
        self.models: dict[str, tuple[int, int]] = {}

    async def event(self, name: str, raw: str) -> None:
        try:
            data = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            raise self.turn.upstream.error(
                "response_invalid", f"an event is not JSON: {raw[:80]!r}"
            ) from None
        if not isinstance(data, dict):
            return
        if name == "error" or (data.get("code") and "output" not in data):
            raise _error("dashscope", data, 200, stream=True)
        output = data.get("output") or {}
        if isinstance(output.get("session_id"), str) and output["session_id"]:
            self.turn.ids.set(CONVERSATION_KEY, output["session_id"])
        await self._thoughts(output.get("thoughts"))
        text = _text(output, self.cfg.app_type)
        if text:
            if self.cfg.incremental_output:
                await self.turn.answer.add(self.refs.feed(text))
            else:
                self.raw = text
                await self.turn.answer.snapshot(RefRenderer().feed(text))
        for ref in output.get("doc_references") or []:
            if isinstance(ref, dict) and ref.get("index_id") is not None:
                self.references.append(
                    {
                        "index": str(ref["index_id"]),
                        "name": str(ref.get("doc_name") or ref.get("title") or ""),
                    }
                )
        reason = output.get("finish_reason")
        if isinstance(reason, str) and reason not in ("null", "stop", ""):
            self.turn.finish_reason = reason
        self._usage(data.get("usage"))

    async def finish(self) -> None:
        if self.cfg.incremental_output:
            await self.turn.answer.add(self.refs.close())
        elif self.raw:
            renderer = RefRenderer()
            await self.turn.answer.snapshot(renderer.feed(self.raw) + renderer.close())
        if self.references and self.turn.answer.has_output:
            lines = [f"[{r['index']}] {r['name']}" for r in self.references]
            await self.turn.answer.add("\n\n" + "\n".join([self.cfg.references_quote, *lines]))
            self.turn.metadata["references"] = self.references
        if self.models:
            prompt = sum(p for p, _ in self.models.values())
            completion = sum(c for _, c in self.models.values())
            self.turn.set_usage(prompt, completion, prompt + completion)

    async def _thoughts(self, thoughts: Any) -> None:
        if not isinstance(thoughts, list):
            return
        for i, item in enumerate(thoughts):
            thought = item.get("thought") if isinstance(item, dict) else None
            if not isinstance(thought, str) or not thought.strip():
                continue
            if i < len(self.thoughts):
                if self.thoughts[i] == thought:
                    continue  # the same thought, repeated by a later event
                self.thoughts[i] = thought
            else:
                self.thoughts.append(thought)
            await self.turn.answer.progress(thought.strip())

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for model in usage.get("models") or []:
            if isinstance(model, dict):
                name = str(model.get("model_id") or len(self.models))
                self.models[name] = (
                    int(model.get("input_tokens") or 0),
                    int(model.get("output_tokens") or 0),
                )
        if "input_tokens" in usage and not usage.get("models"):
            self.models["_"] = (int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))


class RefRenderer:
    """`<ref>[1]</ref>` citation markers -> `[1]`, for text that streams in pieces (a marker split
    across pieces is held back until it is complete)."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        buf = self._held + text
        out: list[str] = []
        while True:
            start = buf.find(_OPEN)
            if start < 0:
                keep = partial_suffix(buf, _OPEN)
                out.append(buf[: len(buf) - keep])
                self._held = buf[len(buf) - keep :]
                break
            end = buf.find(_CLOSE, start)
            if end < 0:
                out.append(buf[:start])
                self._held = buf[start:]
                if len(self._held) > _MAX_MARKER:  # not a marker after all
                    out.append(self._held)
                    self._held = ""
                break
            out.append(buf[:start] + buf[start + len(_OPEN) : end])
            buf = buf[end + len(_CLOSE) :]
        return "".join(out)

    def close(self) -> str:
        held, self._held = self._held, ""
        return held


def _text(output: dict[str, Any], app_type: str) -> str:
    if app_type == "workflow":
        message = (output.get("workflow_message") or {}).get("message") or {}
        content = message.get("content")
        if isinstance(content, str) and content:
            return content
    text = output.get("text")
    return text if isinstance(text, str) else ""


def _image_urls(turn: ServiceTurn, ctx: RunContext) -> list[str]:
    urls = []
    for ref in ctx.input.attachments:
        if ref.uri.startswith(("http://", "https://")):
            urls.append(ref.uri)
        elif ref.artifact_id:
            raise turn.upstream.error(
                "input_error",
                f"attachment {ref.name or ref.artifact_id!r}: DashScope apps take images by URL only "
                "(the host stores this one)",
            )
    return urls


def _error(provider: str, data: dict[str, Any], status: int, *, stream: bool = False) -> ServiceError:
    code = str(data.get("code") or "")
    message = f"{data.get('message') or 'error'} ({code})" if code else str(data.get("message") or "error")
    detail = {"service_code": code, "request_id": str(data.get("request_id") or "")}
    if status in (401, 403) or code.startswith(_AUTH):
        return ServiceError(provider, "auth_error", message, status=status, details=detail)
    if mentions_rate_limit(message, code, status=status):  # 429, `Throttling*`, `LimitRequests`, ...
        return ServiceError(provider, "rate_limited", message, status=status, details=detail)
    if status >= 500 and not stream:
        return ServiceError(provider, "server_error", message, status=status, details=detail)
    return ServiceError(
        provider, "stream_error" if stream else "api_error", message, status=status, details=detail
    )
