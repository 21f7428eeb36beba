"""Provider retries, one choice per stream and usage details, against the mock's tricky behaviours.

Each test asserts what the mock saw (how many attempts, how long apart), what the runner-facing stream
carried, and the typed error with its retry delay when retries run out.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Mapping
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from agentrunner.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    RateLimitedError,
    RuntimeFailureError,
)
from agentrunner.v1 import common_pb2
from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.capabilities.models import ModelConfig, ModelRegistry
from agentrunner_host.capabilities.retry import RetryConfig
from agentrunner_host.observability import telemetry as observability
from tests.capabilities.conftest import ALL_MODEL_OPS, make_proxy, make_snapshot
from tests.mocks.openai_server import MockOpenAIServer

pytestmark = pytest.mark.asyncio

GRANTS = make_snapshot(models={"chat": ALL_MODEL_OPS, "twin": ALL_MODEL_OPS, "rerank": ALL_MODEL_OPS})
#: backoff 0.2 s, then 0.4 s (minus up to 25 % jitter)
POLICY = RetryConfig(initial_backoff=0.2, max_backoff=1.0)


def user(text: str) -> common_pb2.ModelMessage:
    return common_pb2.ModelMessage(role="user", content=text)


def registry(mock: MockOpenAIServer, policy: RetryConfig = POLICY, **chat: object) -> ModelRegistry:
    base = mock.base_url
    return ModelRegistry(
        [
            ModelConfig(id="chat", base_url=base, model="mock-chat", retry=policy, **chat),
            ModelConfig(id="twin", base_url=base, model="mock-twin", retry=policy),
            ModelConfig(id="embed", kind="openai-embedding", base_url=base, model="e", retry=policy),
            ModelConfig(id="rerank", kind="rerank", base_url=base, model="r", retry=policy),
        ]
    )


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def waited(
    models: ModelRegistry, mock: MockOpenAIServer, model_id: str = "chat", endpoint: str = "chat"
) -> list[float]:
    """The waits the retry policy chose in the last call of `model_id`, once the mock's arrival times show
    the client really waited each of them. Only a lower bound is exact: what the gaps add on top is
    scheduling, up to seconds on a busy CI machine, so the upper bound only catches a wrong wait."""
    waits = models.last_stats[model_id].waits
    assert all(w <= gap < w + 1.5 for w, gap in zip(waits, gaps(mock.state.attempts(endpoint)), strict=True))
    return waits


async def invoke(
    models: ModelRegistry,
    model_id: str = "chat",
    timeout: float | None = None,  # noqa: ASYNC109  (the run's remaining time, as the proxy passes it)
) -> pb.InvokeModelResponse:
    proxy = make_proxy(models, None, None)
    return await proxy.unary(
        "InvokeModel",
        pb.InvokeModelRequest(model_id=model_id, messages=[user("hi")]),
        GRANTS,
        timeout=timeout,
    )


async def stream_text(models: ModelRegistry, seen: list[str] | None = None, **request: object) -> str:
    proxy = make_proxy(models, None, None)
    seen = seen if seen is not None else []
    req = pb.StreamModelRequest(model_id="chat", messages=[user("hi")], **request)  # type: ignore[arg-type]
    async for item in proxy.stream("StreamModel", req, GRANTS):
        if item.WhichOneof("item") == "chunk":
            seen.append(item.chunk.content)
    return "".join(seen)


async def test_429_once_is_retried_after_retry_after_ms_on_invoke_and_stream(openai_mock) -> None:
    models = registry(openai_mock)
    openai_mock.state.script({"status": 429, "retry_after_ms": 300}, {"content": "after the wait"})
    assert (await invoke(models)).message.content == "after the wait"
    # the provider's 300 ms, not the 200 ms backoff
    assert waited(models, openai_mock) == [pytest.approx(0.3)]
    openai_mock.state.reset()
    openai_mock.state.script({"status": 429, "retry_after": "1"}, {"chunks": ["stre", "amed"]})
    assert await stream_text(models) == "streamed"
    assert waited(models, openai_mock) == [pytest.approx(1.0)]  # Retry-After in seconds
    await models.aclose()


async def test_429_always_ends_rate_limited_with_the_providers_delay_as_retry_info(openai_mock) -> None:
    models = registry(openai_mock)
    openai_mock.state.script({"status": 429, "retry_after_ms": 150, "times": 0, "error_message": "slow down"})
    with pytest.raises(RateLimitedError) as err:
        await invoke(models)
    assert waited(models, openai_mock) == [pytest.approx(0.15)] * 2  # 3 attempts, 150 ms before each retry
    assert err.value.retryable and err.value.retry_delay == pytest.approx(0.15)
    assert err.value.metadata["attempts"] == "3" and "slow down" in err.value.message
    status = err.value.to_status()
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    retry = error_details_pb2.RetryInfo()
    assert [d.Unpack(retry) for d in status.details if d.Is(retry.DESCRIPTOR)] == [True]
    assert retry.retry_delay.ToMilliseconds() == 150
    await models.aclose()


async def test_a_retry_after_beyond_the_run_deadline_fails_at_once_with_that_delay(openai_mock) -> None:
    models = registry(openai_mock)
    await invoke(models)  # the process's first model call imports `openai` (~1-2 s under load): not timed
    openai_mock.state.reset()
    openai_mock.state.script({"status": 429, "retry_after": "30", "times": 0})
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as err:
        await invoke(models, timeout=5)
    assert time.monotonic() - started < 2.0  # one attempt (~0.1 s), not the 30 s wait
    assert len(openai_mock.state.attempts()) == 1 and err.value.retry_delay == 30
    await models.aclose()


async def test_500_then_success_backs_off_with_jitter_on_every_endpoint(openai_mock) -> None:
    models = registry(openai_mock)
    openai_mock.state.script({"status": 500}, {"status": 502}, {"content": "third time"})
    assert (await invoke(models)).message.content == "third time"
    first, second = waited(models, openai_mock)
    assert 0.15 <= first <= 0.2 and 0.3 <= second <= 0.4  # 0.2 s, then 0.4 s, 0-25 % less
    assert models.last_stats["chat"].wait_sources == ["backoff"] * 2
    openai_mock.state.reset()
    openai_mock.state.script_embeddings({"status": 503})
    assert len((await models.embed("embed", ["a b"]))[0]) == 256
    openai_mock.state.script_rerank({"status": 500})
    assert [i for i, _ in await models.rerank("rerank", "reset password", ["x", "reset password"])] == [1, 0]
    assert len(openai_mock.state.attempts("embeddings")) == 2 == len(openai_mock.state.attempts("rerank"))
    await models.aclose()


@pytest.mark.parametrize("endpoint", ["embeddings", "rerank"])
async def test_embeddings_and_rerank_honour_retry_after_and_end_rate_limited_with_its_delay(
    openai_mock, endpoint: str
) -> None:
    models = registry(openai_mock)
    script = (
        openai_mock.state.script_embeddings if endpoint == "embeddings" else openai_mock.state.script_rerank
    )

    async def call() -> object:
        if endpoint == "embeddings":
            return await models.embed("embed", ["a b"])
        return await models.rerank("rerank", "reset password", ["x", "reset password"])

    script({"status": 429, "retry_after_ms": 300})
    assert await call()
    model_id = "embed" if endpoint == "embeddings" else "rerank"
    assert waited(models, openai_mock, model_id, endpoint) == [pytest.approx(0.3)]  # the provider's 300 ms
    openai_mock.state.reset()
    script({"status": 429, "retry_after": "1", "times": 0, "error_message": "quota"})
    with pytest.raises(RateLimitedError) as err:
        await call()
    assert len(openai_mock.state.attempts(endpoint)) == 3 and err.value.metadata["attempts"] == "3"
    assert err.value.retryable and err.value.retry_delay == 1.0 and "quota" in err.value.message
    await models.aclose()


async def test_a_connection_dropped_before_the_first_token_is_retried_invisibly(openai_mock) -> None:
    models = registry(openai_mock)
    openai_mock.state.script(
        {"chunks": ["lost"], "drop_after": 0}, {"drop_after": 0}, {"chunks": ["Hello", " again", " ü."]}
    )
    seen: list[str] = []
    assert await stream_text(models, seen) == "Hello again ü."
    assert [s for s in seen if s] == ["Hello", " again", " ü."]  # nothing of the dropped attempts
    assert len(openai_mock.state.attempts()) == 3
    openai_mock.state.reset()
    openai_mock.state.script({"drop_after": 0}, {"content": "whole"})  # a non-streamed answer cut short
    assert (await invoke(models)).message.content == "whole"
    await models.aclose()


async def test_a_connection_dropped_after_the_first_token_is_never_retried(openai_mock) -> None:
    models = registry(openai_mock)
    openai_mock.state.script({"chunks": ["Part", "ial", " answer"], "drop_after": 1}, {"content": "unused"})
    seen: list[str] = []
    with pytest.raises(RuntimeFailureError) as err:
        await stream_text(models, seen)
    assert [s for s in seen if s] == ["Part"]
    assert err.value.status_code == grpc.StatusCode.UNAVAILABLE and err.value.retryable
    assert err.value.metadata["streamed"] == "true"
    assert len(openai_mock.state.attempts()) == 1
    # an error event before the first token is retried like a drop
    openai_mock.state.reset()
    openai_mock.state.script({"chunks": ["x"], "error_after": 0}, {"chunks": ["fine"]})
    assert await stream_text(models) == "fine"
    assert len(openai_mock.state.attempts()) == 2
    await models.aclose()


async def test_a_stalled_first_byte_times_out_the_attempt_and_the_retry_answers(openai_mock) -> None:
    models = registry(openai_mock, timeout=1.0)
    openai_mock.state.script({"delay": 10.0}, {"chunks": ["awake"]})
    assert await stream_text(models) == "awake"
    assert 1.0 <= gaps(openai_mock.state.attempts())[0] < 3.0  # 1 s timeout + 0.15-0.2 s backoff
    openai_mock.state.reset()
    openai_mock.state.script({"delay": 10.0, "times": 0})
    with pytest.raises(DeadlineExceededError) as err:
        await invoke(models)
    assert err.value.metadata["attempts"] == "3"
    await models.aclose()


async def test_two_choices_stream_as_one_choice_and_n_above_one_is_refused(openai_mock) -> None:
    models = registry(openai_mock)
    openai_mock.state.script({"choices": ["Option A: tea.", "Option B: coffee."]})
    proxy = make_proxy(models, None, None)
    items = [
        i
        async for i in proxy.stream(
            "StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("drink?")]), GRANTS
        )
    ]
    chunks = [i.chunk for i in items if i.WhichOneof("item") == "chunk"]
    assert "".join(c.content for c in chunks) == "Option A: tea."
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["stop"] and chunks[-1].finish_reason
    openai_mock.state.script({"choices": ["First.", "Second."]})
    assert (await invoke(models)).message.content == "First."
    before = len(openai_mock.state.requests)
    n2 = json_format.ParseDict({"n": 2}, pb.StreamModelRequest().extra_args)
    with pytest.raises(InvalidArgumentError) as err:
        await stream_text(models, extra_args=n2)
    assert err.value.field == "extra_args.n" and len(openai_mock.state.requests) == before
    await models.aclose()


REPORTED = {
    "prompt_tokens": 20,
    "completion_tokens": 9,
    "prompt_tokens_details": {"cached_tokens": 16, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 7, "audio_tokens": 0},
}


async def test_every_reported_usage_count_reaches_the_runner_and_the_sink(openai_mock, usage_sink) -> None:
    models = registry(openai_mock)
    models.usage_sink = usage_sink
    openai_mock.state.script({"content": "a", "usage": REPORTED}, {"chunks": ["b"], "usage": REPORTED})
    whole = (await invoke(models)).usage
    proxy = make_proxy(models, None, None)
    streamed = [
        i.usage
        async for i in proxy.stream(
            "StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS
        )
        if i.WhichOneof("item") == "usage"
    ]
    for usage in (whole, *streamed):
        assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (20, 9, 29)
        extra = json_format.MessageToDict(usage.extra)
        assert extra["prompt_tokens_details"]["cached_tokens"] == 16
        assert extra["completion_tokens_details"]["reasoning_tokens"] == 7
    assert [r[2] for r in usage_sink.records] == [whole, streamed[0]]
    await models.aclose()


async def test_the_retry_budget_is_per_provider(openai_mock) -> None:
    """Four tokens: a failed attempt costs one, retries stop at half. The first call makes two attempts,
    later calls (of any model on the same provider) one, until successes earn tokens back."""
    models = registry(openai_mock, RetryConfig(initial_backoff=0.01, budget_tokens=4, budget_ratio=1))
    openai_mock.state.script({"status": 500, "times": 3})
    for model_id in ("chat", "twin"):
        with pytest.raises(RuntimeFailureError):
            await invoke(models, model_id)
    assert len(openai_mock.state.attempts()) == 3  # 2 + 1: one token left
    for _ in range(3):  # each success earns one back
        assert (await invoke(models)).message.content == "echo: hi"
    openai_mock.state.script({"status": 500})
    assert (await invoke(models, "twin")).message.content == "echo: hi"  # retried again
    assert len(openai_mock.state.attempts()) == 3 + 3 + 2
    await models.aclose()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Spans recorded as a deployment's provider would (the host's own records nothing)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(observability, "tracer", provider.get_tracer("test"))
    monkeypatch.setattr(observability, "recording", lambda: True)
    return exporter


@dataclasses.dataclass(frozen=True)
class Span:
    """What the checks read of a finished span (`ReadableSpan` types each of these as optional)."""

    name: str
    attributes: Mapping[str, Any]
    status: Status
    start_time: int
    end_time: int


def _span(span: ReadableSpan) -> Span:
    return Span(span.name, span.attributes or {}, span.status, span.start_time or 0, span.end_time or 0)


def attempt_spans(exporter: InMemorySpanExporter, call: str) -> tuple[Span, list[Span]]:
    (parent,) = [s for s in exporter.get_finished_spans() if s.name == call]
    children = [
        s for s in exporter.get_finished_spans() if s.parent and s.parent.span_id == parent.context.span_id
    ]
    return _span(parent), [_span(s) for s in sorted(children, key=lambda s: s.start_time or 0)]


async def test_each_attempt_is_a_child_span_with_its_reason_and_the_delay_it_honoured(
    openai_mock, spans: InMemorySpanExporter
) -> None:
    secret = "sk-attempt-span-secret-0042"
    base = openai_mock.base_url
    models = ModelRegistry(
        [
            ModelConfig(id="chat", base_url=base, model="mock-chat", api_key_env="K", retry=POLICY),
            ModelConfig(id="embed", kind="openai-embedding", base_url=base, model="e", api_key_env="K",
                        retry=POLICY),
        ],
        environ={"K": secret},
    )  # fmt: skip
    # a provider that quotes the key back in its error text (some do, masked or not)
    openai_mock.state.script(
        {"status": 429, "retry_after_ms": 250, "error_message": f"rate limited for key {secret}"},
        {"chunks": ["af", "ter"]},
    )
    assert await stream_text(models) == "after"
    assert len(openai_mock.state.attempts()) == 2
    assert openai_mock.state.requests[0]["headers"]["authorization"] == f"Bearer {secret}"
    call, (first, second) = attempt_spans(spans, "agentrunner.model/chat_stream")
    assert call.attributes["agentrunner.retry.attempts"] == 2
    assert (first.name, first.attributes["agentrunner.retry.attempt"]) == ("agentrunner.model/attempt", 1)
    assert first.status.status_code == StatusCode.ERROR and first.attributes["error.type"] == "RATE_LIMITED"
    assert first.attributes["http.response.status_code"] == 429
    assert first.attributes["agentrunner.retry.retry_after_s"] == pytest.approx(0.25)
    assert first.attributes["agentrunner.retry.delay_s"] == 0.0
    assert (
        second.attributes["agentrunner.retry.attempt"] == 2 and second.status.status_code == StatusCode.UNSET
    )
    assert second.attributes["agentrunner.retry.delay_s"] == pytest.approx(0.25)  # Retry-After, not backoff
    assert second.attributes["agentrunner.retry.delay_source"] == "retry-after"
    assert (second.start_time - first.end_time) / 1e9 >= 0.25
    # the same on embeddings, with the backoff as the delay when the provider gives none
    openai_mock.state.script_embeddings({"status": 503})
    assert len((await models.embed("embed", ["a"]))[0]) > 0
    _, (failed, retried) = attempt_spans(spans, "agentrunner.model/embed")
    assert (
        failed.attributes["error.type"] == "RUNTIME_ERROR"
        and "agentrunner.retry.retry_after_s" not in failed.attributes
    )
    assert retried.attributes["agentrunner.retry.delay_source"] == "backoff"
    assert 0.15 <= retried.attributes["agentrunner.retry.delay_s"] <= 0.2  # 0.2 s minus up to 25 % jitter
    openai_mock.state.script({"status": 401, "error_message": f"Incorrect API key provided: {secret}."})
    with pytest.raises(RuntimeFailureError) as err:
        await invoke(models)
    assert secret not in str(err.value) and "Incorrect API key provided: [redacted]." in err.value.message
    for span in spans.get_finished_spans():  # no secret anywhere: attributes, status, events
        texts = [str(v) for v in (span.attributes or {}).values()] + [span.status.description or ""]
        texts += [str(e.attributes) + e.name for e in span.events]
        assert not [t for t in texts if secret in t], span.name
    await models.aclose()
