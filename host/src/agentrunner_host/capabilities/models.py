"""Model providers the host calls on behalf of runners (PROTOCOL_V1 §8 "Model").

Runners never hold provider keys: the host reads them from its environment and talks to the
OpenAI-compatible HTTP APIs itself. Every failure becomes a typed `AgentRunnerError`, so the proxy
servicer can map it to one gRPC status with one ErrorInfo, and rate limits and timeouts come back as
retryable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import httpx
import structlog
from google.protobuf import json_format, struct_pb2
from pydantic import BaseModel, ConfigDict, Field

from agentrunner.errors import (
    AgentRunnerError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    RateLimitedError,
    RuntimeFailureError,
)
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.observability import MODEL_CALL_DURATION, count_tokens, observed_call

log = structlog.get_logger(__name__)

ModelKind = Literal["openai-chat", "openai-embedding", "rerank"]

#: Spec `model_type` of each provider kind (ModelResource.model_type).
MODEL_TYPES: dict[str, str] = {"openai-chat": "llm", "openai-embedding": "embedding", "rerank": "rerank"}
#: Operations a model of each type can serve (the resource builder intersects them with policy).
MODEL_OPERATIONS: dict[str, frozenset[str]] = {
    "llm": frozenset({"invoke", "stream", "count_tokens"}),
    "embedding": frozenset({"embed"}),
    "rerank": frozenset({"rerank"}),
}


class ModelConfig(BaseModel):
    """One provider entry of the host config."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: ModelKind = "openai-chat"
    #: e.g. `https://api.openai.com/v1`; `/chat/completions`, `/embeddings`, `/rerank` are appended
    base_url: str
    #: name of the environment variable holding the API key (never the key itself)
    api_key_env: str | None = None
    #: the provider's model name
    model: str
    provider: str = "openai-compatible"
    context_window: int = 0
    vision: bool = False
    #: request body fields merged under the agent's and the request's extra args
    extra_args: dict[str, Any] = Field(default_factory=dict)
    #: seconds; the run deadline clips it
    timeout: float = 120.0

    @property
    def model_type(self) -> str:
        return MODEL_TYPES[self.kind]


class UsageSink(Protocol):
    """Where per-run model usage and call counts go (the lead connects it to the run ledger)."""

    async def record_model_usage(
        self, run_id: str, model_id: str, usage: common_pb2.Usage, calls: int
    ) -> None: ...


#: Resolves `artifact://<id>` image URIs to (bytes, mime type) for the run that sent them.
ArtifactResolver = Callable[[str, str], Awaitable[tuple[bytes, str]]]


# --------------------------------------------------------------------------- think stripping

_THINK_RE = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_OPEN, _CLOSE = "<think>", "</think>"


def strip_think(text: str) -> str:
    """Removes `<think>…</think>` blocks (an unclosed block runs to the end) from a whole answer."""
    return _THINK_RE.sub("", text).lstrip() if _OPEN in text else text


class ThinkFilter:
    """Streaming `<think>` remover: tags may be split across chunks, so a possible tag prefix at
    the end of a chunk is held back until the next chunk decides it."""

    def __init__(self) -> None:
        self._buf = ""
        self._inside = False
        self._started = False  # strip leading whitespace left after a leading think block

    def feed(self, text: str) -> str:
        self._buf += text
        out: list[str] = []
        while self._buf:
            tag = _CLOSE if self._inside else _OPEN
            pos = self._buf.find(tag)
            if pos >= 0:
                if not self._inside:
                    out.append(self._buf[:pos])
                self._buf = self._buf[pos + len(tag) :]
                self._inside = not self._inside
                continue
            keep = _partial_suffix(self._buf, tag)
            if not self._inside:
                out.append(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :] if keep else ""
            break
        return self._emit("".join(out))

    def flush(self) -> str:
        rest = "" if self._inside else self._buf
        self._buf = ""
        return self._emit(rest)

    def _emit(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            self._started = bool(text)
        return text


def _partial_suffix(buf: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:n]):
            return n
    return 0


# --------------------------------------------------------------------------- token estimate

ESTIMATE_METHOD = "estimate:chars-v1"
"""Documented estimate (no offline tokenizer ships with a BPE table: tiktoken downloads its encodings
at first use, so the host does not use it). Per text: ceil(non-CJK characters / 4) + CJK characters
(one token each); per message +4; per image +85 (OpenAI's low-detail cost); per tool the JSON of its
definition as text; +3 for the reply primer."""


def _text_tokens(text: str) -> int:
    cjk = sum(1 for ch in text if "\u2e80" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return math.ceil((len(text) - cjk) / 4) + cjk


def estimate_tokens(
    messages: Sequence[common_pb2.ModelMessage], tools: Sequence[common_pb2.ToolDefinition] = ()
) -> int:
    total = 3
    for message in messages:
        total += 4 + _text_tokens(message.role) + _text_tokens(message.content) + _text_tokens(message.name)
        for element in message.contents:
            kind = element.WhichOneof("kind")
            if kind == "text":
                total += _text_tokens(element.text)
            elif kind == "image":
                total += 85
        for call in message.tool_calls:
            total += _text_tokens(call.name) + _text_tokens(call.arguments_json)
    for tool in tools:
        total += _text_tokens(json.dumps(_tool_json(tool), separators=(",", ":")))
    return total


# --------------------------------------------------------------------------- wire conversion


def struct_to_dict(value: struct_pb2.Struct | None) -> dict[str, Any]:
    return json_format.MessageToDict(value) if value is not None and value.fields else {}


def _tool_json(tool: common_pb2.ToolDefinition) -> dict[str, Any]:
    parameters = struct_to_dict(tool.parameters) or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
    }


def usage_from_json(data: Mapping[str, Any] | None) -> common_pb2.Usage:
    usage = common_pb2.Usage()
    if not data:
        return usage
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if isinstance(data.get(key), int):
            setattr(usage, key, data[key])
    extra = {k: v for k, v in data.items() if k not in {"prompt_tokens", "completion_tokens", "total_tokens"}}
    if extra:
        usage.extra.update(json.loads(json.dumps(extra)))
    return usage


def _tool_call_pb(raw: Mapping[str, Any]) -> common_pb2.ToolCall:
    function = raw.get("function") or {}
    return common_pb2.ToolCall(
        id=raw.get("id") or "",
        name=function.get("name") or "",
        arguments_json=function.get("arguments") or "",
    )


# --------------------------------------------------------------------------- errors


def _provider_error(response: httpx.Response, model_id: str) -> AgentRunnerError:
    try:
        detail = response.json().get("error", {})
        message = detail.get("message") if isinstance(detail, dict) else str(detail)
    except (ValueError, AttributeError):
        message = response.text[:200]
    message = f"model {model_id}: provider answered {response.status_code}: {message or 'no detail'}"
    meta = {"modelId": model_id, "httpStatus": response.status_code}
    status = response.status_code
    if status == 429:
        if "retry-after" in response.headers:
            meta["retryAfter"] = response.headers["retry-after"]
        return RateLimitedError(message, metadata=meta)
    if status in (408, 504):
        return DeadlineExceededError(message, metadata=meta)
    if status >= 500:
        return RuntimeFailureError(message, retryable=True, metadata=meta)
    return InvalidArgumentError(message, metadata=meta)


def _transport_error(exc: Exception, model_id: str) -> AgentRunnerError:
    meta = {"modelId": model_id}
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return DeadlineExceededError(f"model {model_id}: the provider did not answer in time", metadata=meta)
    return RuntimeFailureError(
        f"model {model_id}: provider unreachable ({type(exc).__name__})", retryable=True, metadata=meta
    )


# --------------------------------------------------------------------------- registry


#: the operation of each OpenAI-compatible path (span names and the latency metric's label)
_OPERATIONS = {"/chat/completions": "chat", "/embeddings": "embed", "/rerank": "rerank"}


def _model_attributes(config: ModelConfig, operation: str) -> dict[str, str]:
    """OpenTelemetry GenAI attributes of a model call (never its content, never the key)."""
    return {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": config.model,
        "agentrunner.model_id": config.id,
        "server.address": httpx.URL(config.base_url).host,
    }


class ModelRegistry:
    """All configured models; one shared HTTP client (connection pooling, no per-call handshakes)."""

    def __init__(
        self,
        configs: Sequence[ModelConfig],
        *,
        usage_sink: UsageSink | None = None,
        artifact_resolver: ArtifactResolver | None = None,
        http_client: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._configs = {c.id: c for c in configs}
        if len(self._configs) != len(configs):
            raise ValueError("duplicate model id in config")
        self.usage_sink = usage_sink
        self.artifact_resolver = artifact_resolver
        self._client = http_client or httpx.AsyncClient(timeout=None)
        self._owns_client = http_client is None
        self._environ = environ if environ is not None else os.environ

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    # ---- lookup

    def configs(self) -> list[ModelConfig]:
        return list(self._configs.values())

    def get(self, model_id: str, model_type: str | None = None) -> ModelConfig:
        config = self._configs.get(model_id)
        if config is None:
            raise NotFoundError(f"model {model_id!r} is not configured", metadata={"modelId": model_id})
        if model_type is not None and config.model_type != model_type:
            raise InvalidArgumentError(
                f"model {model_id!r} is a {config.model_type} model, not {model_type}", field="model_id"
            )
        return config

    # ---- plumbing

    def _headers(self, config: ModelConfig) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if config.api_key_env:
            key = self._environ.get(config.api_key_env)
            if not key:
                raise RuntimeFailureError(
                    f"model {config.id}: the host has no API key (environment variable "
                    f"{config.api_key_env} is unset)",
                    metadata={"modelId": config.id},
                )
            headers["authorization"] = f"Bearer {key}"
        return headers

    @staticmethod
    def _url(config: ModelConfig, path: str) -> str:
        return config.base_url.rstrip("/") + path

    @staticmethod
    def _budget(config: ModelConfig, time_remaining: float | None) -> float:
        return config.timeout if time_remaining is None else min(config.timeout, time_remaining)

    async def _record(self, run_id: str | None, model_id: str, usage: common_pb2.Usage) -> None:
        count_tokens(model_id, usage.prompt_tokens, usage.completion_tokens)
        if self.usage_sink is None or not run_id:
            return
        try:
            await self.usage_sink.record_model_usage(run_id, model_id, usage, 1)
        except Exception:  # the ledger failing must not fail the model call the runner already paid for
            log.warning("usage_sink_failed", run_id=run_id, model_id=model_id, exc_info=True)

    async def _post_json(
        self, config: ModelConfig, path: str, body: dict[str, Any], budget: float
    ) -> dict[str, Any]:
        operation = _OPERATIONS[path]
        with observed_call(
            f"agentrunner.model/{operation}",
            MODEL_CALL_DURATION,
            _model_attributes(config, operation),
            model=config.id,
            operation=operation,
        ):
            return await self._post_json_call(config, path, body, budget)

    async def _post_json_call(
        self, config: ModelConfig, path: str, body: dict[str, Any], budget: float
    ) -> dict[str, Any]:
        try:
            async with asyncio.timeout(budget):
                response = await self._client.post(
                    self._url(config, path),
                    json=body,
                    headers=self._headers(config),
                    timeout=httpx.Timeout(budget),
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            raise _transport_error(exc, config.id) from None
        if response.status_code != 200:
            raise _provider_error(response, config.id)
        try:
            answer: dict[str, Any] = response.json()  # (the provider's JSON: checked by the callers)
            return answer
        except ValueError:
            raise RuntimeFailureError(
                f"model {config.id}: provider answered with invalid JSON", metadata={"modelId": config.id}
            ) from None

    async def _message_json(
        self, config: ModelConfig, message: common_pb2.ModelMessage, run_id: str
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"role": message.role or "user"}
        if message.name:
            out["name"] = message.name
        if message.tool_call_id:
            out["tool_call_id"] = message.tool_call_id
        if message.contents:
            parts: list[dict[str, Any]] = []
            for element in message.contents:
                kind = element.WhichOneof("kind")
                if kind == "text":
                    parts.append({"type": "text", "text": element.text})
                elif kind == "image":
                    if not config.vision:
                        raise InvalidArgumentError(
                            f"model {config.id} does not accept images", field="messages.contents"
                        )
                    url = await self._image_url(element.image.uri, run_id)
                    image: dict[str, Any] = {"url": url}
                    if element.image.detail:
                        image["detail"] = element.image.detail
                    parts.append({"type": "image_url", "image_url": image})
                else:
                    log.warning("model_content_skipped", kind=kind, model_id=config.id)
            out["content"] = parts
        else:
            out["content"] = message.content if message.content or not message.tool_calls else None
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in message.tool_calls
            ]
        return out

    async def _image_url(self, uri: str, run_id: str) -> str:
        if uri.startswith(("http://", "https://", "data:")):
            return uri
        if uri.startswith("artifact://") and self.artifact_resolver is not None:
            import base64

            data, mime = await self.artifact_resolver(run_id, uri.removeprefix("artifact://"))
            return f"data:{mime};base64,{base64.b64encode(data).decode()}"
        raise InvalidArgumentError(f"unsupported image URI scheme: {uri[:32]}", field="messages.contents")

    async def _chat_body(
        self,
        config: ModelConfig,
        messages: Sequence[common_pb2.ModelMessage],
        tools: Sequence[common_pb2.ToolDefinition],
        extra_args: Mapping[str, Any] | None,
        agent_extra_args: Mapping[str, Any] | None,
        run_id: str,
    ) -> dict[str, Any]:
        if not messages:
            raise InvalidArgumentError("messages must not be empty", field="messages")
        # model config < agent config < request: the most specific wins
        body: dict[str, Any] = {**config.extra_args, **(agent_extra_args or {}), **(extra_args or {})}
        body["model"] = config.model
        body["messages"] = [await self._message_json(config, m, run_id) for m in messages]
        if tools:
            body["tools"] = [_tool_json(t) for t in tools]
        return body

    # ---- chat

    async def invoke(
        self,
        model_id: str,
        messages: Sequence[common_pb2.ModelMessage],
        tools: Sequence[common_pb2.ToolDefinition] = (),
        extra_args: Mapping[str, Any] | None = None,
        *,
        agent_extra_args: Mapping[str, Any] | None = None,
        remove_think: bool = False,
        time_remaining: float | None = None,
        run_id: str = "",
    ) -> proxy_service_pb2.InvokeModelResponse:
        """One whole answer. `time_remaining` is the run's budget (`ProxyCall.time_remaining()`)."""
        config = self.get(model_id, "llm")
        body = await self._chat_body(config, messages, tools, extra_args, agent_extra_args, run_id)
        body["stream"] = False
        data = await self._post_json(config, "/chat/completions", body, self._budget(config, time_remaining))
        try:
            choice = data["choices"][0]
            raw = choice.get("message") or {}
        except (KeyError, IndexError, TypeError):
            raise RuntimeFailureError(
                f"model {model_id}: provider answer has no choices", metadata={"modelId": model_id}
            ) from None
        content = raw.get("content") or ""
        if isinstance(content, list):  # some providers answer with parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if remove_think:
            content = strip_think(content)
        message = common_pb2.ModelMessage(
            role="assistant",
            content=content,
            tool_calls=[_tool_call_pb(c) for c in raw.get("tool_calls") or []],
        )
        usage = usage_from_json(data.get("usage"))
        await self._record(run_id, model_id, usage)
        return proxy_service_pb2.InvokeModelResponse(
            message=message, usage=usage, finish_reason=choice.get("finish_reason") or ""
        )

    async def stream(
        self,
        model_id: str,
        messages: Sequence[common_pb2.ModelMessage],
        tools: Sequence[common_pb2.ToolDefinition] = (),
        extra_args: Mapping[str, Any] | None = None,
        *,
        agent_extra_args: Mapping[str, Any] | None = None,
        remove_think: bool = False,
        time_remaining: float | None = None,
        run_id: str = "",
    ) -> AsyncGenerator[proxy_service_pb2.StreamModelResponse, None]:
        """Streams chunks, then the usage. Closing the iterator (or cancelling its consumer) closes
        the upstream HTTP response, which the provider sees as a client disconnect."""
        config = self.get(model_id, "llm")
        body = await self._chat_body(config, messages, tools, extra_args, agent_extra_args, run_id)
        body["stream"] = True
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._budget(config, time_remaining)
        think = ThinkFilter() if remove_think else None
        calls: dict[int, dict[str, str]] = {}
        usage: common_pb2.Usage | None = None
        finished = False

        def left() -> float:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise DeadlineExceededError(
                    f"model {model_id}: the stream did not finish in time", metadata={"modelId": model_id}
                )
            return remaining

        request = self._client.build_request(
            "POST",
            self._url(config, "/chat/completions"),
            json=body,
            headers=self._headers(config),
            timeout=httpx.Timeout(left()),
        )
        response: httpx.Response | None = None
        with observed_call(
            "agentrunner.model/chat_stream",
            MODEL_CALL_DURATION,
            _model_attributes(config, "chat"),
            model=model_id,
            operation="chat_stream",
        ):
            try:
                try:
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that races
                    # a completed read, and a cancelled consumer must always stop the upstream request
                    async with asyncio.timeout(left()):
                        response = await self._client.send(request, stream=True)
                except (httpx.HTTPError, TimeoutError) as exc:
                    raise _transport_error(exc, model_id) from None
                if response.status_code != 200:
                    await response.aread()
                    raise _provider_error(response, model_id)
                lines = response.aiter_lines()
                while True:
                    try:
                        async with asyncio.timeout(left()):
                            line = await anext(lines)
                    except StopAsyncIteration:
                        break
                    except (httpx.HTTPError, TimeoutError) as exc:
                        raise _transport_error(exc, model_id) from None
                    if not line.startswith("data:"):
                        continue  # comments, `event:` lines and the blank separators
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    try:
                        data = json.loads(payload)
                    except ValueError:
                        log.warning("model_stream_bad_chunk", model_id=model_id)
                        continue
                    if "error" in data:
                        err = data["error"] if isinstance(data["error"], dict) else {"message": data["error"]}
                        raise RuntimeFailureError(
                            f"model {model_id}: provider failed mid-stream: {err.get('message')}",
                            retryable=True,
                            metadata={"modelId": model_id},
                        )
                    if data.get("usage"):
                        usage = usage_from_json(data["usage"])
                    for choice in data.get("choices") or []:
                        delta = choice.get("delta") or {}
                        text = delta.get("content") or ""
                        if think is not None and text:
                            text = think.feed(text)
                        for part in delta.get("tool_calls") or []:
                            slot = calls.setdefault(
                                part.get("index", 0), {"id": "", "name": "", "arguments": ""}
                            )
                            function = part.get("function") or {}
                            slot["id"] = part.get("id") or slot["id"]
                            slot["name"] += function.get("name") or ""
                            slot["arguments"] += function.get("arguments") or ""
                        reason = choice.get("finish_reason") or ""
                        chunk = proxy_service_pb2.ModelChunk(content=text, finish_reason=reason)
                        if reason:
                            finished = True
                            if think is not None:
                                chunk.content += think.flush()
                            chunk.tool_calls.extend(
                                common_pb2.ToolCall(id=c["id"], name=c["name"], arguments_json=c["arguments"])
                                for _, c in sorted(calls.items())
                            )
                            calls.clear()
                        if chunk.content or chunk.tool_calls or chunk.finish_reason:
                            yield proxy_service_pb2.StreamModelResponse(chunk=chunk)
                if not finished:
                    tail = think.flush() if think is not None else ""
                    if tail or calls:
                        yield proxy_service_pb2.StreamModelResponse(
                            chunk=proxy_service_pb2.ModelChunk(
                                content=tail,
                                tool_calls=[
                                    common_pb2.ToolCall(
                                        id=c["id"], name=c["name"], arguments_json=c["arguments"]
                                    )
                                    for _, c in sorted(calls.items())
                                ],
                                finish_reason="stop",
                            )
                        )
                final_usage = usage or common_pb2.Usage()
                await self._record(run_id, model_id, final_usage)
                if usage is not None:
                    yield proxy_service_pb2.StreamModelResponse(usage=usage)
            finally:
                if response is not None:
                    # shielded so a cancelled consumer still closes the socket to the provider
                    with contextlib.suppress(Exception):
                        await asyncio.shield(response.aclose())

    # ---- rerank, embeddings, tokens

    async def rerank(
        self,
        model_id: str,
        query: str,
        documents: Sequence[str],
        top_k: int = 0,
        extra_args: Mapping[str, Any] | None = None,
        *,
        time_remaining: float | None = None,
        run_id: str = "",
    ) -> list[tuple[int, float]]:
        """(document index, relevance score), best first (`POST {base}/rerank`)."""
        config = self.get(model_id, "rerank")
        if not query:
            raise InvalidArgumentError("query must not be empty", field="query")
        if not documents:
            return []
        body: dict[str, Any] = {**config.extra_args, **(extra_args or {})}
        body.update(model=config.model, query=query, documents=list(documents))
        if top_k > 0:
            body["top_n"] = top_k
        data = await self._post_json(config, "/rerank", body, self._budget(config, time_remaining))
        results = data.get("results") or data.get("data") or []
        out: list[tuple[int, float]] = []
        for item in results:
            index = int(item.get("index", -1))
            if 0 <= index < len(documents):
                out.append((index, float(item.get("relevance_score", item.get("score", 0.0)))))
        out.sort(key=lambda r: -r[1])
        await self._record(run_id, model_id, usage_from_json(data.get("usage")))
        return out[:top_k] if top_k > 0 else out

    async def embed(
        self, model_id: str, texts: Sequence[str], *, time_remaining: float | None = None, run_id: str = ""
    ) -> list[list[float]]:
        """One vector per text (`POST {base}/embeddings`), in input order."""
        config = self.get(model_id, "embedding")
        if not texts:
            return []
        body = {**config.extra_args, "model": config.model, "input": list(texts)}
        data = await self._post_json(config, "/embeddings", body, self._budget(config, time_remaining))
        items = sorted(data.get("data") or [], key=lambda d: d.get("index", 0))
        if len(items) != len(texts):
            raise RuntimeFailureError(
                f"model {model_id}: provider returned {len(items)} vectors for {len(texts)} texts",
                metadata={"modelId": model_id},
            )
        await self._record(run_id, model_id, usage_from_json(data.get("usage")))
        return [[float(x) for x in item["embedding"]] for item in items]

    def embedder(self, model_id: str) -> Callable[[Sequence[str]], Awaitable[list[list[float]]]]:
        """A plain `texts -> vectors` callable for knowledge ingestion and retrieval."""
        self.get(model_id, "embedding")

        async def embed(texts: Sequence[str]) -> list[list[float]]:
            return await self.embed(model_id, texts)

        return embed

    def count_tokens(
        self,
        model_id: str,
        messages: Sequence[common_pb2.ModelMessage],
        tools: Sequence[common_pb2.ToolDefinition] = (),
    ) -> proxy_service_pb2.CountTokensResponse:
        """Always the documented estimate (`exact=false`): see `ESTIMATE_METHOD`."""
        self.get(model_id, "llm")
        return proxy_service_pb2.CountTokensResponse(
            tokens=estimate_tokens(messages, tools), exact=False, method=ESTIMATE_METHOD
        )
