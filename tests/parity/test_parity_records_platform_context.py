"""Run records, platform actions and the runner context (variables, typed platform event) through the
real host."""

from __future__ import annotations

import json

import grpc
import pytest
from sqlalchemy import select

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.store.schema import EventLogRow
from tests.helpers import audit_outcomes
from tests.parity.support import Host, completed_text, run_request

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def audit(host: Host, run_id: str, method: str) -> list[str]:
    return await audit_outcomes(host.app.db, run_id, method)


async def test_run_records_default_policy_refuses_append_and_finalize(host: Host) -> None:
    earlier = await host.run("log", conversation_id="c-runs")
    other = earlier[0].accepted.run_id
    updates = await host.run("runs " + json.dumps({"other": other}), conversation_id="c-runs")
    got = json.loads(completed_text(updates))
    assert got["me"] == updates[0].accepted.run_id and got["status"] == "RUN_STATUS_RUNNING"
    assert other in got["listed"] and got["me"] in got["listed"]
    assert "run_log" in got["events"] and got["events"][-1] == "run_completed"
    assert got["cancelled"] == "RUN_STATUS_COMPLETED"  # an ended run is returned unchanged
    assert (got["append"], got["finalize"]) == ("UNAUTHORIZED", "UNAUTHORIZED")
    assert got["apis"] == {"append": False, "finalize": False}
    me = updates[0].accepted.run_id
    assert await audit(host, me, "AppendRunResult") == ["UNAUTHORIZED"]


async def test_run_records_append_and_finalize_when_the_policy_grants_them(host: Host) -> None:
    earlier = await host.run("log", conversation_id="c-runs-2")
    other = earlier[0].accepted.run_id
    updates = await host.run(
        "runs " + json.dumps({"other": other}), conversation_id="c-runs-2", agent_id="parity-grant"
    )
    got = json.loads(completed_text(updates))
    assert got["apis"] == {"append": True, "finalize": True}
    assert got["append"] == "OK"  # a run.log appended to the calling run is accepted
    me = updates[0].accepted.run_id
    stored = await host.app.stores.ledger.list_results(me)
    assert any(r.HasField("run_log") and r.run_log.text == "appended line" for r in stored)
    assert got["finalize"] == "OK"


async def test_platform_actions_denied_not_implemented_and_send_message(host: Host) -> None:
    updates = await host.run("platform " + json.dumps({"target": "c-inbox"}), conversation_id="c-platform")
    got = json.loads(completed_text(updates))
    run_id = updates[0].accepted.run_id
    assert got["resources"] == ["send_message"]  # group.mute is granted but no adapter implements it
    assert got["kick"] == "UNAUTHORIZED"
    assert got["mute"] == "NOT_IMPLEMENTED"
    assert got["other_bot"] == "UNAUTHORIZED"
    assert got["person"] == "NOT_IMPLEMENTED"
    assert got["sent"][0] is True and got["again"] == got["sent"]  # idempotent: sent once
    assert await audit(host, run_id, "RequestPlatformAction") == [
        "UNAUTHORIZED",
        "NOT_IMPLEMENTED",
        "UNAUTHORIZED",
    ]
    rows, _, _ = await host.app.stores.transcript.page(conversation_id="c-inbox", forward=True, limit=10)
    assert [(r.role, r.content, r.meta.get("source")) for r in rows] == [
        ("assistant", "hello there", "send_message")
    ]


async def test_variables_are_filtered_and_the_typed_event_is_set(host: Host) -> None:
    variables = {
        "order_id": 1,
        "api_key": "x",
        "db_password": "y",
        "_private": 1,
        "max_tokens": 5,
        "upstream": "secret-config-field",
        "profile": {"name": "ann", "session_key": "s", "authToken": "t"},
    }
    updates = await host.run(
        "context",
        conversation_id="c-ctx",
        variables=variables,
        data={"message_id": 42, "chat_type": "group", "chat_id": 7},
    )
    got = json.loads(completed_text(updates))
    assert got["variables"] == {"order_id": 1, "max_tokens": 5, "profile": {"name": "ann"}}
    assert (got["typed"], got["typed_text"], got["typed_chat_id"]) == ("MessageReceivedEvent", "context", "7")
    assert got["host_set"] is True and got["bot_id"] == "bot-1"
    assert got["automatic_reply"] is False and got["reply_api"] is True
    assert got["skills"] == ["summarize"]
    async with host.app.db.read() as s:
        logged = json.dumps([r.data for r in (await s.scalars(select(EventLogRow))).all()])
    assert "secret-config-field" not in logged and "db_password" not in logged


async def test_operator_variables_win_and_are_filtered_too(host: Host) -> None:
    updates = await host.run(
        "context", conversation_id="c-ctx-2", agent_id="parity-grant", variables={"order_id": 1}
    )
    got = json.loads(completed_text(updates))
    assert got["variables"] == {"order_id": 2, "region": "eu"}


async def test_mismatching_platform_event_is_invalid_argument(host: Host) -> None:
    req = run_request("context", conversation_id="c-ctx-3")
    req.event.platform_event.group_member_joined.group.id = "g1"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        [u async for u in host.stub.Run(req, timeout=30)]
    err = from_rpc_error(info.value)
    assert (err.reason, err.metadata.get("field")) == ("INVALID_ARGUMENT", "event.platform_event")
    ok = run_request("context", conversation_id="c-ctx-3")
    ok.event.platform_event.message_received.text = "typed by the client"
    updates = [u async for u in host.stub.Run(ok, timeout=30)]
    assert json.loads(completed_text(updates))["typed_text"] == "typed by the client"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert isinstance(updates[0], host_service_pb2.HostServiceRunResponse)
