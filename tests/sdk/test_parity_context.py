"""Context parity (variables, delivery, skills, typed platform event), run records and platform actions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentrunner import RunContext, results
from agentrunner.errors import NotImplementedFeatureError, UnauthorizedError
from agentrunner.events import typed_event
from agentrunner.results import RunResult
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2, context_pb2
from tests.sdk.parity_support import box, use

pytestmark = pytest.mark.asyncio

C = context_pb2


def do(fn: Callable[[RunContext], Awaitable[Any]]) -> Callable[[RunContext], AsyncIterator[RunResult]]:
    """A script that awaits `fn(ctx)`, keeps its value in `box["out"]` and completes."""

    async def script(ctx: RunContext) -> AsyncIterator[RunResult]:
        box["out"] = await fn(ctx)
        yield results.completed("ok")

    return script


# -- context fields ----------------------------------------------------------------------------


async def test_variables_delivery_and_skills_reach_the_runner(host: HostDouble) -> None:
    async def read(ctx: RunContext) -> dict[str, Any]:
        return {
            "variables": ctx.variables,
            "automatic_reply": ctx.delivery.automatic_reply,
            "max_fields": ctx.delivery.interactions.max_fields,
            "skills": [s.skill_name for s in ctx.resources.skills],
            "bot": ctx.bot_id,
        }

    out = await host.run(
        use(do(read)),
        "hi",
        variables={"order_id": "1042", "retries": 2},
        automatic_reply=True,
        interactions=common_pb2.InteractionCapabilities(max_fields=7),
        skills=["refunds"],
    )
    assert out.completed
    assert box["out"] == {
        "variables": {"order_id": "1042", "retries": 2},
        "automatic_reply": True,
        "max_fields": 7,
        "skills": ["refunds"],
        "bot": "bot-test",
    }


async def test_typed_event_set_by_the_host_is_returned(host: HostDouble) -> None:
    event = C.PlatformEvent(
        bot_id="bot_1",
        group_member_joined=C.GroupMemberJoinedEvent(
            group=C.PlatformGroup(id="g5", name="Readers"), member=C.PlatformUser(id="u9", nickname="Bo")
        ),
    )

    async def read(ctx: RunContext) -> Any:
        return ctx.platform_event

    await host.run(use(do(read)), "", platform_event=event)
    typed = box["out"]
    assert isinstance(typed, C.GroupMemberJoinedEvent)
    assert (typed.group.name, typed.member.nickname) == ("Readers", "Bo")
    assert box["ctx"].event.event_type == "group.member_joined"


async def test_typed_event_is_parsed_from_public_sdk_shaped_data(host: HostDouble) -> None:
    data = {
        "type": "message.received",
        "bot_uuid": "bot_7",
        "message_id": 123,
        "chat_type": "group",
        "chat_id": 456,
        "sender": {"id": 9, "nickname": "Ada", "extra": "ignored"},
        "group": {"id": 456, "name": "Devs"},
        "message_chain": [
            {"type": "Plain", "text": "hello "},
            {"type": "At", "target": 1},
            {"type": "Plain", "text": "bot"},
        ],
        "timestamp": 1764489600.0,
    }

    async def read(ctx: RunContext) -> Any:
        return ctx.platform_event

    await host.run(use(do(read)), "hello bot", event_data=data)
    typed = box["out"]
    assert isinstance(typed, C.MessageReceivedEvent)
    assert (typed.message_id, typed.chat_type, typed.chat_id) == ("123", C.CHAT_TYPE_GROUP, "456")
    assert (typed.sender.id, typed.sender.nickname, typed.group.name) == ("9", "Ada", "Devs")
    assert typed.text == "hello bot"


def event(event_type: str, data: dict[str, Any]) -> C.EventContext:
    out = C.EventContext(event_id="e", event_type=event_type)
    out.data.update(data)
    return out


async def test_typed_event_for_each_stable_type_and_none_for_others() -> None:
    recalled = typed_event(event("message.deleted", {"message_id": 5, "operator": {"id": "u1"}}))
    assert isinstance(recalled, C.MessageRecalledEvent) and recalled.message_id == "5"
    friend = typed_event(
        event("friend.request_received", {"request_id": "r1", "user": {"id": "u2"}, "message": "hi"})
    )
    assert isinstance(friend, C.FriendRequestReceivedEvent) and friend.user.id == "u2"
    sched = typed_event(
        event("schedule.triggered", {"schedule_id": "daily", "scheduled_time": 0, "payload": {"k": 1}})
    )
    assert isinstance(sched, C.ScheduleTriggeredEvent)
    assert sched.scheduled_time.seconds == 0 and sched.HasField("scheduled_time") and sched.payload["k"] == 1
    api = typed_event(event("api.invoked", {"operation": "summarize", "client_id": "cli"}))
    assert isinstance(api, C.ApiInvokedEvent) and api.operation == "summarize"
    assert typed_event(event("member.left", {"x": 1})) is None


async def test_unparseable_event_data_gives_an_empty_typed_event_not_a_crash() -> None:
    typed = typed_event(event("message.received", {"sender": "not-an-object", "mentions_bot": "yes"}))
    assert isinstance(typed, C.MessageReceivedEvent)
    assert typed.sender.id == ""


# -- run records -------------------------------------------------------------------------------


async def test_run_records_call_the_ledger_rpcs(host: HostDouble) -> None:
    host.on("GetRunRecord", lambda req, call: {"run": {"run_id": req.run_id or "self"}})
    host.on("ListRunRecords", {"runs": [{"run_id": "r1"}, {"run_id": "r2"}], "has_more": True})
    host.on("ListRunRecordEvents", {"results": [{"sequence": 3}], "has_more": False})
    host.on("CancelRunRecord", {"run": {"run_id": "r1", "status": "RUN_STATUS_CANCELLED"}})
    host.on("AppendRunResult", lambda req, call: {"result": {"sequence": 9}})
    host.on("FinalizeRunRecord", {"run": {"run_id": "r1", "status": "RUN_STATUS_COMPLETED"}})

    async def use_ledger(ctx: RunContext) -> dict[str, Any]:
        runs = ctx.runs
        return {
            "get": (await runs.get()).run_id,
            "get_other": (await runs.get("r1")).run_id,
            "list": [r.run_id for r in (await runs.list(statuses=["failed"], limit=2)).runs],
            "events": [r.sequence for r in (await runs.events("r1", after_sequence=2)).results],
            "cancel": (await runs.cancel("r1", reason="stale")).status,
            "append": (await runs.append(results.delta("x"), run_id="r1")).sequence,
            "finalize": (await runs.finalize("completed", run_id="r1", reason="done")).status,
        }

    out = await host.run(use(do(use_ledger)), "hi")
    assert out.completed, out.failure
    assert box["out"] == {
        "get": "self",
        "get_other": "r1",
        "list": ["r1", "r2"],
        "events": [3],
        "cancel": common_pb2.RUN_STATUS_CANCELLED,
        "append": 9,
        "finalize": common_pb2.RUN_STATUS_COMPLETED,
    }
    assert list(host.calls_to("ListRunRecords")[0].request.statuses) == [common_pb2.RUN_STATUS_FAILED]
    assert host.calls_to("ListRunRecordEvents")[0].request.after_sequence == 2
    assert host.calls_to("CancelRunRecord")[0].request.reason == "stale"
    assert host.calls_to("AppendRunResult")[0].request.result.message_delta.text == "x"
    fin = host.calls_to("FinalizeRunRecord")[0].request
    assert (fin.run_id, fin.status, fin.reason) == ("r1", common_pb2.RUN_STATUS_COMPLETED, "done")


async def test_run_record_calls_are_gated_by_available_apis(host: HostDouble) -> None:
    async def try_all(ctx: RunContext) -> list[str]:
        refused = []
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "get": ctx.runs.get,
            "append": lambda: ctx.runs.append(results.delta("x")),
            "finalize": lambda: ctx.runs.finalize("completed"),
        }
        for name, call in calls.items():
            try:
                await call()
            except UnauthorizedError:
                refused.append(name)
        return refused

    apis = {"run_get": True, "run_append_result": False, "run_finalize": False}
    await host.run(use(do(try_all)), "hi", apis=apis)
    assert box["out"] == ["append", "finalize"]
    assert [c.method for c in host.calls if c.method.endswith(("RunResult", "RunRecord"))] == ["GetRunRecord"]


# -- platform actions --------------------------------------------------------------------------


async def test_platform_actions_call_their_rpcs(host: HostDouble) -> None:
    host.on("RequestPlatformAction", lambda req, call: {"result": {"muted": req.payload["user_id"]}})
    host.on("SendMessage", {"delivered": True, "platform_message_id": "pm_1"})

    async def act(ctx: RunContext) -> dict[str, Any]:
        return {
            "api": await ctx.call_platform_api("group.mute", {"user_id": "u9", "seconds": 60}),
            "send": (await ctx.send_message("group", "g5", "hello group")).platform_message_id,
            "reply": (await ctx.reply_message("quoted", quote_origin=True)).delivered,
        }

    out = await host.run(use(do(act)), "hi")
    assert out.completed, out.failure
    assert box["out"] == {"api": {"muted": "u9"}, "send": "pm_1", "reply": True}
    action = host.calls_to("RequestPlatformAction")[0].request
    assert (action.action, action.payload["seconds"], action.bot_id) == ("group.mute", 60, "")
    sent = host.calls_to("SendMessage")[0].request
    assert (sent.target_type, sent.target_id, sent.message.content) == ("group", "g5", "hello group")
    assert host.replies[0].quote_origin and host.replies[0].mode == common_pb2.REPLY_MODE_FULL


async def test_platform_actions_outside_the_grant_are_refused_locally(host: HostDouble) -> None:
    async def act(ctx: RunContext) -> list[str]:
        refused = []
        for name, call in {
            "kick": lambda: ctx.call_platform_api("group.kick", {"user_id": "u9"}),
            "send": lambda: ctx.send_message("person", "u1", "hi"),
        }.items():
            try:
                await call()
            except UnauthorizedError as exc:
                refused.append(f"{name}: {exc.message}")
        return refused

    await host.run(use(do(act)), "hi", platform_actions=["group.mute"])
    assert box["out"] == [
        "kick: RequestPlatformAction: platform action 'group.kick' is not granted to this run",
        "send: SendMessage: platform action 'send_message' is not granted to this run",
    ]
    assert host.calls_to("RequestPlatformAction") == [] and host.calls_to("SendMessage") == []


async def test_a_host_denial_of_a_platform_action_is_typed(host: HostDouble) -> None:
    host.on("RequestPlatformAction", error="NOT_IMPLEMENTED", message="no adapter implements group.mute")

    async def act(ctx: RunContext) -> str:
        try:
            await ctx.call_platform_api("group.mute", {"user_id": "u9"})
        except NotImplementedFeatureError as exc:
            return exc.message
        return "not refused"

    await host.run(use(do(act)), "hi")
    assert box["out"] == "no adapter implements group.mute"
