"""Plugin API calls through the bridge's router: the ProxyService call each becomes (with the run's token),
the answer in the shape the public SDK parses (checked with its own models), and every refusal in the
runtime's error shape. The host is the SDK's in-process double on real gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from langbot_plugin.api.entities.builtin.provider.message import LLMInvokeResult, LLMStreamEvent
from langbot_plugin.api.entities.builtin.runner.page_results import AgentEventRecord, EventPage, HistoryPage
from langbot_plugin.api.entities.builtin.runner.run_ledger import AgentRun, RunEventPage
from langbot_plugin.api.entities.builtin.runner.steering import SteeringPullResult

from agentrunner.context import RunContext
from agentrunner.errors import RateLimitedError
from agentrunner.testing import HostDouble, make_context
from agentrunner_runners.langbot_bridge.api import ApiRouter
from agentrunner_runners.langbot_bridge.peer import ReplyError
from agentrunner_runners.langbot_bridge.runs import BridgedRun, RunTable

pytestmark = pytest.mark.asyncio

RUN = "run-api-1"
PLUGIN = "acme/agent"


class Setup:
    def __init__(self, host: HostDouble) -> None:
        self.host = host
        host.tokens[RUN] = "tok-secret"  # the double checks the run token like the host does
        ctx = RunContext(
            make_context("hi", run_id=RUN),
            config={},
            run_token="tok-secret",
            host_api_endpoint=host.endpoint,
            precheck=False,
        )
        self.runs = RunTable()
        self.runs.add(BridgedRun(ctx, PLUGIN, "plugin:acme/agent/default"))
        self.context = {"installation_uuid": self.runs.installation_for(PLUGIN)}
        self.router = ApiRouter(self.runs, lambda a, n: {"plugin": f"{a}/{n}"})

    async def call(self, action: str, /, **data: Any) -> Any:
        return await self.router.handle(action, {"run_id": RUN, **data}, self.context)


@pytest_asyncio.fixture
async def setup() -> AsyncIterator[Setup]:
    async with HostDouble() as host:
        yield Setup(host)


async def test_model_calls_answer_in_the_sdks_shapes(setup: Setup) -> None:
    setup.host.on(
        "InvokeModel",
        {
            "message": {
                "role": "assistant",
                "content": "hi!",
                "tool_calls": [{"id": "t1", "name": "add", "arguments_json": '{"a":1}'}],
            },
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    )
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        }
    ]
    funcs = [
        {
            "name": "add",
            "human_desc": "adds",
            "description": "adds two numbers",
            "parameters": {"type": "object"},
        }
    ]
    answer = await setup.call(
        "invoke_llm", llm_model_uuid="chat", messages=messages, funcs=funcs, extra_args={"temperature": 0}
    )
    result = LLMInvokeResult.model_validate(answer)
    assert result.message.content == "hi!" and result.message.tool_calls[0].function.arguments == '{"a":1}'
    assert result.usage is not None and result.usage.total_tokens == 5
    (call,) = setup.host.calls_to("InvokeModel")
    assert (
        call.metadata["x-agentrunner-run-token"] == "tok-secret"
        and call.metadata["x-agentrunner-run-id"] == RUN
    )
    assert call.request.model_id == "chat" and call.request.tools[0].description == "adds two numbers"
    assert [c.WhichOneof("kind") for c in call.request.messages[0].contents] == ["text", "image"]

    setup.host.on(
        "StreamModel",
        [
            {"chunk": {"content": "a"}},
            {"chunk": {"content": "b", "finish_reason": "stop"}},
            {"usage": {"total_tokens": 9}},
        ],
    )
    stream = await setup.call("invoke_llm_stream", llm_model_uuid="chat", messages=messages)
    events = [LLMStreamEvent.model_validate(e) async for e in stream]
    assert [e.chunk.content for e in events if e.chunk] == ["a", "b"]
    assert events[1].chunk is not None and events[1].chunk.is_final and events[-1].usage is not None

    setup.host.reset_scripts()
    setup.host.on(
        "StreamModel",
        [{"chunk": {"content": "partial"}}, RateLimitedError("the provider throttled the stream")],
    )
    stream = await setup.call("invoke_llm_stream", llm_model_uuid="chat", messages=messages)
    with pytest.raises(ReplyError) as mid_stream:  # ends the stream in the runtime's error shape
        _ = [e async for e in stream]
    assert mid_stream.value.message == "RATE_LIMITED: the provider throttled the stream"


async def test_context_calls_answer_in_the_sdks_shapes(setup: Setup) -> None:
    setup.host.on(
        "ListHistory",
        {
            "items": [
                {
                    "transcript_id": "t1",
                    "event_id": "e1",
                    "role": "user",
                    "content": "earlier",
                    "seq": 4,
                    "cursor": "c4",
                }
            ],
            "has_more": True,
            "next_cursor": "c4",
        },
    )
    page = HistoryPage.model_validate(
        await setup.call("history_page", limit=5, direction="backward", before_cursor="c9")
    )
    assert [(i.role, i.content, i.seq) for i in page.items] == [("user", "earlier", 4)] and page.has_more
    assert setup.host.calls_to("ListHistory")[0].request.before_cursor == "c9"
    setup.host.on(
        "GetEvent",
        {
            "event": {
                "event_id": "e1",
                "event_type": "message.received",
                "source": "api",
                "actor": {"actor_type": "user", "actor_id": "u1"},
            }
        },
    )
    record = AgentEventRecord.model_validate(await setup.call("event_get", event_id="e1"))
    assert (record.event_id, record.actor_id) == ("e1", "u1")
    setup.host.on(
        "ListEvents", {"items": [{"event_id": "e2", "event_type": "message.received", "source": "api"}]}
    )
    assert EventPage.model_validate(await setup.call("event_page", limit=3)).items[0].event_id == "e2"
    setup.host.on(
        "PullSteering",
        {
            "items": [
                {
                    "steering_id": "s1",
                    "event": {"event_id": "e3", "event_type": "message.received"},
                    "input": {"text": "more"},
                }
            ]
        },
    )
    pulled = SteeringPullResult.model_validate(await setup.call("steering_pull", mode="one"))
    assert pulled.items[0].input.text == "more" and setup.host.calls_to("PullSteering")[0].request.limit == 1
    setup.host.on(
        "GetRunRecord",
        {
            "run": {
                "run_id": RUN,
                "status": "RUN_STATUS_RUNNING",
                "cancel_request_time": "2030-01-01T00:00:00Z",
            }
        },
    )
    run = AgentRun.model_validate(await setup.call("run_get", target_run_id=RUN))
    assert run.status == "running" and run.cancel_requested_at == 1893456000
    assert setup.host.calls_to("GetRunRecord")[0].request.run_id == ""  # "" is this run
    setup.host.on(
        "ListRunRecordEvents", {"results": [{"run_id": RUN, "sequence": 1, "run_log": {"text": "x"}}]}
    )
    events = RunEventPage.model_validate(await setup.call("run_events_page"))
    assert events.items[0].type == "run.log"


async def test_state_storage_and_replies(setup: Setup) -> None:
    setup.host.on("GetState", {"found": True, "value": 3})
    assert await setup.call("state_get", scope="conversation", key="n") == {"value": 3}  # an int, as JSON had
    assert await setup.call("state_set", scope="conversation", key="n", value=4) == {"success": True}
    setup.host.on("GetStorage", {"found": True, "value": "aGk="}).on("GetStorage", {"found": False})
    assert await setup.call("get_binary_storage", key="k", owner_type="plugin", owner="acme/agent") == {
        "value_base64": "aGk="
    }
    with pytest.raises(ReplyError) as absent:
        await setup.call("get_binary_storage", key="k", owner_type="workspace", owner="w")
    assert absent.value.message.startswith("NOT_FOUND:")
    reply = await setup.call("call_tool", tool_name="event_reply", parameters={"text": "hello"})
    assert reply["result"]["delivered"] is True
    streamed = await setup.call("reply_stream", stream_id="s-1", operation="update", text="partial")
    assert streamed["result"]["reply_id"] == "s-1"
    modes = [
        (c.request.reply_id.startswith("reply-") or c.request.reply_id, c.request.mode)
        for c in setup.host.calls_to("SendReply")
    ]
    assert modes == [(True, 1), ("s-1", 2)]  # FULL, then UPDATE
    await setup.call(
        "call_platform_api",
        action="send_message",
        context_tool="event_reply",
        params={"message": [{"type": "Plain", "text": "quoted"}], "quote_origin": True},
    )
    last = setup.host.calls_to("SendReply")[-1].request
    assert last.message.content == "quoted" and last.quote_origin


async def test_host_refusals_come_back_in_the_runtimes_error_shape(setup: Setup) -> None:
    setup.host.on("GetState", error="UNAUTHORIZED", message="scope actor is not granted")
    with pytest.raises(ReplyError) as refused:
        await setup.call("state_get", scope="actor", key="x")
    assert refused.value.message == "UNAUTHORIZED: scope actor is not granted"
    assert refused.value.error is not None and refused.value.error["code"] == "unauthorized"
    assert refused.value.error["retryable"] is False
    with pytest.raises(ReplyError) as invalid:
        await setup.call("state_get", scope="galaxy", key="x")
    assert invalid.value.message.startswith("INVALID_ARGUMENT:")


@pytest.mark.parametrize(
    "action", ["invoke_embedding", "get_box_status", "vector_search", "set_query_var", "runtime_register"]
)
async def test_what_this_protocol_does_not_offer_is_refused_at_once(setup: Setup, action: str) -> None:
    with pytest.raises(ReplyError) as refused:
        await setup.call(action)
    assert refused.value.message.startswith("NOT_IMPLEMENTED:")
    assert setup.host.calls == []


async def test_a_call_must_name_an_open_run_of_the_calling_plugin(setup: Setup) -> None:
    with pytest.raises(ReplyError) as outside:
        await setup.router.handle("state_get", {"scope": "conversation", "key": "x"}, setup.context)
    assert outside.value.message.startswith("NOT_IMPLEMENTED:") and "outside a run" in outside.value.message
    with pytest.raises(ReplyError) as closed:
        await setup.router.handle(
            "state_get", {"run_id": "run-gone", "scope": "conversation", "key": "x"}, setup.context
        )
    assert "not open" in closed.value.message
    other = {"installation_uuid": setup.runs.installation_for("someone/else")}
    with pytest.raises(ReplyError) as stolen:
        await setup.router.handle("state_get", {"run_id": RUN, "scope": "conversation", "key": "x"}, other)
    assert "belongs to another plugin" in stolen.value.message
    with pytest.raises(ReplyError):
        await setup.router.handle("state_get", {"run_id": RUN, "scope": "conversation", "key": "x"}, None)
    assert setup.host.calls == []
    assert await setup.router.handle(
        "get_plugin_settings", {"plugin_author": "acme", "plugin_name": "agent"}, None
    ) == {"plugin": "acme/agent"}
