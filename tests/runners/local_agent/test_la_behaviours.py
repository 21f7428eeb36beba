"""LA-01 … LA-08 (AGENT_RUNNER_QA_GUIDE) against the local agent over real gRPC, asserting on what the
runner sent to the host and what it streamed back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.errors import RateLimitedError, RuntimeFailureError
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, context_pb2
from agentrunner_runners.local_agent import LocalAgentRunner
from tests.runners.local_agent.conftest import PROMPT, answer, context, item, model, texts

pytestmark = pytest.mark.asyncio
R = LocalAgentRunner


# -- LA-01 bound prompt -------------------------------------------------------------------------


async def test_la01_bound_prompt_is_first_and_adapter_prompt_ignored(host: HostDouble) -> None:
    host.on("InvokeModel", answer("Hi, I am Bob."))
    ctx = context("who are you?")
    ctx.adapter.extra.update({"prompt": [{"role": "system", "content": "ADAPTER-PROMPT-EVIL"}]})
    out = await host.run(R, context=ctx)
    assert out.completed and out.text == "Hi, I am Bob."
    sent = host.calls_to("InvokeModel")[0].request
    assert sent.model_id == "m1"
    assert (sent.messages[0].role, sent.messages[0].content) == ("system", PROMPT[0]["content"])
    assert sent.messages[-1].role == "user" and texts(sent.messages[-1]) == "who are you?"
    assert not any("ADAPTER-PROMPT-EVIL" in texts(m) for m in sent.messages)
    assert out.metadata["prompt_source"] == "config"


async def test_la01_host_prompt_api_wins_when_granted(host: HostDouble) -> None:
    host.on("GetPrompt", {"messages": [{"role": "system", "content": "HOST-EFFECTIVE-PROMPT"}]})
    host.on("InvokeModel", answer("ok"))
    out = await host.run(R, context=context("hi"))
    assert out.completed
    first = host.calls_to("InvokeModel")[0].request.messages[0]
    assert first.content == "HOST-EFFECTIVE-PROMPT"
    assert out.metadata["prompt_source"] == "host"

    # without the grant the prompt API is never called and the config prompt is used
    host.calls.clear()
    out = await host.run(R, context=context("hi", apis={"prompt_get": False}))
    assert not host.calls_to("GetPrompt")
    assert host.calls_to("InvokeModel")[0].request.messages[0].content == PROMPT[0]["content"]


# -- LA-02 history through the history API -----------------------------------------------------


async def test_la02_second_turn_sees_first_turn_marker_through_history_api(host: HostDouble) -> None:
    ctx = context("what was my marker?")
    ctx.context.latest_cursor = "cur-current"
    host.on(
        "ListHistory",
        {
            "items": [
                item(1, "user", "remember the marker ZEBRA-42"),
                item(2, "assistant", "Noted: ZEBRA-42"),
                # the current input, as a host without a cursor would return it: not history
                item(3, "user", "what was my marker?", event_id=ctx.event.event_id),
            ]
        },
    )
    host.on("InvokeModel", answer("Your marker was ZEBRA-42."))
    out = await host.run(R, context=ctx)
    assert out.text == "Your marker was ZEBRA-42."
    req = host.calls_to("ListHistory")[0].request
    assert req.before_cursor == "cur-current" and req.limit == 50
    msgs = host.calls_to("InvokeModel")[0].request.messages
    assert [(m.role, texts(m)) for m in msgs] == [
        ("system", PROMPT[0]["content"]),
        ("user", "remember the marker ZEBRA-42"),
        ("assistant", "Noted: ZEBRA-42"),
        ("user", "what was my marker?"),
    ]
    assert out.metadata["history"]["kept"] == 2


async def test_la02_max_round_and_paging(host: HostDouble) -> None:
    # newest page first (backward): rounds 3..4, then an older page with rounds 1..2
    pages = {
        "": {
            "items": [
                item(5, "user", "q3"),
                item(6, "assistant", "a3"),
                item(7, "user", "q4"),
                item(8, "assistant", "a4"),
            ],
            "has_more": True,
            "next_cursor": "cur5",
        },
        "cur5": {
            "items": [
                item(1, "user", "q1"),
                item(2, "assistant", "a1"),
                item(3, "user", "q2"),
                item(4, "assistant", "a2"),
            ],
            "has_more": False,
        },
    }
    host.on("ListHistory", lambda req, call: pages[req.before_cursor])
    host.on("InvokeModel", answer("ok"))
    out = await host.run(R, context=context("q5", config={"max-round": 3, "context-history-fetch-limit": 4}))
    assert out.completed
    assert [c.request.before_cursor for c in host.calls_to("ListHistory")] == ["", "cur5"]
    msgs = host.calls_to("InvokeModel")[0].request.messages
    assert [texts(m) for m in msgs[1:]] == ["q2", "a2", "q3", "a3", "q4", "a4", "q5"]

    host.calls.clear()
    await host.run(R, context=context("q5", config={"max-round": 0}))
    assert not host.calls_to("ListHistory")


# -- LA-03 streaming / non-streaming -------------------------------------------------------------


async def test_la03_streaming_has_no_duplicates_or_blanks(host: HostDouble) -> None:
    host.on(
        "StreamModel",
        [
            {"chunk": {"content": "Hel"}},
            {"chunk": {"content": ""}},
            {"chunk": {"content": "lo"}},
            {"chunk": {"content": " world", "finish_reason": "stop"}},
            {"usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}},
        ],
    )
    out = await host.run(R, context=context("hi", streaming=True))
    assert out.types == ["message.delta"] * 3 + ["run.completed"]
    assert out.deltas == ["Hel", "lo", " world"]
    cumulative = [r.message_delta.cumulative_text for r in out.of_type("message.delta")]
    assert cumulative == ["Hel", "Hello", "Hello world"]
    ids = {r.message_delta.message_id for r in out.of_type("message.delta")}
    done = out.terminal.run_completed
    assert len(ids) == 1 and done.message.message_id in ids
    assert done.message.content == "Hello world"
    assert out.terminal.usage.total_tokens == 14
    assert not host.calls_to("InvokeModel")


async def test_la03_non_streaming_emits_only_the_final_message(host: HostDouble) -> None:
    host.on("InvokeModel", answer("The whole answer.", usage=(9, 4)))
    out = await host.run(R, context=context("hi", streaming=False))
    assert out.types == ["message.completed", "run.completed"]
    assert out.results[0].message_completed.message.content == "The whole answer."
    assert not out.terminal.run_completed.HasField("message")
    assert (out.terminal.usage.prompt_tokens, out.terminal.usage.completion_tokens) == (9, 4)
    assert not host.calls_to("StreamModel")


# -- LA-04 tools ---------------------------------------------------------------------------------


WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


async def test_la04_tool_loop_calls_authorized_tool_and_answer_uses_result(host: HostDouble) -> None:
    weather = context_pb2.ToolResource(
        tool_name="weather", tool_type="mcp", description="Weather by city", operations=["call"]
    )
    weather.parameters.update(WEATHER_SCHEMA)
    host.on("InvokeModel", answer(calls=[("weather", {"city": "Paris"})], call_ids=["call-1"]))
    host.on("InvokeModel", answer("It is SUNNY-25C in Paris."))
    host.on("CallTool", {"contents": [{"text": "SUNNY-25C"}]})
    out = await host.run(R, context=context("weather in Paris?", tools=[weather]))
    assert out.text == "It is SUNNY-25C in Paris."
    assert out.types == ["tool.call.started", "tool.call.completed", "message.completed", "run.completed"]
    started = out.results[0].tool_call_started
    assert (started.tool_call_id, started.tool_name) == ("call-1", "weather")
    assert json_format.MessageToDict(started.parameters) == {"city": "Paris"}
    assert "SUNNY-25C" in json_format.MessageToDict(out.results[1].tool_call_completed.result_preview)["text"]

    first, second = (c.request for c in host.calls_to("InvokeModel"))
    assert [t.name for t in first.tools] == ["weather"]
    assert json_format.MessageToDict(first.tools[0].parameters) == WEATHER_SCHEMA
    assert not host.calls_to("GetToolDetail")  # the schema was inlined
    call = host.calls_to("CallTool")[0].request
    assert call.tool_name == "weather" and call.tool_call_id == "call-1"
    assert json_format.MessageToDict(call.parameters) == {"city": "Paris"}
    assistant, tool_msg = second.messages[-2], second.messages[-1]
    assert assistant.role == "assistant" and assistant.tool_calls[0].id == "call-1"
    assert (tool_msg.role, tool_msg.tool_call_id, tool_msg.content) == ("tool", "call-1", "SUNNY-25C")


async def test_la04_unauthorized_tool_is_never_offered_nor_called(host: HostDouble) -> None:
    # `secret` is not in resources; a detail-only tool is not offered either
    detail_only = context_pb2.ToolResource(tool_name="peek", operations=["detail"])
    host.on(
        "GetToolDetail", {"tool": {"name": "search", "description": "Search", "parameters": WEATHER_SCHEMA}}
    )
    host.on("InvokeModel", answer(calls=[("secret", {}), ("search", {"city": "x"})]))
    host.on("InvokeModel", answer("done"))
    host.on("CallTool", {"contents": [{"text": "found"}]})
    out = await host.run(R, context=context("go", tools=["search", detail_only]))
    assert out.completed
    offered = host.calls_to("InvokeModel")[0].request.tools
    assert [t.name for t in offered] == ["search"]
    # schema fetched with GetToolDetail because the host did not inline it
    assert json_format.MessageToDict(offered[0].parameters) == WEATHER_SCHEMA
    assert [c.request.tool_name for c in host.calls_to("CallTool")] == ["search"]
    refused = [
        r.tool_call_completed for r in out.of_type("tool.call.completed") if r.tool_call_completed.error_code
    ]
    assert [(r.tool_name, r.error_code) for r in refused] == [("secret", "unauthorized")]
    tool_msgs = [m for m in host.calls_to("InvokeModel")[1].request.messages if m.role == "tool"]
    assert "not available" in tool_msgs[0].content and tool_msgs[1].content == "found"


# -- LA-05 RAG -----------------------------------------------------------------------------------


async def test_la05_rag_uses_bound_knowledge_base_and_rerank(host: HostDouble) -> None:
    host.on(
        "RetrieveKnowledge",
        {
            "results": [
                {"document_id": "d1", "content": "Unrelated filler text.", "score": 0.9},
                {
                    "document_id": "d2",
                    "content": "The launch code is ORCHID-9.",
                    "score": 0.5,
                    "metadata": {"title": "codes.md"},
                },
            ]
        },
    )
    host.on(
        "RerankDocuments",
        {"results": [{"index": 1, "relevance_score": 0.99}, {"index": 0, "relevance_score": 0.1}]},
    )
    host.on("InvokeModel", answer("The launch code is ORCHID-9."))
    ctx = context(
        "what is the launch code?",
        config={
            "knowledge-bases": ["kb1", "kb-not-bound"],
            "rerank-model": "rr",
            "rerank-top-k": 1,
            "retrieval-top-k": 4,
        },
        models=["m1", model("rr", ops=("rerank",))],
        knowledge_bases=["kb1", "kb-other"],
    )
    out = await host.run(R, context=ctx)
    assert out.text == "The launch code is ORCHID-9."
    retrieve = [c.request for c in host.calls_to("RetrieveKnowledge")]
    assert [(r.kb_id, r.query_text, r.top_k) for r in retrieve] == [("kb1", "what is the launch code?", 4)]
    rerank = host.calls_to("RerankDocuments")[0].request
    assert (rerank.model_id, rerank.top_k, len(rerank.documents)) == ("rr", 1, 2)
    user = host.calls_to("InvokeModel")[0].request.messages[-1]
    said = texts(user)
    assert "ORCHID-9" in said and "codes.md" in said and "Unrelated filler" not in said
    assert said.endswith("what is the launch code?")
    assert out.metadata["rag"]["kb_denied"] == ["kb-not-bound"]


async def test_la05_rag_keeps_images_of_the_input(host: HostDouble) -> None:
    host.on(
        "RetrieveKnowledge", {"results": [{"document_id": "d", "content": "Cats are mammals.", "score": 1}]}
    )
    host.on("InvokeModel", answer("A cat."))
    image = common_pb2.ContentElement(image=common_pb2.ImageContent(uri="https://example.test/cat.png"))
    ctx = context(
        "",
        contents=[common_pb2.ContentElement(text="what is this?"), image],
        models=[model("m1", vision=True)],
        knowledge_bases=["kb1"],
    )
    out = await host.run(R, context=ctx)
    assert out.completed
    user = host.calls_to("InvokeModel")[0].request.messages[-1]
    kinds = [c.WhichOneof("kind") for c in user.contents]
    assert kinds == ["text", "text", "image"]
    assert "Cats are mammals." in user.contents[0].text and user.contents[2].image.uri.endswith("cat.png")
    assert host.calls_to("RetrieveKnowledge")[0].request.query_text == "what is this?"


# -- LA-06 multimodal ----------------------------------------------------------------------------


def _image_ctx(*models: object, **kw: Any):
    image = common_pb2.ContentElement(image=common_pb2.ImageContent(uri="data:image/png;base64,iVBORw0KGgo="))
    return context("", contents=[common_pb2.ContentElement(text="describe"), image], models=models, **kw)


async def test_la06_image_reaches_a_vision_model(host: HostDouble) -> None:
    host.on("InvokeModel", answer("A tiny PNG."))
    attachment = common_pb2.ArtifactRef(artifact_id="art-1", mime_type="image/jpeg", name="p.jpg")
    out = await host.run(R, context=_image_ctx(model("m1", vision=True), attachments=[attachment]))
    assert out.text == "A tiny PNG."
    user = host.calls_to("InvokeModel")[0].request.messages[-1]
    images = [c.image.uri for c in user.contents if c.WhichOneof("kind") == "image"]
    assert images == ["data:image/png;base64,iVBORw0KGgo=", "artifact://art-1"]
    assert out.metadata["multimodal"] is True


async def test_la06_no_vision_model_is_a_controlled_failure(host: HostDouble) -> None:
    out = await host.run(R, context=_image_ctx(model("m1", vision=False)))
    assert out.failure.code == "runner.vision_unsupported"
    assert "m1" in out.failure.message
    assert not host.calls_to("InvokeModel") and not host.calls_to("StreamModel")


async def test_la06_image_skips_a_blind_primary_for_a_vision_fallback(host: HostDouble) -> None:
    host.on("InvokeModel", answer("seen"))
    ctx = _image_ctx(
        model("m1"), model("m2", vision=True), config={"model": {"primary": "m1", "fallbacks": ["m2"]}}
    )
    out = await host.run(R, context=ctx)
    assert out.text == "seen"
    assert [c.request.model_id for c in host.calls_to("InvokeModel")] == ["m2"]
    assert out.metadata["model_failures"][0]["code"] == "vision_unsupported"


# -- LA-07 fallback and errors ---------------------------------------------------------------------


async def test_la07_primary_failure_falls_back_and_next_request_is_unaffected(host: HostDouble) -> None:
    broken = {"m1"}

    def invoke(req, call):
        if req.model_id in broken:
            raise RuntimeFailureError("model m1: provider answered 500", retryable=True)
        return answer(f"answer from {req.model_id}")

    host.on("InvokeModel", invoke)
    ctx = context("hi", config={"model": {"primary": "m1", "fallbacks": ["m2"]}}, models=["m1", "m2"])
    out = await host.run(R, context=ctx)
    assert out.text == "answer from m2"
    assert [c.request.model_id for c in host.calls_to("InvokeModel")] == ["m1", "m2"]
    assert out.metadata["model"] == "m2"
    assert out.metadata["model_failures"][0]["model"] == "m1"

    broken.clear()  # the primary recovered: the next request uses it again
    again = await host.run(R, context=context("hi", models=["m1", "m2"]))
    assert again.completed and again.text == "answer from m1"


async def test_la07_all_models_failed_lists_each_reason(host: HostDouble) -> None:
    ctx = context("hi", config={"model": ["m1", "ghost", "m3"]}, models=["m1", "m3"])
    host.on("InvokeModel", error=RateLimitedError("m1 busy"))
    host.on("InvokeModel", error=RuntimeFailureError("m3 exploded"))
    out = await host.run(R, context=ctx)
    failure = out.failure
    assert failure.code == "runner.all_models_failed" and failure.retryable
    reasons = {m["model"]: m["code"] for m in json_format.MessageToDict(failure.details)["models"]}
    assert reasons == {"ghost": "unauthorized", "m1": "rate_limited", "m3": "runtime_error"}
    for name in ("ghost", "m1", "m3"):
        assert name in failure.message
    assert [c.request.model_id for c in host.calls_to("InvokeModel")] == ["m1", "m3"]
    assert not out.of_type("message.completed")


async def test_la07_runner_errors_are_controlled(host: HostDouble) -> None:
    out = await host.run(R, context=context("hi", models=[]))
    assert out.failure.code == "runner.no_model"
    bad = await host.run(R, context=context("hi", config={"tool-execution-mode": "sideways"}))
    assert bad.failure.code == "runner.config_invalid"
    bad = await host.run(R, context=context("hi", config={"max-round": -1}))
    assert bad.failure.code == "runner.config_invalid" and "max-round" in bad.failure.message
    # the runner keeps serving
    host.on("InvokeModel", answer("still here"))
    assert (await host.run(R, context=context("hi"))).text == "still here"


# -- LA-08 no output -----------------------------------------------------------------------------


async def test_la08_empty_model_output_is_a_controlled_failure(host: HostDouble) -> None:
    host.on("InvokeModel", answer(""))
    out = await host.run(R, context=context("hi"))
    assert out.failure.code == "runner.empty_output"
    assert not out.of_type("message.completed") and not out.of_type("message.delta")

    host.on("StreamModel", [{"chunk": {"content": ""}}, {"chunk": {"finish_reason": "stop"}}])
    out = await host.run(R, context=context("hi", streaming=True))
    assert out.types == ["run.failed"] and out.failure.code == "runner.empty_output"

    # only reasoning, removed by remove-think: still nothing to say
    host.on("InvokeModel", answer("<think>hmm</think>  "))
    out = await host.run(R, context=context("hi", config={"remove-think": True}))
    assert out.failure.code == "runner.empty_output"
    assert host.calls_to("InvokeModel")[-1].request.remove_think is True


async def test_timeout_is_a_controlled_failure(host: HostDouble) -> None:
    async def slow(req, call):
        await asyncio.sleep(3)
        return answer("late")

    host.on("InvokeModel", slow)
    out = await host.run(R, context=context("hi", config={"timeout": 1}))
    assert out.failure.code == "runner.timeout" and out.failure.retryable


async def test_usage_is_summed_over_the_tool_loop(host: HostDouble) -> None:
    host.on("InvokeModel", answer(calls=[("t", {})], usage=(10, 5)))
    host.on("InvokeModel", answer("done", usage=(20, 7)))
    host.on("CallTool", {"structured": {"ok": True}})
    out = await host.run(R, context=context("hi", tools=["t"]))
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (30, 12, 42)
    tool_msg = host.calls_to("InvokeModel")[1].request.messages[-1]
    assert json.loads(tool_msg.content) == {"ok": True}


async def test_la07_streaming_falls_back_before_output_but_not_after(host: HostDouble) -> None:
    mode = {"m1": "busy"}

    def stream(req, call):
        if mode["m1"] == "partial":
            return [{"chunk": {"content": "partial "}}, RuntimeFailureError("connection reset")]
        if req.model_id == "m1":
            return [RateLimitedError("m1 busy")]
        return [{"chunk": {"content": "from m2"}}]

    host.on("StreamModel", stream)
    ctx = context("hi", streaming=True, config={"model": ["m1", "m2"]}, models=["m1", "m2"])
    out = await host.run(R, context=ctx)
    assert out.deltas == ["from m2"] and out.text == "from m2"

    # a model failing after the user saw text is not silently replaced
    mode["m1"] = "partial"
    out = await host.run(
        R, context=context("hi", streaming=True, config={"model": ["m1", "m2"]}, models=["m1", "m2"])
    )
    assert out.deltas == ["partial "]
    assert out.failure.code == "runner.model_error" and "m1" in out.failure.message
