"""Model providers the host calls on behalf of runners (PROTOCOL_V1 §8 "Model").

Runners never hold provider keys: the host reads them from its environment and talks to
OpenAI-compatible APIs through the official `openai` package (one async client per model entry, one
shared connection pool). The package's own retries are off: `retry.Retrier` retries instead, so that
waits honour the run deadline and the provider's retry budget, and a stream is retried only until its
first chunk reaches the runner. Every failure becomes a typed `AgentRunnerError`, so the proxy servicer
maps it to one gRPC status with one ErrorInfo (and a RetryInfo when the provider said when to retry).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
import urllib.parse
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog
from pydantic import BaseModel, ConfigDict, Field

from agentrunner import tokens
from agentrunner.errors import DeadlineExceededError, InvalidArgumentError, NotFoundError, RuntimeFailureError
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.capabilities.openai_wire import (
    ChoiceAssembler,
    attempt_error,
    content_text,
    provider_errors,
    sdk,
    streamed_error,
    struct_to_dict,
    tool_call_pb,
    tools_json,
    usage_pb,
)
from agentrunner_host.capabilities.retry import CallStats, Retrier, RetryBudget, RetryConfig
from agentrunner_host.capabilities.think import ThinkFilter, strip_think
from agentrunner_host.observability.telemetry import MODEL_CALL_DURATION, count_tokens, observed_call

if TYPE_CHECKING:
    import openai
    from opentelemetry.trace import Span

log = structlog.get_logger(__name__)

__all__ = ["ESTIMATE_METHOD", "MODEL_OPERATIONS", "ModelConfig", "ModelRegistry", "ThinkFilter",
           "UsageSink", "strip_think", "struct_to_dict"]  # fmt: skip

ModelKind = Literal["openai-chat", "openai-embedding", "rerank"]

#: Spec `model_type` of each provider kind (ModelResource.model_type).
MODEL_TYPES: dict[str, str] = {"openai-chat": "llm", "openai-embedding": "embedding", "rerank": "rerank"}
#: Operations a model of each type can serve (the resource builder intersects them with policy).
MODEL_OPERATIONS: dict[str, frozenset[str]] = {
    "llm": frozenset({"invoke", "stream", "count_tokens"}),
    "embedding": frozenset({"embed"}),
    "rerank": frozenset({"rerank"}),
}
ESTIMATE_METHOD = tokens.METHOD


class ModelConfig(BaseModel):
    """One provider entry of the host config."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: ModelKind = "openai-chat"
    #: e.g. `https://api.openai.com/v1`; `/chat/completions`, `/embeddings`, `/rerank` are appended
    base_url: str
    #: name of the environment variable holding the API key (never the key itself)
    api_key_env: str | None = None
    #: extra request headers (not secrets: those come from `api_key_env`)
    headers: dict[str, str] = Field(default_factory=dict)
    #: the provider's model name
    model: str
    provider: str = "openai-compatible"
    context_window: int = 0
    vision: bool = False
    #: request body fields merged under the agent's and the request's extra args
    extra_args: dict[str, Any] = Field(default_factory=dict)
    #: seconds per attempt (a stream: until its last chunk); the run deadline clips it
    timeout: float = 120.0
    retry: RetryConfig = Field(default_factory=RetryConfig)

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


def estimate_tokens(
    messages: Sequence[common_pb2.ModelMessage], tools: Sequence[common_pb2.ToolDefinition] = ()
) -> int:
    return tokens.estimate(messages, tools)


def _deadline(time_remaining: float | None) -> float | None:
    return None if time_remaining is None else time.monotonic() + time_remaining


def _model_attributes(config: ModelConfig, operation: str) -> dict[str, str]:
    """OpenTelemetry GenAI attributes of a model call (never its content, never the key)."""
    return {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": config.model,
        "agentrunner.model_id": config.id,
        "server.address": urllib.parse.urlsplit(config.base_url).hostname or "",
    }


def _observed(config: ModelConfig, operation: str) -> contextlib.AbstractContextManager[Any]:
    """The span and latency sample of one model call, its retries included (what the runner waited)."""
    label = "chat" if operation == "chat_stream" else operation
    return observed_call(
        f"agentrunner.model/{operation}", MODEL_CALL_DURATION, _model_attributes(config, label),
        model=config.id, operation=operation,
    )  # fmt: skip


def _attempt_budget(config: ModelConfig, left: float | None) -> float:
    budget = config.timeout if left is None else min(config.timeout, left)
    if budget <= 0:
        raise DeadlineExceededError(
            f"model {config.id}: the run deadline has passed", metadata={"modelId": config.id}
        )
    return budget


class ModelRegistry:
    """All configured models; one `openai` client per model over one shared connection pool."""

    def __init__(
        self,
        configs: Sequence[ModelConfig],
        *,
        usage_sink: UsageSink | None = None,
        artifact_resolver: ArtifactResolver | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._configs = {c.id: c for c in configs}
        if len(self._configs) != len(configs):
            raise ValueError("duplicate model id in config")
        self.usage_sink = usage_sink
        self.artifact_resolver = artifact_resolver
        self._environ = environ if environ is not None else os.environ
        self._sdk: ModuleType | None = None  # the `openai` package, once a call needed it
        self._http: openai.DefaultAsyncHttpxClient | None = None
        self._clients: dict[str, openai.AsyncOpenAI] = {}
        budgets: dict[str, RetryBudget] = {}
        self._retriers: dict[str, Retrier] = {}
        for c in configs:  # one budget per provider endpoint, shared by its model entries
            key = c.base_url.rstrip("/")
            budget = budgets.setdefault(key, RetryBudget(c.retry.budget_tokens, c.retry.budget_ratio))
            self._retriers[c.id] = Retrier(c.retry, budget, key)
        #: what the last call of each model did (attempts, waits): read by tests and `runs show`
        self.last_stats: dict[str, CallStats] = {}

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

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

    async def _client(self, config: ModelConfig) -> tuple[openai.AsyncOpenAI, dict[str, Any]]:
        """The model's client and the per-request headers (no Authorization without a key). The first
        call of the process imports the `openai` package in a worker thread, so the runs already
        streaming on this event loop keep being served meanwhile; no attempt's timeout includes the import."""
        key = None
        if config.api_key_env:
            key = self._environ.get(config.api_key_env)
            if not key:
                raise RuntimeFailureError(
                    f"model {config.id}: the host has no API key (environment variable "
                    f"{config.api_key_env} is unset)",
                    metadata={"modelId": config.id},
                )
        if self._sdk is None:
            self._sdk = await asyncio.to_thread(sdk)
        package = self._sdk
        client = self._clients.get(config.id)
        if client is None or client.api_key != (key or "none"):
            if self._http is None:
                self._http = package.DefaultAsyncHttpxClient()
            client = package.AsyncOpenAI(
                base_url=config.base_url,
                api_key=key or "none",
                default_headers=config.headers or None,
                max_retries=0,  # retry.Retrier retries (deadline- and budget-aware)
                timeout=config.timeout,
                http_client=self._http,
            )
            self._clients[config.id] = client
        return client, ({} if key else {"Authorization": package.Omit()})

    async def _call(
        self,
        config: ModelConfig,
        deadline: float | None,
        attempt: Callable[[float], Awaitable[Any]],
        span: Span,
    ) -> Any:
        """One provider call with retries (each a child span of the call's `span`); the package's
        errors become typed ones."""

        async def once(left: float | None) -> Any:
            budget = _attempt_budget(config, left)
            try:
                async with asyncio.timeout(budget):
                    return await attempt(budget)
            except provider_errors() as exc:  # evaluated only when an exception is raised
                raise attempt_error(exc, config.id) from None

        stats = self.last_stats[config.id] = CallStats()
        return await self._retriers[config.id].call(
            once, deadline=deadline, stats=stats, span=span, span_name="agentrunner.model"
        )

    async def _record(self, run_id: str | None, model_id: str, usage: common_pb2.Usage) -> None:
        count_tokens(model_id, usage.prompt_tokens, usage.completion_tokens)
        if self.usage_sink is None or not run_id:
            return
        try:
            await self.usage_sink.record_model_usage(run_id, model_id, usage, 1)
        except Exception:  # the ledger failing must not fail the model call the runner already paid for
            log.warning("usage_sink_failed", run_id=run_id, model_id=model_id, exc_info=True)

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
                    image: dict[str, Any] = {"url": await self._image_url(element.image.uri, run_id)}
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
            data, mime = await self.artifact_resolver(run_id, uri.removeprefix("artifact://"))
            return f"data:{mime};base64,{base64.b64encode(data).decode()}"
        raise InvalidArgumentError(f"unsupported image URI scheme: {uri[:32]}", field="messages.contents")

    async def _chat_args(
        self,
        config: ModelConfig,
        messages: Sequence[common_pb2.ModelMessage],
        tools: Sequence[common_pb2.ToolDefinition],
        extra_args: Mapping[str, Any] | None,
        agent_extra_args: Mapping[str, Any] | None,
        run_id: str,
    ) -> dict[str, Any]:
        """`create()` keyword arguments: model, messages, tools, and every other field as `extra_body`."""
        if not messages:
            raise InvalidArgumentError("messages must not be empty", field="messages")
        # model config < agent config < request: the most specific wins
        body: dict[str, Any] = {**config.extra_args, **(agent_extra_args or {}), **(extra_args or {})}
        n = body.get("n")
        if n not in (None, 1):
            raise InvalidArgumentError(
                f"n={n} is not supported: a model call answers with one message (ask several times instead)",
                field="extra_args.n",
            )
        for key in ("model", "messages", "stream"):
            body.pop(key, None)
        args: dict[str, Any] = {
            "model": config.model,
            "messages": [await self._message_json(config, m, run_id) for m in messages],
        }
        if tools:
            args["tools"] = tools_json(tools)
            body.pop("tools", None)
        args["extra_body"] = body
        return args

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
        """One whole answer (`choices[0]`). `time_remaining` is the run's budget (`ProxyCall.time_remaining()`)."""
        config = self.get(model_id, "llm")
        args = await self._chat_args(config, messages, tools, extra_args, agent_extra_args, run_id)
        client, headers = await self._client(config)

        async def attempt(budget: float) -> Any:
            return await client.chat.completions.create(**args, extra_headers=headers, timeout=budget)

        with _observed(config, "chat") as span:
            data = await self._call(config, _deadline(time_remaining), attempt, span)
        if not getattr(data, "choices", None):
            raise RuntimeFailureError(
                f"model {model_id}: provider answer has no choices", metadata={"modelId": model_id}
            )
        choice = next((c for c in data.choices if c.index == 0), data.choices[0])
        raw = choice.message
        content = content_text(raw.content if raw is not None else "")
        if remove_think:
            content = strip_think(content)
        message = common_pb2.ModelMessage(
            role="assistant",
            content=content,
            tool_calls=[tool_call_pb(c) for c in (raw.tool_calls if raw is not None else None) or []],
        )
        usage = usage_pb(data.usage)
        await self._record(run_id, model_id, usage)
        return proxy_service_pb2.InvokeModelResponse(
            message=message, usage=usage, finish_reason=choice.finish_reason or ""
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
        """Streams one choice's chunks, then the usage. Attempts are retried until the first chunk is
        ready for the runner, never after. Closing the iterator (or cancelling its consumer) closes the
        upstream response, which the provider sees as a client disconnect."""
        config = self.get(model_id, "llm")
        args = await self._chat_args(config, messages, tools, extra_args, agent_extra_args, run_id)
        body = args["extra_body"]
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        client, headers = await self._client(config)
        opened: list[Any] = []

        async def attempt(budget: float) -> tuple[Any, float, ChoiceAssembler, list[Any]]:
            ends = time.monotonic() + budget
            upstream = await client.chat.completions.create(
                **args, stream=True, extra_headers=headers, timeout=budget
            )
            opened.append(upstream)
            assembler = ChoiceAssembler(0, remove_think=remove_think)
            events = upstream.__aiter__()
            try:
                while True:  # until something is ready for the runner (a retry is still invisible)
                    try:
                        chunk = await anext(events)
                    except StopAsyncIteration:
                        return events, ends, assembler, assembler.end()
                    ready = assembler.feed(chunk)
                    if ready:
                        return events, ends, assembler, ready
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.shield(upstream.close())
                raise

        with _observed(config, "chat_stream") as span:  # until the last chunk, or the consumer goes away
            try:
                deadline = _deadline(time_remaining)
                events, ends, assembler, first = await self._call(config, deadline, attempt, span)
                for piece in first:
                    yield proxy_service_pb2.StreamModelResponse(chunk=piece)
                while True:
                    try:
                        async with asyncio.timeout(ends - time.monotonic()):
                            chunk = await anext(events)
                    except StopAsyncIteration:
                        break
                    except provider_errors() as exc:  # evaluated only when an exception is raised
                        raise streamed_error(exc, model_id) from None
                    for piece in assembler.feed(chunk):
                        yield proxy_service_pb2.StreamModelResponse(chunk=piece)
                for piece in assembler.end():
                    yield proxy_service_pb2.StreamModelResponse(chunk=piece)
                await self._record(run_id, model_id, assembler.usage or common_pb2.Usage())
                if assembler.usage is not None:
                    yield proxy_service_pb2.StreamModelResponse(usage=assembler.usage)
            finally:
                for upstream in opened:
                    # shielded so a cancelled consumer still closes the socket to the provider
                    with contextlib.suppress(Exception):
                        await asyncio.shield(upstream.close())

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
        """(document index, relevance score), best first (`POST {base}/rerank`, Cohere/Jina shape)."""
        config = self.get(model_id, "rerank")
        if not query:
            raise InvalidArgumentError("query must not be empty", field="query")
        if not documents:
            return []
        body: dict[str, Any] = {**config.extra_args, **(extra_args or {})}
        body.update(model=config.model, query=query, documents=list(documents))
        if top_k > 0:
            body["top_n"] = top_k
        client, headers = await self._client(config)

        async def attempt(budget: float) -> Any:
            return await client.post(
                "/rerank", cast_to=object, body=body, options={"headers": headers, "timeout": budget}
            )

        with _observed(config, "rerank") as span:
            data = await self._call(config, _deadline(time_remaining), attempt, span)
        data = data if isinstance(data, Mapping) else {}
        out: list[tuple[int, float]] = []
        for item in data.get("results") or data.get("data") or []:
            index = int(item.get("index", -1))
            if 0 <= index < len(documents):
                out.append((index, float(item.get("relevance_score", item.get("score", 0.0)))))
        out.sort(key=lambda r: -r[1])
        await self._record(run_id, model_id, usage_pb(data.get("usage")))
        return out[:top_k] if top_k > 0 else out

    async def embed(
        self, model_id: str, texts: Sequence[str], *, time_remaining: float | None = None, run_id: str = ""
    ) -> list[list[float]]:
        """One vector per text (`POST {base}/embeddings`), in input order."""
        config = self.get(model_id, "embedding")
        if not texts:
            return []
        client, headers = await self._client(config)

        async def attempt(budget: float) -> Any:
            return await client.embeddings.create(
                model=config.model, input=list(texts), encoding_format="float",
                extra_body=dict(config.extra_args), extra_headers=headers, timeout=budget,
            )  # fmt: skip

        with _observed(config, "embed") as span:
            data = await self._call(config, _deadline(time_remaining), attempt, span)
        items = sorted(data.data or [], key=lambda d: d.index or 0)
        if len(items) != len(texts):
            raise RuntimeFailureError(
                f"model {model_id}: provider returned {len(items)} vectors for {len(texts)} texts",
                metadata={"modelId": model_id},
            )
        await self._record(run_id, model_id, usage_pb(data.usage))
        return [[float(x) for x in item.embedding] for item in items]

    def embedder(self, model_id: str) -> Callable[[Sequence[str]], Awaitable[list[list[float]]]]:
        """A plain `texts -> vectors` callable for knowledge ingestion and retrieval (with retries)."""
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
        """Always the documented estimate (`exact=false`): see `agentrunner.tokens`."""
        self.get(model_id, "llm")
        return proxy_service_pb2.CountTokensResponse(
            tokens=tokens.estimate(messages, tools), exact=False, method=tokens.METHOD
        )
