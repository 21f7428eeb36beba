"""The proxy fact handlers, called as the servicer calls them: a `ProxyCall` with the frozen snapshot."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import pytest_asyncio
from google.protobuf import struct_pb2

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from agentrunner.v1 import common_pb2, context_pb2, result_pb2
from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.ports import AuthorizationSnapshot, RunRecord, RunSession, hash_token, utcnow
from agentrunner_host.proxy.api import ProxyCall
from agentrunner_host.proxy.facts import fact_handlers
from agentrunner_host.store.fact_stores import FactStores
from tests.store.conftest import add_run, make_snapshot
from tests.store.test_transcript_events import envelope

pytestmark = pytest.mark.asyncio


def call(snapshot: AuthorizationSnapshot, method: str = "X") -> ProxyCall:
    session = RunSession(
        snapshot.run_id, hash_token("t"), snapshot.runner_id, utcnow() + dt.timedelta(hours=1), snapshot
    )
    return ProxyCall(session=session, method=method)


@pytest_asyncio.fixture
async def world(stores: FactStores) -> tuple[FactStores, dict[str, Any]]:
    """Conversation c1 with 12 messages (a run_1 in it), conversation c2 with one, prompt and cancel hooks."""
    for run_id, event_id, conv in (
        ("run_1", "evt_1", "c1"),
        ("run_0", "evt_0", "c1"),
        ("run_x", "evt_x", "c2"),
    ):
        await add_run(
            stores,
            RunRecord(
                run_id=run_id,
                event_id=event_id,
                agent_id="agent_1",
                binding_id="bind_1",
                runner_id="plugin:acme/agent/default",
                conversation_id=conv,
            ),
        )
    for i in range(6):
        await stores.record_event(
            envelope(f"m{i}", f"question {i} about kittens" if i == 2 else f"question {i}")
        )
        await stores.record_results(
            make_snapshot(run_id="run_0"),
            [
                result_pb2.RunResult(
                    sequence=i + 1,
                    message_completed=result_pb2.MessageCompleted(
                        message=common_pb2.AssistantMessage(content=f"answer {i}")
                    ),
                )
            ],
        )
    await stores.record_event(envelope("other", "secret elsewhere", conversation="c2"))
    cancelled: list[tuple[str, str]] = []

    async def on_cancel(run_id: str, reason: str) -> None:
        cancelled.append((run_id, reason))

    # the runs open in this process, and their streams' own numbering of appended results
    open_runs = {"run_0", "run_1"}
    numbering: dict[str, int] = {}

    async def on_append(run_id: str, result: result_pb2.RunResult) -> result_pb2.RunResult | bool:
        if run_id not in open_runs:
            return False
        numbering[run_id] = numbering.get(run_id, 0) + 1
        result.sequence = numbering[run_id]
        return result

    prompts = {"agent_1": [common_pb2.ModelMessage(role="system", content="You are kind.")]}
    handlers = fact_handlers(
        stores,
        prompt_lookup=lambda agent: prompts.get(agent, []),
        on_cancel=on_cancel,
        on_append=on_append,
        is_open=lambda run_id: run_id in open_runs,
    )
    return stores, {"h": handlers, "cancelled": cancelled, "open": open_runs}


async def test_history_pages_backward_and_forward_with_opaque_cursors(world: Any) -> None:
    _stores, env = world
    h = env["h"]
    c = call(make_snapshot())
    page = await h["ListHistory"](c, pb.ListHistoryRequest(limit=5))
    assert [i.content for i in page.items] == ["answer 3", "question 4", "answer 4", "question 5", "answer 5"]
    assert (
        page.has_more and page.next_cursor and page.total_count == 12 and c.audit["resource"] == "history:c1"
    )
    older = await h["ListHistory"](c, pb.ListHistoryRequest(before_cursor=page.next_cursor, limit=5))
    assert [i.seq for i in older.items] == [3, 4, 5, 6, 7]
    oldest = await h["ListHistory"](c, pb.ListHistoryRequest(before_cursor=older.next_cursor, limit=5))
    assert [i.seq for i in oldest.items] == [1, 2] and not oldest.has_more and oldest.next_cursor == ""
    fwd = await h["ListHistory"](
        c,
        pb.ListHistoryRequest(after_cursor=oldest.prev_cursor, direction=pb.PAGE_DIRECTION_FORWARD, limit=3),
    )
    assert [i.seq for i in fwd.items] == [3, 4, 5] and fwd.has_more
    assert all(i.role in {"user", "assistant"} and i.cursor for i in fwd.items)
    # Huge limits are capped.
    capped = await h["ListHistory"](c, pb.ListHistoryRequest(limit=10_000))
    assert len(capped.items) == 12


async def test_history_refusals(world: Any) -> None:
    stores, env = world
    h = env["h"]
    with pytest.raises(UnauthorizedError):
        await h["ListHistory"](call(make_snapshot()), pb.ListHistoryRequest(conversation_id="c2"))
    granted = await h["ListHistory"](
        call(make_snapshot(cross_conversation=True)), pb.ListHistoryRequest(conversation_id="c2")
    )
    assert [i.content for i in granted.items] == ["secret elsewhere"]
    with pytest.raises(UnauthorizedError):
        await h["ListHistory"](call(make_snapshot(history=frozenset())), pb.ListHistoryRequest())
    c2_cursor = granted.items[0].cursor
    with pytest.raises(InvalidArgumentError) as info:  # a cursor of another conversation
        await h["ListHistory"](call(make_snapshot()), pb.ListHistoryRequest(before_cursor=c2_cursor))
    assert info.value.field == "before_cursor"
    stale = stores.transcript.cursor("c1", 999)  # validly signed, but past the conversation's end
    with pytest.raises(InvalidArgumentError, match="stale"):
        await h["ListHistory"](call(make_snapshot()), pb.ListHistoryRequest(before_cursor=stale))
    with pytest.raises(InvalidArgumentError):
        await h["ListHistory"](call(make_snapshot()), pb.ListHistoryRequest(after_cursor="Zm9v.YmFy"))
    with pytest.raises(InvalidArgumentError):
        await h["ListHistory"](call(make_snapshot()), pb.ListHistoryRequest(limit=-1))


async def test_history_is_limited_to_the_runs_thread(stores: FactStores) -> None:
    for i, thread in enumerate(["t1", "t2", "t1"]):
        env = envelope(f"e{i}", f"msg {i}")
        env.conversation.thread_id = thread
        await stores.record_event(env)
    h = fact_handlers(stores)
    page = await h["ListHistory"](call(make_snapshot(thread_id="t1")), pb.ListHistoryRequest())  # type: ignore[misc]  # a unary handler
    assert [i.content for i in page.items] == ["msg 0", "msg 2"] and page.total_count == 2


async def test_search_history(world: Any) -> None:
    _, env = world
    h = env["h"]
    found = await h["SearchHistory"](call(make_snapshot()), pb.SearchHistoryRequest(query="kittens"))
    assert [i.content for i in found.items] == ["question 2 about kittens"] and found.query == "kittens"
    none = await h["SearchHistory"](call(make_snapshot()), pb.SearchHistoryRequest(query="secret"))
    assert list(none.items) == []  # c2's message is not searched
    with pytest.raises(UnauthorizedError):
        await h["SearchHistory"](
            call(make_snapshot(history=frozenset({"page"}))), pb.SearchHistoryRequest(query="x")
        )
    with pytest.raises(InvalidArgumentError):
        await h["SearchHistory"](call(make_snapshot()), pb.SearchHistoryRequest(query="  "))


async def test_events_get_and_page(world: Any) -> None:
    stores, env = world
    h = env["h"]
    c = call(make_snapshot())
    got = await h["GetEvent"](c, pb.GetEventRequest(event_id="m2"))
    assert (
        got.event.event_type == "message.received" and got.event.input_summary == "question 2 about kittens"
    )
    assert got.event.actor.actor_id == "user_1" and c.audit["resource"] == "event:m2"
    with pytest.raises(UnauthorizedError):
        await h["GetEvent"](call(make_snapshot()), pb.GetEventRequest(event_id="other"))
    with pytest.raises(NotFoundError):
        await h["GetEvent"](call(make_snapshot()), pb.GetEventRequest(event_id="nope"))
    page = await h["ListEvents"](
        call(make_snapshot()), pb.ListEventsRequest(event_types=["message.received"], limit=4)
    )
    assert [e.event_id for e in page.items] == ["m2", "m3", "m4", "m5"] and page.has_more
    rest = await h["ListEvents"](
        call(make_snapshot()),
        pb.ListEventsRequest(event_types=["message.received"], before_cursor=page.next_cursor),
    )
    assert [e.event_id for e in rest.items] == ["m0", "m1"] and not rest.has_more
    everything = await h["ListEvents"](call(make_snapshot()), pb.ListEventsRequest(limit=200))
    assert {e.event_type for e in everything.items} == {"message.received", "message.completed"}
    with pytest.raises(UnauthorizedError):
        await h["ListEvents"](call(make_snapshot(events=frozenset({"get"}))), pb.ListEventsRequest())
    # Proxy audit records are never shown to runners.
    await stores.events.record_proxy_call(
        run_id="run_1",
        runner_id="r",
        method="GetState",
        resource="state:x",
        outcome="ok",
        detail={"conversation_id": "c1"},
    )
    again = await h["ListEvents"](call(make_snapshot()), pb.ListEventsRequest(limit=200))
    assert len(again.items) == len(everything.items)


async def test_artifact_handlers(world: Any) -> None:
    stores, env = world
    h = env["h"]
    body = b"0123456789" * 10_000
    ref = await stores.artifacts.put_bytes(
        body, source="tool", conversation_id="c1", run_id="run_1", name="n.bin"
    )
    theirs = await stores.artifacts.put_bytes(b"x", source="tool", conversation_id="c2", run_id="run_x")
    old = await stores.artifacts.put_bytes(
        b"y", source="tool", conversation_id="c1", expires_at=utcnow() - dt.timedelta(seconds=1)
    )
    c = call(make_snapshot())
    meta = await h["GetArtifactMetadata"](c, pb.GetArtifactMetadataRequest(artifact_id=ref.artifact_id))
    assert (
        meta.artifact.ref.size_bytes == len(body)
        and meta.artifact.conversation_id == "c1"
        and meta.artifact.source == "tool"
    )
    assert c.audit["resource"] == f"artifact:{ref.artifact_id}"
    part = await h["ReadArtifact"](
        c, pb.ReadArtifactRequest(artifact_id=ref.artifact_id, offset=10, length=5)
    )
    assert part.data == b"01234" and part.has_more and part.size_bytes == len(body)
    default = await h["ReadArtifact"](c, pb.ReadArtifactRequest(artifact_id=ref.artifact_id))
    assert len(default.data) == 64 * 1024
    chunks = [
        m async for m in h["DownloadArtifact"](c, pb.DownloadArtifactRequest(artifact_id=ref.artifact_id))
    ]
    assert b"".join(m.data for m in chunks) == body and chunks[1].offset == 64 * 1024
    with pytest.raises(UnauthorizedError):
        await h["ReadArtifact"](c, pb.ReadArtifactRequest(artifact_id=theirs.artifact_id))
    with pytest.raises(NotFoundError, match="expired"):
        await h["GetArtifactMetadata"](c, pb.GetArtifactMetadataRequest(artifact_id=old.artifact_id))
    with pytest.raises(UnauthorizedError):
        await h["ReadArtifact"](
            call(make_snapshot(artifacts=frozenset({"metadata"}))),
            pb.ReadArtifactRequest(artifact_id=ref.artifact_id),
        )
    with pytest.raises(UnauthorizedError):
        _ = [
            m
            async for m in h["DownloadArtifact"](
                call(make_snapshot(artifacts=frozenset())),
                pb.DownloadArtifactRequest(artifact_id=ref.artifact_id),
            )
        ]


async def test_state_handlers(world: Any) -> None:
    _, env = world
    h = env["h"]
    c = call(make_snapshot())
    value = struct_pb2.Value()
    value.struct_value.update({"session": "abc", "turns": 3})
    await h["SetState"](
        c, pb.SetStateRequest(scope=common_pb2.STATE_SCOPE_CONVERSATION, key="external", value=value)
    )
    assert c.audit["resource"] == "state:conversation:external"
    got = await h["GetState"](
        c, pb.GetStateRequest(scope=common_pb2.STATE_SCOPE_CONVERSATION, key="external")
    )
    assert got.found and got.value.struct_value["session"] == "abc"
    listed = await h["ListState"](
        c, pb.ListStateRequest(scope=common_pb2.STATE_SCOPE_CONVERSATION, prefix="ext")
    )
    assert list(listed.keys) == ["external"]
    deleted = await h["DeleteState"](
        c, pb.DeleteStateRequest(scope=common_pb2.STATE_SCOPE_CONVERSATION, key="external")
    )
    assert deleted.deleted
    missing = await h["GetState"](
        c, pb.GetStateRequest(scope=common_pb2.STATE_SCOPE_CONVERSATION, key="external")
    )
    assert not missing.found
    narrow = call(make_snapshot(state_scopes=frozenset({"conversation"})))
    with pytest.raises(UnauthorizedError):
        await h["GetState"](narrow, pb.GetStateRequest(scope=common_pb2.STATE_SCOPE_WORKSPACE, key="k"))
    with pytest.raises(InvalidArgumentError):
        await h["GetState"](c, pb.GetStateRequest(scope=common_pb2.STATE_SCOPE_UNSPECIFIED, key="k"))
    big = struct_pb2.Value(string_value="x" * 70_000)
    with pytest.raises(PayloadTooLargeError):
        await h["SetState"](c, pb.SetStateRequest(scope=common_pb2.STATE_SCOPE_ACTOR, key="k", value=big))
    with pytest.raises(FailedPreconditionError):
        await h["GetState"](
            call(make_snapshot(actor_id="")), pb.GetStateRequest(scope=common_pb2.STATE_SCOPE_ACTOR, key="k")
        )


async def test_storage_handlers(world: Any) -> None:
    _, env = world
    h = env["h"]
    c = call(make_snapshot())
    area = pb.STORAGE_AREA_NAME_WORKSPACE
    await h["SetStorage"](c, pb.SetStorageRequest(area=area, key="ckpt/1", value=b"\x00\x01"))
    assert c.audit["resource"] == "storage:workspace:ckpt/1"
    got = await h["GetStorage"](c, pb.GetStorageRequest(area=area, key="ckpt/1"))
    assert got.found and got.value == b"\x00\x01"
    assert list((await h["ListStorage"](c, pb.ListStorageRequest(area=area, prefix="ckpt/"))).keys) == [
        "ckpt/1"
    ]
    assert (await h["DeleteStorage"](c, pb.DeleteStorageRequest(area=area, key="ckpt/1"))).deleted
    assert not (await h["GetStorage"](c, pb.GetStorageRequest(area=area, key="ckpt/1"))).found
    with pytest.raises(UnauthorizedError):
        await h["GetStorage"](
            call(make_snapshot(storage_areas=frozenset())), pb.GetStorageRequest(area=area, key="k")
        )
    with pytest.raises(InvalidArgumentError):
        await h["GetStorage"](c, pb.GetStorageRequest(key="k"))


async def test_prompt_and_steering(world: Any) -> None:
    stores, env = world
    h = env["h"]
    prompt = await h["GetPrompt"](call(make_snapshot()), pb.GetPromptRequest())
    assert [m.content for m in prompt.messages] == ["You are kind."]
    with pytest.raises(UnauthorizedError):
        await h["GetPrompt"](call(make_snapshot(prompt=False)), pb.GetPromptRequest())
    await stores.steering.enqueue(
        conversation_id="c1", item=pb.SteeringInput(input=context_pb2.RunInput(text="wait, in French"))
    )
    pulled = await h["PullSteering"](call(make_snapshot()), pb.PullSteeringRequest())
    assert [i.input.text for i in pulled.items] == ["wait, in French"]
    assert list((await h["PullSteering"](call(make_snapshot()), pb.PullSteeringRequest())).items) == []
    with pytest.raises(UnauthorizedError):
        await h["PullSteering"](call(make_snapshot(steering=False)), pb.PullSteeringRequest())


async def test_run_record_handlers(world: Any) -> None:
    _stores, env = world
    h = env["h"]
    c = call(make_snapshot())
    own = await h["GetRunRecord"](c, pb.GetRunRecordRequest())
    assert (
        own.run.run_id == "run_1" and own.run.conversation_id == "c1" and c.audit["resource"] == "run:run_1"
    )
    listed = await h["ListRunRecords"](call(make_snapshot()), pb.ListRunRecordsRequest(limit=1))
    assert [r.run_id for r in listed.runs] == ["run_0"] and listed.has_more
    more = await h["ListRunRecords"](
        call(make_snapshot()), pb.ListRunRecordsRequest(before_cursor=listed.next_cursor)
    )
    assert [r.run_id for r in more.runs] == ["run_1"] and not more.has_more
    events = await h["ListRunRecordEvents"](
        call(make_snapshot()), pb.ListRunRecordEventsRequest(run_id="run_0", after_sequence=4)
    )
    assert [r.sequence for r in events.results] == [5, 6]
    with pytest.raises(UnauthorizedError):
        await h["GetRunRecord"](call(make_snapshot()), pb.GetRunRecordRequest(run_id="run_x"))
    with pytest.raises(NotFoundError):
        await h["GetRunRecord"](call(make_snapshot()), pb.GetRunRecordRequest(run_id="run_missing"))
    cancelled = await h["CancelRunRecord"](
        call(make_snapshot()), pb.CancelRunRecordRequest(run_id="run_0", reason="enough")
    )
    assert cancelled.run.HasField("cancel_request_time") and env["cancelled"] == [("run_0", "enough")]
    # Append / finalize are refused unless granted.
    delta = result_pb2.RunResult(message_delta=result_pb2.MessageDelta(text="hi"))
    with pytest.raises(UnauthorizedError):
        await h["AppendRunResult"](call(make_snapshot()), pb.AppendRunResultRequest(result=delta))
    with pytest.raises(UnauthorizedError):
        await h["FinalizeRunRecord"](
            call(make_snapshot()), pb.FinalizeRunRecordRequest(status=common_pb2.RUN_STATUS_COMPLETED)
        )
    granted = call(make_snapshot(runs=frozenset({"get", "cancel", "append_result", "finalize"})))
    # an appended result joins the open run's stream: the run numbers it (a requested sequence is ignored)
    appended = await h["AppendRunResult"](granted, pb.AppendRunResultRequest(result=delta))
    assert appended.result.sequence == 1 and appended.result.run_id == "run_1"
    explicit = result_pb2.RunResult(sequence=40, message_delta=result_pb2.MessageDelta(text="hi"))
    second = await h["AppendRunResult"](granted, pb.AppendRunResultRequest(result=explicit))
    assert second.result.sequence == 2
    with pytest.raises(InvalidArgumentError):
        await h["AppendRunResult"](
            granted,
            pb.AppendRunResultRequest(result=result_pb2.RunResult(run_completed=result_pb2.RunCompleted())),
        )
    with pytest.raises(InvalidArgumentError):
        await h["FinalizeRunRecord"](
            granted, pb.FinalizeRunRecordRequest(status=common_pb2.RUN_STATUS_RUNNING)
        )
    # an open run's terminal is its stream's to decide
    with pytest.raises(FailedPreconditionError):
        await h["FinalizeRunRecord"](
            granted, pb.FinalizeRunRecordRequest(status=common_pb2.RUN_STATUS_COMPLETED, reason="done")
        )
    # a run still open but not here (another replica runs it): refused, never written behind its back
    env["open"].discard("run_1")
    for rpc, request in (
        ("AppendRunResult", pb.AppendRunResultRequest(result=delta)),
        ("CancelRunRecord", pb.CancelRunRecordRequest()),
        ("FinalizeRunRecord", pb.FinalizeRunRecordRequest(status=common_pb2.RUN_STATUS_COMPLETED)),
    ):
        with pytest.raises(FailedPreconditionError, match="not open on this host replica"):
            await h[rpc](granted, request)
    # an ended run: finalize answers its record as it is, append is refused
    await _stores.ledger.finish_run("run_1", common_pb2.RUN_STATUS_COMPLETED, "stop")
    final = await h["FinalizeRunRecord"](
        granted, pb.FinalizeRunRecordRequest(status=common_pb2.RUN_STATUS_FAILED, reason="late")
    )
    assert final.run.status == common_pb2.RUN_STATUS_COMPLETED and final.run.status_reason == "stop"
    with pytest.raises(FailedPreconditionError):
        await h["AppendRunResult"](granted, pb.AppendRunResultRequest(result=delta))


async def test_a_revoked_token_no_longer_authorizes_calls(stores: FactStores) -> None:
    """The servicer resolves the token through the registry; after unregister nothing is authorized."""
    snapshot = make_snapshot()
    await stores.sessions.register(
        RunSession("run_1", hash_token("tok"), snapshot.runner_id, utcnow() + dt.timedelta(hours=1), snapshot)
    )
    session = await stores.sessions.lookup("tok")
    assert session is not None
    h = fact_handlers(stores)
    await h["SetState"](  # type: ignore[misc]  # a unary handler
        ProxyCall(session=session, method="SetState"),
        pb.SetStateRequest(
            scope=common_pb2.STATE_SCOPE_RUNNER, key="k", value=struct_pb2.Value(bool_value=True)
        ),
    )
    await stores.sessions.unregister("run_1")
    assert await stores.sessions.lookup("tok") is None
