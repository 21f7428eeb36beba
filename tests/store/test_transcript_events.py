"""Event log and transcript projection: what gets written, concurrency, paging, search."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Iterator

import pytest
from google.protobuf import struct_pb2
from sqlalchemy import insert, text

from agentrunner.errors import AlreadyExistsError, InvalidArgumentError, UnauthorizedError
from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, result_pb2
from agentrunner_host.ports import RunRecord
from agentrunner_host.store.fact_stores import FactStores
from agentrunner_host.store.schema import ConversationRow, TranscriptRow
from tests.store.conftest import add_run, make_snapshot

pytestmark = pytest.mark.asyncio


def envelope(
    event_id: str,
    text: str = "",
    event_type: str = "message.received",
    conversation: str = "c1",
    **kw: object,
) -> host_service_pb2.EventEnvelope:
    env = host_service_pb2.EventEnvelope(
        event_id=event_id,
        event_type=event_type,
        source="platform",
        conversation=context_pb2.ConversationContext(conversation_id=conversation),
        actor=context_pb2.ActorContext(actor_type="user", actor_id="user_1", actor_name="Ann"),
        input=host_service_pb2.EventInput(text=text),
        **kw,  # type: ignore[arg-type]
    )
    env.event_time.GetCurrentTime()
    return env


async def _run(stores: FactStores, run_id: str = "run_1", event_id: str = "evt_1") -> None:
    await add_run(
        stores,
        RunRecord(
            run_id=run_id,
            event_id=event_id,
            agent_id="a",
            binding_id="bind_1",
            runner_id="plugin:acme/agent/default",
            conversation_id="c1",
        ),
    )


async def test_message_received_writes_a_user_item_other_events_do_not(stores: FactStores) -> None:
    first = await stores.record_event(envelope("evt_1", "hello there"), run_id="run_1")
    assert first.created and first.transcript_seq == 1 and not first.has_history_before
    data = struct_pb2.Struct()
    data.update({"member": "bob"})
    joined = await stores.record_event(envelope("evt_2", "", event_type="group.member_joined", data=data))
    assert joined.transcript_seq is None and joined.event_seq is not None
    second = await stores.record_event(envelope("evt_3", "again"))
    assert second.transcript_seq == 2 and second.has_history_before

    rows, has_more, total = await stores.transcript.page(conversation_id="c1", limit=10, with_count=True)
    assert [(r.role, r.content) for r in rows] == [("user", "hello there"), ("user", "again")]
    assert not has_more and total == 2

    events, _ = await stores.events.page(conversation_id="c1")
    assert [e.event_type for e in events] == ["message.received", "group.member_joined", "message.received"]
    assert events[1].data == {"member": "bob"} and events[0].actor["actor_id"] == "user_1"

    # A duplicate delivery writes nothing and reports the original.
    dup = await stores.record_event(envelope("evt_1", "hello there"))
    assert not dup.created and dup.transcript_seq == 1
    assert (await stores.transcript.latest_seq("c1")) == 2
    assert len((await stores.events.page(conversation_id="c1"))[0]) == 3


async def test_results_project_assistant_messages_artifacts_state_and_telemetry(stores: FactStores) -> None:
    await _run(stores)
    snap = make_snapshot()
    await stores.record_event(envelope("evt_1", "draw a cat"), run_id="run_1")
    ref = common_pb2.ArtifactRef(name="cat.png", mime_type="image/png")
    results = [
        result_pb2.RunResult(sequence=1, message_delta=result_pb2.MessageDelta(text="Here")),
        result_pb2.RunResult(
            sequence=2, tool_call_started=result_pb2.ToolCallStarted(tool_call_id="t1", tool_name="draw")
        ),
        result_pb2.RunResult(
            sequence=3, tool_call_completed=result_pb2.ToolCallCompleted(tool_call_id="t1", tool_name="draw")
        ),
        result_pb2.RunResult(
            sequence=4, artifact_created=result_pb2.ArtifactCreated(artifact=ref, content=b"PNG..")
        ),
        result_pb2.RunResult(
            sequence=5,
            state_updated=result_pb2.StateUpdated(
                scope=common_pb2.STATE_SCOPE_CONVERSATION,
                key="external.session_id",
                value=struct_pb2.Value(string_value="abc"),
            ),
        ),
        result_pb2.RunResult(
            sequence=6,
            action_requested=result_pb2.ActionRequested(action="message.edit", idempotency_key="k"),
        ),
        result_pb2.RunResult(
            sequence=7,
            message_completed=result_pb2.MessageCompleted(
                message=common_pb2.AssistantMessage(content="Here is a cat", artifacts=[ref])
            ),
        ),
        result_pb2.RunResult(
            sequence=8,
            run_completed=result_pb2.RunCompleted(
                finish_reason="stop", message=common_pb2.AssistantMessage(content="Here is a cat")
            ),
        ),
    ]
    for r in results:
        await stores.record_results(snap, [r])
    with pytest.raises(AlreadyExistsError):  # duplicate sequence: nothing applied
        await stores.record_results(snap, [results[6]])

    rows, _, _ = await stores.transcript.page(conversation_id="c1")
    assert [(r.role, r.content) for r in rows] == [("user", "draw a cat"), ("assistant", "Here is a cat")]
    assert rows[1].artifacts[0]["name"] == "cat.png" and rows[1].run_id == "run_1"
    assert await stores.state.get(snap, "conversation", "external.session_id") == (True, "abc")
    events, _ = await stores.events.page(conversation_id="c1", limit=50)
    kinds = [(e.kind, e.event_type) for e in events]
    assert ("tool", "tool.call.started") in kinds and ("action", "action.requested") in kinds
    assert ("result", "message.delta") not in kinds
    assert [r.sequence for r in await stores.ledger.list_results("run_1")] == list(range(1, 9))
    arts, _ = await stores.events.page(conversation_id="c1", event_types=["artifact.created"])
    assert arts[0].data["name"] == "cat.png"


async def test_a_refused_result_leaves_nothing_written(stores: FactStores) -> None:
    await _run(stores)
    snap = make_snapshot(state_scopes=frozenset({"conversation"}))
    bad = result_pb2.RunResult(
        sequence=1,
        state_updated=result_pb2.StateUpdated(
            scope=common_pb2.STATE_SCOPE_WORKSPACE, key="k", value=struct_pb2.Value(number_value=1)
        ),
    )
    with pytest.raises(UnauthorizedError):
        await stores.record_results(snap, [bad])
    assert await stores.ledger.list_results("run_1") == []
    assert (await stores.events.page(conversation_id="c1"))[0] == []


async def test_200_concurrent_writers_lose_and_duplicate_nothing(stores: FactStores) -> None:
    async def writer(i: int) -> int:
        row = await stores.transcript.append(conversation_id="busy", role="user", content=f"m{i}")
        return row.seq

    seqs = await asyncio.gather(*(writer(i) for i in range(200)))
    assert sorted(seqs) == list(range(1, 201))
    rows, has_more, total = await stores.transcript.page(conversation_id="busy", limit=200, with_count=True)
    assert total == 200 and not has_more
    assert sorted(r.content for r in rows) == sorted(f"m{i}" for i in range(200))
    assert [r.seq for r in rows] == list(range(1, 201))


async def test_backward_paging_stays_correct_while_items_are_appended(stores: FactStores) -> None:
    for i in range(30):
        await stores.transcript.append(conversation_id="c1", role="user", content=f"old{i}")
    before: int | None = None
    seen: list[str] = []
    counter = 0
    while True:
        rows, has_more, _ = await stores.transcript.page(conversation_id="c1", before_seq=before, limit=7)
        if before is None:
            first_newest = rows[-1].seq
        seen = [r.content for r in rows] + seen
        for _ in range(3):  # new messages arrive between pages
            await stores.transcript.append(conversation_id="c1", role="assistant", content=f"new{counter}")
            counter += 1
        if not has_more:
            break
        before = rows[0].seq
    assert first_newest == 30
    assert seen == [f"old{i}" for i in range(30)]
    # Forward paging from the last seen item returns exactly the appended ones.
    after = 30
    newer: list[str] = []
    while True:
        rows, has_more, _ = await stores.transcript.page(
            conversation_id="c1", after_seq=after, forward=True, limit=4
        )
        newer += [r.content for r in rows]
        if not rows:
            break
        after = rows[-1].seq
    assert newer == [f"new{i}" for i in range(counter)]


async def test_history_pages_on_postgresql_are_not_planned_on_every_call(stores: FactStores) -> None:
    """The page select is prepared by psycopg after a few runs; with its LIMIT a parameter PostgreSQL
    would plan it again on every run (a custom plan each time), with the LIMIT written in it uses the
    generic plan."""
    if stores.db.is_sqlite:
        pytest.skip("PostgreSQL's plan cache")
    now = dt.datetime.now(dt.UTC)
    items = [
        {"transcript_id": f"tr_{i}", "conversation_id": "c1", "seq": i, "role": "user", "content": f"m{i}"}
        for i in range(1, 3001)
    ]
    async with stores.db.write() as s:  # a long conversation (in a short one either plan is as cheap)
        await s.execute(insert(ConversationRow).values(conversation_id="c1", last_seq=3000, created_at=now))
        await s.execute(insert(TranscriptRow), [{**item, "created_at": now} for item in items])
    async with stores.db.engine.connect() as conn:
        await conn.exec_driver_sql("ANALYZE transcript_items")
        await conn.commit()
    for _ in range(40):  # the hot-read pool hands its connections out in turn
        rows, has_more, _ = await stores.transcript.page(conversation_id="c1", before_seq=1500, limit=10)
        assert [r.seq for r in rows] == list(range(1490, 1500)) and has_more
    plans: list[tuple[int, int]] = []
    for _ in range(4):  # (pg_prepared_statements is per connection)
        plans += await stores.db.driver_rows(
            text("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE :p"),
            {"p": "%FROM transcript_items%"},
        )
    assert plans, "the page select was never prepared"
    assert max(generic for generic, _ in plans) > 0
    assert all(custom <= 5 for _, custom in plans), plans  # PostgreSQL's first five runs are custom


async def test_full_text_search_finds_messages_in_this_conversation_only(stores: FactStores) -> None:
    await stores.transcript.append(
        conversation_id="c1", role="user", content="my database password is hunter2"
    )
    await stores.transcript.append(
        conversation_id="c1", role="assistant", content="noted the database details"
    )
    await stores.transcript.append(conversation_id="c1", role="user", content="what is the weather")
    await stores.transcript.append(conversation_id="c2", role="user", content="other database chat")
    hits = await stores.transcript.search(conversation_id="c1", query="database")
    assert {h.content for h in hits} == {"my database password is hunter2", "noted the database details"}
    users = await stores.transcript.search(conversation_id="c1", query="database", roles=["user"])
    assert [h.content for h in users] == ["my database password is hunter2"]
    assert await stores.transcript.search(conversation_id="c1", query='password" * (') != []
    assert await stores.transcript.search(conversation_id="c1", query="nothingmatches") == []


async def test_search_index_stays_whole_across_batched_indexing_and_deletes(stores: FactStores) -> None:
    """SQLite indexes transcript rows in batches (`index_pending`, also run before every search). Rows
    deleted before or after they were indexed, and a new row that reuses a deleted row's id, leave the
    index consistent: FTS5's integrity check passes and search returns exactly the rows that exist."""
    if not stores.db.is_sqlite:
        pytest.skip("PostgreSQL searches an expression index, nothing is batched")
    transcript = stores.transcript
    for word in ("alpha", "bravo", "charlie"):
        await transcript.append(conversation_id="c1", role="user", content=f"{word} kilo")
    assert await transcript.index_pending() is True
    assert await transcript.index_pending() is False  # nothing left
    await transcript.append(conversation_id="c1", role="user", content="delta kilo")  # not indexed yet

    async def execute(sql: str) -> None:
        async with stores.db.engine.begin() as conn:
            await conn.exec_driver_sql(sql)

    await execute("DELETE FROM transcript_items WHERE content = 'delta kilo'")  # pending: no index entry
    await execute("DELETE FROM transcript_items WHERE content = 'charlie kilo'")  # the highest indexed row
    await transcript.append(conversation_id="c1", role="user", content="echo kilo")  # may reuse its id
    hits = await transcript.search(conversation_id="c1", query="kilo")
    assert sorted(h.content for h in hits) == ["alpha kilo", "bravo kilo", "echo kilo"]
    assert [h.content for h in await transcript.search(conversation_id="c1", query="echo")] == ["echo kilo"]
    assert await transcript.search(conversation_id="c1", query="charlie") == []
    await execute("INSERT INTO transcript_fts(transcript_fts, rank) VALUES ('integrity-check', 1)")


async def test_cursors_are_tamper_evident_and_bound_to_their_conversation(stores: FactStores) -> None:
    token = stores.transcript.cursor("c1", 5)
    assert stores.transcript.decode_cursor("c1", token, "before_cursor") == 5
    with pytest.raises(InvalidArgumentError):
        stores.transcript.decode_cursor("c2", token, "before_cursor")
    _body, mac = token.split(".")
    forged = stores.transcript.cursor("c1", 6).split(".")[0] + "." + mac
    with pytest.raises(InvalidArgumentError):
        stores.transcript.decode_cursor("c1", forged, "before_cursor")
    with pytest.raises(InvalidArgumentError):
        stores.transcript.decode_cursor("c1", "garbage", "before_cursor")
    with pytest.raises(InvalidArgumentError):  # an events cursor is not a history cursor
        stores.codec.decode(stores.codec.encode("event", "c1", 5), kind="history", scope="c1", field="x")
    _ = dt


@pytest.fixture
def non_utc_local_zone() -> Iterator[None]:
    """A local zone nine hours off UTC, so a naive UTC time read as local time shows."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.usefixtures("non_utc_local_zone")
async def test_page_items_carry_every_stored_field_on_both_backends(stores: FactStores) -> None:
    """The page read (straight from the driver on PostgreSQL) converts like the ORM does: aware UTC
    times (checked in a non-UTC local zone), JSON contents / artifacts / metadata, empty ones included."""
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    image = common_pb2.ContentElement(image=common_pb2.ImageContent(uri="https://example.test/a.png"))
    ref = common_pb2.ArtifactRef(artifact_id="art_1", name="a.png", mime_type="image/png")
    await stores.transcript.append(
        conversation_id="fields",
        role="user",
        content="look",
        contents=[image],
        artifacts=[ref],
        metadata={"actor_id": "u1", "n": 2},
        event_id="evt_fields",
    )
    await stores.transcript.append(conversation_id="fields", role="assistant", content="nice")
    rows, has_more, total = await stores.transcript.page(conversation_id="fields", with_count=True)
    assert (has_more, total) == (False, 2)
    first, second = (stores.transcript.to_proto(r) for r in rows)
    assert (first.role, first.content, first.event_id, first.seq) == ("user", "look", "evt_fields", 1)
    assert list(first.contents) == [image] and list(first.artifacts) == [ref]
    assert dict(first.metadata) == {"actor_id": "u1", "n": 2}
    created = first.create_time.ToDatetime(dt.UTC)
    assert before <= created <= dt.datetime.now(dt.UTC)  # UTC, not shifted by a local zone
    assert (second.content, list(second.contents), list(second.artifacts), dict(second.metadata)) == (
        "nice",
        [],
        [],
        {},
    )
