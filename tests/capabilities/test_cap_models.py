"""Model RPCs end to end: handler table -> ModelRegistry -> real HTTP -> local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2

from agentrunner.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    RateLimitedError,
    RuntimeFailureError,
    UnauthorizedError,
)
from agentrunner.v1 import common_pb2
from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.capabilities.models import ModelConfig, ModelRegistry, ThinkFilter
from agentrunner_host.proxy.capabilities import AgentModelOptions, capability_handlers
from agentrunner_host.testing.openai_stream import awkward_pieces
from tests.capabilities.conftest import (
    ALL_MODEL_OPS,
    FAST_RETRY,
    CapabilityProxy,
    make_proxy,
    make_snapshot,
    start_process,
    stop_process,
)
from tests.mocks.openai_server import MockOpenAIServer, hashed_embedding

pytestmark = pytest.mark.asyncio

GRANTS = make_snapshot(models={"chat": ALL_MODEL_OPS, "chat-text": ALL_MODEL_OPS,
                               "chat-fast-timeout": ALL_MODEL_OPS, "rerank": ALL_MODEL_OPS})  # fmt: skip


def user(text: str) -> common_pb2.ModelMessage:
    return common_pb2.ModelMessage(role="user", content=text)


def extra(**kwargs: Any) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(kwargs)
    return s


async def test_invoke_returns_answer_usage_and_sends_merged_args(models, openai_mock, usage_sink) -> None:
    openai_mock.state.script({"content": "Paris.", "usage": {"prompt_tokens": 11, "completion_tokens": 2}})
    proxy = make_proxy(models, None, None)
    response = await proxy.unary(
        "InvokeModel",
        pb.InvokeModelRequest(
            model_id="chat", messages=[user("Capital of France?")], extra_args=extra(temperature=0.7)
        ),
        GRANTS,
    )
    assert response.message.role == "assistant"
    assert response.message.content == "Paris."
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (
        11,
        2,
        13,
    )
    (sent,) = openai_mock.state.requests
    assert sent["headers"]["authorization"] == "Bearer sk-test-key"
    body = sent["body"]
    assert body["model"] == "mock-chat"
    assert body["temperature"] == 0.7  # request beats the model config's 0.1
    assert body["max_tokens"] == 100  # from the model config
    assert body["messages"] == [{"role": "user", "content": "Capital of France?"}]
    assert [(r[0], r[1], r[2].total_tokens, r[3]) for r in usage_sink.records] == [("run_1", "chat", 13, 1)]


async def test_agent_extra_args_sit_between_model_config_and_request(models, openai_mock) -> None:
    handlers = capability_handlers(
        models, None, None,  # type: ignore[arg-type]
        agent_model_options=lambda call, model_id: AgentModelOptions(
            extra_args={"temperature": 0.5, "top_p": 0.9}, remove_think=True
        ),
    )  # fmt: skip
    openai_mock.state.script({"content": "<think>hmm</think>Answer"}, {"content": "x"})
    proxy = CapabilityProxy(handlers)
    first = await proxy.unary(
        "InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("q")]), GRANTS
    )
    assert first.message.content == "Answer"  # the agent's remove-think applies host-side
    await proxy.unary(
        "InvokeModel",
        pb.InvokeModelRequest(model_id="chat", messages=[user("q")], extra_args=extra(top_p=0.2)),
        GRANTS,
    )
    a, b = (r["body"] for r in openai_mock.state.requests)
    assert (a["temperature"], a["top_p"], a["max_tokens"]) == (0.5, 0.9, 100)
    assert (b["temperature"], b["top_p"]) == (0.5, 0.2)


async def test_tool_calls_round_trip(models, openai_mock) -> None:
    openai_mock.state.script(
        {"content": "", "tool_calls": [{"id": "call_1", "name": "add", "arguments": '{"a": 2, "b": 3}'}]},
        {"content": "5"},
    )
    proxy = make_proxy(models, None, None)
    params = struct_pb2.Struct()
    params.update({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    tool = common_pb2.ToolDefinition(name="add", description="Adds.", parameters=params)
    first = await proxy.unary(
        "InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("2+3")], tools=[tool]), GRANTS
    )
    assert first.finish_reason == "tool_calls"
    (call,) = first.message.tool_calls
    assert (call.id, call.name, call.arguments_json) == ("call_1", "add", '{"a": 2, "b": 3}')
    history = [
        user("2+3"),
        first.message,
        common_pb2.ModelMessage(role="tool", tool_call_id="call_1", content="5"),
    ]
    second = await proxy.unary(
        "InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=history, tools=[tool]), GRANTS
    )
    assert second.message.content == "5"
    sent = openai_mock.state.requests[1]["body"]
    assert sent["tools"][0] == {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}  # fmt: skip
    assert sent["messages"][1]["tool_calls"][0]["function"] == {
        "name": "add",
        "arguments": '{"a": 2, "b": 3}',
    }
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}


async def test_image_reaches_vision_model_and_text_model_refuses(models, openai_mock) -> None:
    image = "data:image/png;base64,iVBORw0KGgo="
    message = common_pb2.ModelMessage(
        role="user",
        contents=[common_pb2.ContentElement(text="What is this?"),
                  common_pb2.ContentElement(image=common_pb2.ImageContent(uri=image, detail="low"))],
    )  # fmt: skip
    proxy = make_proxy(models, None, None)
    await proxy.unary("InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[message]), GRANTS)
    content = openai_mock.state.requests[0]["body"]["messages"][0]["content"]
    assert content == [{"type": "text", "text": "What is this?"},
                       {"type": "image_url", "image_url": {"url": image, "detail": "low"}}]  # fmt: skip
    with pytest.raises(InvalidArgumentError):
        await proxy.unary(
            "InvokeModel", pb.InvokeModelRequest(model_id="chat-text", messages=[message]), GRANTS
        )
    assert len(openai_mock.state.requests) == 1


async def collect(stream) -> list[pb.StreamModelResponse]:
    return [item async for item in stream]


async def test_stream_yields_chunks_in_order_then_whole_tool_calls_then_usage(
    models, openai_mock, usage_sink
) -> None:
    openai_mock.state.script(
        {
            "chunks": ["Let ", "me ", "check", "."],
            "tool_calls": [
                {"id": "call_a", "name": "echo", "arguments": '{"text": "hello there"}'},
                {"id": "call_b", "name": "add", "arguments": '{"a": 1, "b": 2}'},
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 9},
        }
    )
    proxy = make_proxy(models, None, None)
    items = await collect(
        proxy.stream("StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("hi")]), GRANTS)
    )
    kinds = [i.WhichOneof("item") for i in items]
    assert kinds[-1] == "usage" and kinds.count("usage") == 1
    chunks = [i.chunk for i in items[:-1]]
    assert [c.content for c in chunks if c.content] == ["Let ", "me ", "check", "."]
    final = chunks[-1]
    assert final.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments_json) for c in final.tool_calls] == [
        ("call_a", "echo", '{"text": "hello there"}'),
        ("call_b", "add", '{"a": 1, "b": 2}'),
    ]
    assert all(not c.tool_calls for c in chunks[:-1])  # never partial arguments
    assert items[-1].usage.total_tokens == 16
    assert openai_mock.state.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert usage_sink.records[-1][1:] == ("chat", items[-1].usage, 1)


async def test_stream_remove_think_across_chunk_boundaries(models, openai_mock) -> None:
    openai_mock.state.script({"chunks": ["<th", "ink>secret pl", "an</thi", "nk>\nHel", "lo <b>world</b>"]})
    proxy = make_proxy(models, None, None)
    items = await collect(
        proxy.stream(
            "StreamModel",
            pb.StreamModelRequest(model_id="chat", messages=[user("x")], remove_think=True),
            GRANTS,
        )
    )
    text = "".join(i.chunk.content for i in items if i.WhichOneof("item") == "chunk")
    assert text == "Hello <b>world</b>"


async def test_think_filter_keeps_text_that_only_looks_like_a_tag() -> None:
    f = ThinkFilter()
    out = f.feed("a <") + f.feed("thin") + f.feed("g> b <think>x") + f.feed("</think> c") + f.flush()
    assert out == "a <thing> b  c"


async def test_cancelling_a_stream_closes_the_upstream_request(models, openai_mock) -> None:
    openai_mock.state.script({"chunks": [f"w{i} " for i in range(50)], "chunk_delay": 0.05})
    proxy = make_proxy(models, None, None)
    received: list[str] = []
    three = asyncio.Event()

    async def consume() -> None:
        async for item in proxy.stream(
            "StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS
        ):
            received.append(item.chunk.content)
            if len(received) >= 3:
                three.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(three.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    (record,) = openai_mock.state.streams
    await asyncio.wait_for(record.closed.wait(), 3)
    assert record.client_disconnected and not record.completed
    assert record.chunks_sent < 50


async def test_closing_the_stream_iterator_also_disconnects(models, openai_mock) -> None:
    openai_mock.state.script({"chunks": [f"w{i} " for i in range(50)], "chunk_delay": 0.05})
    proxy = make_proxy(models, None, None)
    stream = proxy.stream("StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]  # (an async generator)
    (record,) = openai_mock.state.streams
    await asyncio.wait_for(record.closed.wait(), 3)
    assert record.client_disconnected


async def test_run_deadline_bounds_invoke_and_stream(models, openai_mock) -> None:
    proxy = make_proxy(models, None, None)
    openai_mock.state.script({"delay": 2.0})
    with pytest.raises(DeadlineExceededError) as err:
        await proxy.unary(
            "InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("x")]), GRANTS, timeout=0.3
        )
    assert err.value.retryable
    openai_mock.state.script({"chunks": ["a", "b", "c", "d"], "chunk_delay": 0.5})
    got: list[str] = []
    with pytest.raises(DeadlineExceededError):
        async for item in proxy.stream(
            "StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS, timeout=0.7
        ):
            got.append(item.chunk.content)
    assert 0 < len([g for g in got if g]) < 4
    # a deadline already past refuses without calling the provider
    before = len(openai_mock.state.requests)
    with pytest.raises(DeadlineExceededError):
        await proxy.unary(
            "InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("x")]), GRANTS, timeout=-1
        )
    assert len(openai_mock.state.requests) == before


async def test_model_timeout_from_config_bounds_each_of_three_attempts(models, openai_mock) -> None:
    openai_mock.state.script({"delay": 2.0, "times": 3})
    proxy = make_proxy(models, None, None)
    with pytest.raises(DeadlineExceededError) as err:
        await proxy.unary(
            "InvokeModel", pb.InvokeModelRequest(model_id="chat-fast-timeout", messages=[user("x")]), GRANTS
        )
    assert err.value.retryable and err.value.metadata["attempts"] == "3"
    assert len(openai_mock.state.attempts()) == 3


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [(429, RateLimitedError, True), (500, RuntimeFailureError, True), (400, InvalidArgumentError, False)],
)
async def test_provider_errors_map_to_typed_reasons(models, openai_mock, status, error, retryable) -> None:
    proxy = make_proxy(models, None, None)
    openai_mock.state.script({"status": status, "error_message": "nope", "times": 0})
    with pytest.raises(error) as invoked:
        await proxy.unary("InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
    assert invoked.value.retryable is retryable
    assert "nope" in invoked.value.message
    with pytest.raises(error):
        await collect(
            proxy.stream("StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
        )


async def test_unreachable_provider_is_retryable_runtime_error() -> None:
    registry = ModelRegistry(
        [ModelConfig(id="gone", base_url="http://127.0.0.1:9/v1", model="m", timeout=2, retry=FAST_RETRY)]
    )
    proxy = make_proxy(registry, None, None)
    with pytest.raises(RuntimeFailureError) as err:
        await proxy.unary("InvokeModel", pb.InvokeModelRequest(model_id="gone", messages=[user("x")]),
                          make_snapshot(models={"gone": frozenset({"invoke"})}))  # fmt: skip
    assert err.value.retryable and err.value.status_code == grpc.StatusCode.UNAVAILABLE
    assert err.value.metadata["attempts"] == "3"
    await registry.aclose()


async def test_ungranted_model_or_operation_is_unauthorized(models, openai_mock) -> None:
    proxy = make_proxy(models, None, None)
    only_invoke = make_snapshot(models={"chat": frozenset({"invoke"})})
    with pytest.raises(UnauthorizedError):
        await proxy.unary(
            "InvokeModel", pb.InvokeModelRequest(model_id="chat-text", messages=[user("x")]), only_invoke
        )
    with pytest.raises(UnauthorizedError):
        await collect(
            proxy.stream(
                "StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), only_invoke
            )
        )
    with pytest.raises(UnauthorizedError):
        await proxy.unary(
            "RerankDocuments",
            pb.RerankDocumentsRequest(model_id="rerank", query="q", documents=["d"]),
            only_invoke,
        )
    with pytest.raises(UnauthorizedError):
        await proxy.unary(
            "CountTokens", pb.CountTokensRequest(model_id="chat", messages=[user("x")]), only_invoke
        )
    assert openai_mock.state.requests == []


async def test_rerank_scores_documents_best_first(models, openai_mock) -> None:
    proxy = make_proxy(models, None, None)
    docs = [
        "bananas are yellow",
        "how to reset a password",
        "an expired password reset link from an older account",
    ]
    response = await proxy.unary(
        "RerankDocuments",
        pb.RerankDocumentsRequest(model_id="rerank", query="reset password", documents=docs, top_k=2),
        GRANTS,
    )
    assert [r.index for r in response.results] == [1, 2]
    assert response.results[0].relevance_score >= response.results[1].relevance_score > 0
    assert openai_mock.state.requests[0]["body"] == {"model": "mock-rerank", "query": "reset password",
                                                     "documents": docs, "top_n": 2}  # fmt: skip
    with pytest.raises(InvalidArgumentError):  # an LLM is not a reranker
        await proxy.unary(
            "RerankDocuments", pb.RerankDocumentsRequest(model_id="chat", query="q", documents=["d"]), GRANTS
        )


async def test_count_tokens_is_a_documented_estimate(models) -> None:
    proxy = make_proxy(models, None, None)
    short = await proxy.unary(
        "CountTokens", pb.CountTokensRequest(model_id="chat", messages=[user("hello")]), GRANTS
    )
    long = await proxy.unary(
        "CountTokens", pb.CountTokensRequest(model_id="chat", messages=[user("hello " * 400)]), GRANTS
    )
    assert short.exact is False and short.method.startswith("estimate:")
    assert 5 <= short.tokens < 20
    assert 500 <= long.tokens <= 700  # 2400 characters at ~4 per token


async def test_embeddings_are_deterministic_vectors(models, openai_mock) -> None:
    a, b, c = await models.embed("embed", ["reset my password", "reset my password", "shipping times"])
    assert a == b and a != c and len(a) == 256


async def test_mock_server_runs_as_subprocess_with_admin_scripting() -> None:
    proc, port = await start_process("tests.mocks.openai_server", "MOCK_OPENAI_LISTENING")
    try:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(timeout=5) as client:
            await client.post(f"{base}/_admin/script", json={"content": "from a script"})
            registry = ModelRegistry([ModelConfig(id="m", base_url=f"{base}/v1", model="sub")])
            answer = await registry.invoke("m", [user("hi")])
            await registry.aclose()
            recorded = (await client.get(f"{base}/_admin/requests")).json()
        assert answer.message.content == "from a script"
        assert recorded[0]["body"]["model"] == "sub"
    finally:
        await stop_process(proc)


async def test_mock_speaks_the_sse_wire_format(openai_mock: MockOpenAIServer) -> None:
    openai_mock.state.script({"chunks": ["Hi"]})
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.post(
            f"{openai_mock.base_url}/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = response.text.split("\n\n")
    assert frames[-2] == "data: [DONE]" and frames[-1] == ""
    assert all(f.startswith('data: {"id":"chatcmpl-') for f in frames[:-2])
    assert '"object":"chat.completion.chunk"' in frames[1] and '"delta":{"content":"Hi"}' in frames[1]


async def test_model_calls_are_timed_per_operation_and_outcome_and_tokens_counted(
    models, openai_mock
) -> None:
    """The Prometheus figures an operator graphs: latency by model, operation and outcome; tokens."""
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    timed = "agentrunner_model_call_duration_seconds_count"
    before = {
        "chat": sample(timed, model="chat", operation="chat", outcome="ok"),
        "stream": sample(timed, model="chat", operation="chat_stream", outcome="ok"),
        "late": sample(timed, model="chat-fast-timeout", operation="chat", outcome="DEADLINE_EXCEEDED"),
        "prompt": sample("agentrunner_model_tokens_total", model="chat", type="prompt"),
        "completion": sample("agentrunner_model_tokens_total", model="chat", type="completion"),
    }
    proxy = make_proxy(models, None, None)
    openai_mock.state.script({"content": "Paris.", "usage": {"prompt_tokens": 11, "completion_tokens": 2}})
    await proxy.unary("InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
    openai_mock.state.script({"chunks": ["a", "b"], "usage": {"prompt_tokens": 7, "completion_tokens": 9}})
    await collect(
        proxy.stream("StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
    )
    openai_mock.state.script({"delay": 2.0, "times": 3})  # every attempt of the call times out
    with pytest.raises(DeadlineExceededError):
        await proxy.unary(
            "InvokeModel", pb.InvokeModelRequest(model_id="chat-fast-timeout", messages=[user("x")]), GRANTS
        )
    assert sample(timed, model="chat", operation="chat", outcome="ok") == before["chat"] + 1
    assert sample(timed, model="chat", operation="chat_stream", outcome="ok") == before["stream"] + 1
    late = sample(timed, model="chat-fast-timeout", operation="chat", outcome="DEADLINE_EXCEEDED")
    assert late == before["late"] + 1
    assert sample("agentrunner_model_tokens_total", model="chat", type="prompt") == before["prompt"] + 18
    assert (
        sample("agentrunner_model_tokens_total", model="chat", type="completion") == before["completion"] + 11
    )


UNICODE = "Grüße aus 東京 ☕, café für dich"


async def test_answers_cut_inside_a_character_arrive_whole_streamed_and_not(models, openai_mock) -> None:
    """The mock writes every body in pieces cut inside a UTF-8 character (and a key, a number, an SSE
    frame's newlines): the runner still gets the exact text, the exact vectors and the error's message."""
    body = SPLIT_CHAT_BODY.format(text=UNICODE).encode()
    assert any(not _is_utf8(piece) for piece in awkward_pieces(body))  # the mock does cut a character
    proxy = make_proxy(models, None, None)
    openai_mock.state.script(
        {"content": UNICODE},
        {"chunks": ["Grüße ", "aus 東京 ", "☕", ", café für dich"]},
        {"status": 400, "error_message": "prompt refusé: trop long ✗"},
    )
    answer = await proxy.unary(
        "InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("x")]), GRANTS
    )
    assert answer.message.content == UNICODE
    items = await collect(
        proxy.stream("StreamModel", pb.StreamModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
    )
    texts = [i.chunk.content for i in items if i.WhichOneof("item") == "chunk" and i.chunk.content]
    assert texts == ["Grüße ", "aus 東京 ", "☕", ", café für dich"]
    with pytest.raises(InvalidArgumentError) as refused:
        await proxy.unary("InvokeModel", pb.InvokeModelRequest(model_id="chat", messages=[user("x")]), GRANTS)
    assert "prompt refusé: trop long ✗" in refused.value.message
    (vector,) = await models.embed("embed", ["café ☕"])
    assert vector == hashed_embedding("café ☕")


SPLIT_CHAT_BODY = '{{"choices":[{{"index":0,"message":{{"content":"{text}"}}}}]}}'


def _is_utf8(piece: bytes) -> bool:
    try:
        piece.decode()
    except UnicodeDecodeError:
        return False
    return True
