"""Structured interactions through the real host: request -> client item -> SubmitInteraction -> a new
`interaction.submitted` run; expiry, double submission, invalid answers, over-limit requests."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from typing import Any

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.delivery.store import EXPIRED, PENDING, SUBMITTED
from tests.parity.support import Host, completed_text, finished, kinds, results_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


def new_id() -> str:
    return f"ia-{uuid.uuid4().hex[:12]}"


async def ask(
    host: Host, iid: str, conversation: str = "c-ia", **args: object
) -> list[host_service_pb2.HostServiceRunResponse]:
    return await host.run("form " + json.dumps({"id": iid, **args}), conversation_id=conversation)


async def refused(host: Host, iid: str, **kwargs: object) -> tuple[str, dict[str, str]]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await host.submit(iid, **kwargs)
    err = from_rpc_error(info.value)
    return err.reason, dict(err.metadata)


async def test_round_trip_starts_an_interaction_submitted_run(host: Host) -> None:
    iid = new_id()
    updates = await ask(host, iid)
    order = kinds(updates)
    assert order.index("result:interaction_requested") < order.index("interaction") < order.index("finished")
    assert finished(updates).status == common_pb2.RUN_STATUS_COMPLETED  # the interaction is output
    item = next(u.interaction for u in updates if u.HasField("interaction"))
    request_run = updates[0].accepted.run_id
    assert (item.request.interaction_id, item.status, item.run_id) == (
        iid, host_service_pb2.INTERACTION_STATUS_PENDING, request_run,
    )  # fmt: skip
    ttl = item.request.expires_at.ToDatetime(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC)
    assert dt.timedelta(minutes=29) < ttl <= dt.timedelta(minutes=30)
    assert item.conversation_id == "c-ia"

    answer = await host.submit(
        iid, action_id="deploy", values={"env": "prod", "replicas": 3, "tags": ["a", "c"], "force": True}
    )
    assert answer[0].WhichOneof("update") == "accepted"
    report = json.loads(completed_text(answer))
    assert report["event_type"] == "interaction.submitted"
    assert report["values"] == {"env": "prod", "replicas": 3, "tags": ["a", "c"], "force": True}
    assert report["interaction"]["interactionId"] == iid
    assert report["interaction"]["actionId"] == "deploy"
    assert report["interaction"]["requestRunId"] == request_run
    assert (report["typed"], report["submission_id"]) == ("InteractionSubmittedEvent", iid)
    assert report["subject"] == iid and report["actor"] == "user-1"  # the requesting run's actor
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.status == SUBMITTED
    assert row.submitted_run_id == answer[0].accepted.run_id


async def test_double_submission_is_refused_and_the_same_event_id_attaches(host: Host) -> None:
    iid = new_id()
    await ask(host, iid)
    first = await host.submit(iid, action_id="cancel", values={"env": "staging"}, event_id=f"evt-{iid}")
    run_id = first[0].accepted.run_id
    reason, _ = await refused(host, iid, action_id="deploy", values={"env": "prod"})
    assert reason == "FAILED_PRECONDITION"
    again = await host.submit(iid, action_id="deploy", values={"env": "prod"}, event_id=f"evt-{iid}")
    assert again[0].accepted.run_id == run_id and again[0].accepted.attached
    assert completed_text(again) == completed_text(first)
    assert again[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_expired_interaction_fails_closed(host: Host) -> None:
    iid = new_id()
    await ask(host, iid, expires_in=1)
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.status == PENDING
    await asyncio.sleep(1.3)
    reason, meta = await refused(host, iid, action_id="deploy", values={"env": "prod"})
    assert (reason, meta.get("status")) == ("FAILED_PRECONDITION", "expired")
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.status == EXPIRED and row.submitted_run_id == ""


async def test_unknown_and_invalid_answers_are_refused_before_any_run(host: Host) -> None:
    assert (await refused(host, "no-such-interaction"))[0] == "NOT_FOUND"
    iid = new_id()
    await ask(host, iid)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"action_id": "deploy", "values": {}}, "values.env"),  # required field missing
        ({"action_id": "deploy", "values": {"env": "dev"}}, "values.env"),  # not an option
        ({"action_id": "explode", "values": {"env": "prod"}}, "action_id"),  # unknown action
        ({"values": {"env": "prod"}}, "action_id"),  # action required
        ({"action_id": "deploy", "values": {"env": "prod", "replicas": "3"}}, "values.replicas"),
        ({"action_id": "deploy", "values": {"env": "prod", "tags": ["z"]}}, "values.tags"),
        ({"action_id": "deploy", "values": {"env": "prod", "bogus": 1}}, "values.bogus"),
    ]
    for kwargs, field in cases:
        reason, meta = await refused(host, iid, **kwargs)
        assert (reason, meta.get("field")) == ("INVALID_ARGUMENT", field), kwargs
    reason, _ = await refused(host, iid, action_id="deploy", values={"env": "prod", "notes": "n" * 300_000})
    assert reason == "PAYLOAD_TOO_LARGE"
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.status == PENDING  # nothing consumed it
    # still answerable after the refusals
    ok = await host.submit(iid, action_id="deploy", values={"env": "staging"})
    assert ok[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_answer_routed_to_a_discard_binding_starts_no_run(host: Host) -> None:
    iid = new_id()
    await host.run("confirm " + json.dumps({"id": iid}), conversation_id="no-answers")
    updates = await host.submit(iid, action_id="confirm")
    assert kinds(updates) == ["accepted", "finished"]
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_DISCARDED
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.status == SUBMITTED and row.submitted_run_id == ""


async def test_run_refuses_interaction_submitted_events(host: Host) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await host.run("x", event_type="interaction.submitted")
    err = from_rpc_error(info.value)
    assert (err.reason, err.metadata.get("field")) == ("INVALID_ARGUMENT", "event.event_type")


async def test_over_limit_requests_are_dropped_and_the_run_continues(host: Host) -> None:
    prefix = new_id()
    updates = await host.run("raw_interactions " + json.dumps({"prefix": prefix}), conversation_id="c-raw")
    assert "interaction" not in kinds(updates)
    assert not any(r.HasField("interaction_requested") for r in results_of(updates))
    assert completed_text(updates) == "continued"
    assert any(r.HasField("run_log") and r.run_log.text == "still running" for r in results_of(updates))
    seqs = [r.sequence for r in results_of(updates)]
    assert seqs == list(range(1, len(seqs) + 1))
    for kind in ("fields", "actions", "bytes", "expiry"):
        assert await host.app.runs.interaction_store.get(f"{prefix}-{kind}") is None


async def test_surface_without_interactions_gets_the_fallback_text(host: Host) -> None:
    iid = new_id()
    updates = await host.run(
        "confirm " + json.dumps({"id": iid}), conversation_id="c-fallback", interactions=False
    )
    assert "interaction" not in kinds(updates)
    fallback = [u.reply for u in updates if u.HasField("reply")]
    assert len(fallback) == 1 and fallback[0].message.content.startswith("Really?")
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.status == PENDING  # still answerable by id


async def test_interaction_ids_are_unique_per_host(host: Host) -> None:
    iid = new_id()
    await ask(host, iid, conversation="c-dup-1")
    updates = await ask(host, iid, conversation="c-dup-2")
    assert "interaction" not in kinds(updates)
    assert finished(updates).status == common_pb2.RUN_STATUS_FAILED  # dropped -> no output
    row = await host.app.runs.interaction_store.get(iid)
    assert row is not None and row.conversation_id == "c-dup-1"
