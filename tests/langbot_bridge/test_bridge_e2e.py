"""LangBot Runner plugins behind the real host, end to end (`e2e_stack.py`: the real host through its CLI
on SQLite, the bridge it starts, the public plugin runtime and the test plugins): the plugin API surface,
results, replies, state and history round-tripping, refusals, cancel and deadline."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import audit_outcomes, http_json
from tests.langbot_bridge.e2e_stack import CRASHY, KIT, Outcome, Stack, ask, request_for, start_forever

pytestmark = pytest.mark.asyncio


async def test_the_host_lists_every_plugin_runner_with_its_translated_manifest(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        listed = await stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=10)
    manifests = {r.manifest.id: r.manifest for r in listed.runners}
    assert {KIT + n for n in ("echo", "llm", "ask", "forever")} | {CRASHY + "crash"} <= set(manifests)
    llm = manifests[KIT + "llm"]
    assert [f.name for f in llm.config_schema] == ["model"]
    assert llm.config_schema[0].type == 10  # CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR
    assert llm.capabilities.streaming and llm.capabilities.event_context
    assert manifests[KIT + "ask"].capabilities.interactions
    assert manifests[KIT + "forever"].capabilities.interrupt
    assert manifests[KIT + "echo"].metadata["component_kind"] == "Runner"


async def test_a_streaming_echo_arrives_as_increments_with_its_final_text(stack: Stack) -> None:
    out = await ask(stack, "echo", "hello plugin world")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert [d.text for d in out.of("message_delta")] == [">", " hello", " plugin", " world"]
    assert out.streamed == "> hello plugin world"
    assert out.answer == "> hello plugin world"
    snapshots = await ask(stack, "snapshots", "one two three")  # LangBot-style snapshots in `content`
    assert [d.text for d in snapshots.of("message_delta")] == ["one", " two", " three"]
    assert snapshots.answer == "one two three"


async def test_plugin_settings_come_from_the_plugin_config_file_and_the_environment(stack: Stack) -> None:
    out = await ask(stack, "echo", "greet", conversation="greet")
    assert out.answer == "> bonjour"


async def test_invoke_llm_reaches_the_host_model_and_usage_lands_on_the_terminal_result(stack: Stack) -> None:
    out = await ask(stack, "llm", "say pineapple")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert "pineapple" in out.answer
    terminal = out.results[-1]
    assert terminal.HasField("usage") and terminal.usage.total_tokens > 0
    streamed = await ask(stack, "llm", "stream: mango juice", conversation="llm-stream")
    assert streamed.status == "RUN_STATUS_COMPLETED", streamed.results
    assert "mango juice" in streamed.answer and streamed.streamed == streamed.answer
    assert len(streamed.of("message_delta")) > 1
    counted = await ask(stack, "llm", "tokens: how many tokens is this", conversation="llm-tokens")
    assert counted.status == "RUN_STATUS_COMPLETED", counted.results
    assert counted.answer.startswith("tokens=") and int(counted.answer.removeprefix("tokens=")) > 0
    chats = [r for r in http_json(f"{stack.mock}/_admin/requests") if r["path"].endswith("/chat/completions")]
    assert any(r["body"].get("stream") for r in chats) and any(not r["body"].get("stream") for r in chats)


async def test_history_round_trips_through_history_page(stack: Stack) -> None:
    first = await ask(stack, "history", "first question", conversation="hist")
    assert first.answer == "seen 0: "
    second = await ask(stack, "history", "second question", conversation="hist")
    assert second.answer == "seen 2: user:first question | assistant:seen 0: "


async def test_state_round_trips_through_state_get_set_and_state_updated(stack: Stack) -> None:
    first = await ask(stack, "state", "alpha", conversation="st")
    assert first.answer == "counter=1 last=None", first.results
    second = await ask(stack, "state", "beta", conversation="st")
    assert second.answer == "counter=2 last=alpha"
    assert [s.key for s in second.of("state_updated")] == ["last_input"]


async def test_call_tool_reaches_the_host_tool_and_is_traced(stack: Stack) -> None:
    out = await ask(stack, "tool", "add please")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert out.answer == "tools=add,event_reply params=['a', 'b'] add=5"  # event_reply: ctx.reply's grant
    assert [t.tool_name for t in out.of("tool_call_started")] == ["add"]
    assert audit_outcomes(stack.db_file, out.run_id, "CallTool") == ["OK"]


async def test_reply_and_reply_stream_reach_the_client_as_replies(stack: Stack) -> None:
    out = await ask(stack, "reply", "reply to me")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    replies = [u.reply for u in out.updates if u.HasField("reply")]
    texts = [(common_pb2.ReplyMode.Name(r.mode), r.message.content) for r in replies]
    assert texts[0] == ("REPLY_MODE_FULL", "quick reply")
    assert ("REPLY_MODE_UPDATE", "streamed reply") in texts
    assert texts[-1][0] == "REPLY_MODE_FINISH"
    assert out.answer == "done replying"


async def test_ctx_log_becomes_a_run_log_result(stack: Stack) -> None:
    out = await ask(stack, "log", "log something")
    (entry,) = out.of("run_log")
    assert entry.text == "plugin says hi" and entry.level == result_pb2.RUN_LOG_LEVEL_WARNING
    assert out.answer == "logged"


async def test_an_interaction_is_requested_and_its_answer_starts_the_next_run(stack: Stack) -> None:
    request = request_for("ask", "deploy?")
    request.event.delivery.interactions.field_types.append(common_pb2.INTERACTION_FIELD_TYPE_TEXT)
    request.event.delivery.interactions.action_styles.append(common_pb2.INTERACTION_ACTION_STYLE_PRIMARY)
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        asked = Outcome([u async for u in stub.Run(request, timeout=60)])
        (interaction,) = [u.interaction for u in asked.updates if u.HasField("interaction")]
        assert interaction.request.title == "Proceed?" and [a.id for a in interaction.request.actions] == [
            "yes",
            "no",
        ]
        answer = host_service_pb2.SubmitInteractionRequest(
            interaction_id=interaction.request.interaction_id, action_id="yes"
        )
        answered = Outcome([u async for u in stub.SubmitInteraction(answer, timeout=60)])
    assert asked.status == "RUN_STATUS_COMPLETED", asked.results
    assert answered.status == "RUN_STATUS_COMPLETED", answered.results
    assert answered.answer.startswith("answered ") and " with yes " in answered.answer


async def test_a_plugin_that_raises_fails_its_run_typed_and_the_host_goes_on(stack: Stack) -> None:
    out = await ask(stack, "boom", "explode")
    (failure,) = out.of("run_failed")
    assert out.status == "RUN_STATUS_FAILED"
    assert failure.code == "runner.exception" and "boom from the plugin" in failure.message
    assert (await ask(stack, "echo", "still here", conversation="after-boom")).answer == "> still here"


async def test_an_ungranted_call_is_refused_by_the_host_and_audited(stack: Stack) -> None:
    out = await ask(stack, "probe", "read the actor")
    assert out.answer.startswith("refused: ") and "UNAUTHORIZED" in out.answer, out.answer
    assert audit_outcomes(stack.db_file, out.run_id, "GetState") == ["UNAUTHORIZED"]


async def test_cancel_reaches_the_plugin(stack: Stack) -> None:
    stack.marker.unlink(missing_ok=True)
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call, run_id = await start_forever(stub, "forever")
        await stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="test"), timeout=10)
        rest = Outcome([u async for u in call])
    assert rest.status == "RUN_STATUS_CANCELLED"
    for _ in range(50):
        if stack.marker.exists():
            break
        await asyncio.sleep(0.1)
    assert stack.marker.read_text() == f"cancelled {run_id}"


async def test_the_deadline_reaches_the_plugin(stack: Stack) -> None:
    stack.marker.unlink(missing_ok=True)
    started = time.monotonic()
    out = await ask(stack, "deadline", "run forever")
    assert out.status == "RUN_STATUS_TIMEOUT", out.results
    assert out.of("run_failed")[0].code == "deadline_exceeded"
    assert 2.5 < time.monotonic() - started < 10
    for _ in range(50):
        if stack.marker.exists():
            break
        await asyncio.sleep(0.1)
    assert stack.marker.read_text() == f"cancelled {out.run_id}"


async def test_a_plugin_cannot_use_another_plugins_run(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call, victim = await start_forever(stub, "forever-victim")
        try:
            out = await ask(stack, "spoof", victim)
        finally:
            call.cancel()
    assert out.answer.startswith("spoof refused") and "belongs to another plugin" in out.answer, out.answer
    assert audit_outcomes(stack.db_file, victim, "SetState") == []
