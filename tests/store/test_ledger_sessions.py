"""Run ledger and database-backed run sessions."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from agentrunner.errors import AlreadyExistsError
from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, result_pb2
from agentrunner_host.ports import RunRecord, RunSession, hash_token, utcnow
from agentrunner_host.run import outcomes
from agentrunner_host.store.db import Database
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings
from tests.store.conftest import add_run, make_snapshot

pytestmark = pytest.mark.asyncio


def _record(
    run_id: str,
    event_id: str,
    conversation: str = "c1",
    status: common_pb2.RunStatus.ValueType = common_pb2.RUN_STATUS_CREATED,
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        event_id=event_id,
        agent_id="agent_1",
        binding_id="bind_1",
        runner_id="plugin:acme/agent/default",
        conversation_id=conversation,
        deadline_at=utcnow() + dt.timedelta(minutes=5),
        status=status,
        started_at=utcnow() if status == common_pb2.RUN_STATUS_RUNNING else None,
    )


def _event(event_id: str, conversation: str = "c1") -> host_service_pb2.EventEnvelope:
    return host_service_pb2.EventEnvelope(
        event_id=event_id,
        event_type="message.received",
        conversation=context_pb2.ConversationContext(conversation_id=conversation),
        input=host_service_pb2.EventInput(text="hi"),
    )


async def _interrupt(stores: FactStores) -> int:
    """Crash recovery as the host's start runs it (`server/app.py`): the failure table's `host.restarted`."""
    ending = outcomes.failed("", "host.restarted")
    return await stores.mark_interrupted(ending, outcomes.status_of(ending)[0])


def _delta(seq: int, text: str = "x") -> result_pb2.RunResult:
    return result_pb2.RunResult(sequence=seq, message_delta=result_pb2.MessageDelta(text=text))


async def test_duplicate_event_attaches_to_the_existing_run_even_when_racing(stores: FactStores) -> None:
    started = await asyncio.gather(
        *(stores.start_run(_record(f"run_{i}", "evt_same"), _event("evt_same")) for i in range(12))
    )
    created = [s.record for s in started]
    assert len({r.run_id for r in created}) == 1
    winner = created[0].run_id
    stored = await stores.ledger.get_run(winner)
    assert stored is not None and stored.status == common_pb2.RUN_STATUS_CREATED
    assert stored.deadline_at is not None and stored.deadline_at.tzinfo is not None
    assert await stores.ledger.count_runs("c1") == 1


async def test_delta_batches_read_back_one_result_at_a_time_from_any_point(stores: FactStores) -> None:
    """Consecutive deltas share a ledger row (`packed_rows`); every read still sees single results in
    order, from any sequence (also one inside a packed row), and a result appended with a sequence a
    packed row already holds is refused."""
    ledger = stores.ledger
    await add_run(stores, _record("run_p", "evt_p"))
    await stores.record_deltas([("run_p", [_delta(s, f"d{s}") for s in range(1, 5)])])
    await stores.record_deltas([("run_p", [_delta(5, "d5")])])  # a lone delta: a plain row
    done = result_pb2.RunResult(sequence=6)
    done.run_completed.finish_reason = "stop"
    await stores.record_results(make_snapshot(run_id="run_p"), [done])
    await stores.record_deltas([("run_p", [_delta(7, "d7"), _delta(8, "d8")])])

    everything = await ledger.list_results("run_p")
    assert [r.sequence for r in everything] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [r.message_delta.text for r in everything if r.HasField("message_delta")] == [
        f"d{s}" for s in (1, 2, 3, 4, 5, 7, 8)
    ]
    assert [r.sequence for r in await ledger.list_results("run_p", after_sequence=2)] == [3, 4, 5, 6, 7, 8]
    assert [r.sequence for r in await ledger.list_results("run_p", after_sequence=2, limit=1)] == [3]
    assert [r.sequence for r in await ledger.list_results("run_p", after_sequence=6, limit=5)] == [7, 8]
    for held in (2, 4, 8):
        with pytest.raises(AlreadyExistsError):
            await stores.record_deltas([("run_p", [_delta(held, "again")])])
    run = await ledger.get_run("run_p")
    assert run is not None and run.last_sequence == 8


async def test_a_delta_batch_of_several_runs_is_stored_whole_or_not_at_all(stores: FactStores) -> None:
    """The host-wide delta batch (one statement on PostgreSQL): every run's deltas and last sequence,
    or, when one run's batch does not follow its stored results, nothing of any run in it."""
    ledger = stores.ledger
    for run in ("run_a", "run_b", "run_c"):
        await add_run(stores, _record(run, f"evt_{run}", status=common_pb2.RUN_STATUS_RUNNING))
    await stores.record_deltas([("run_a", [_delta(1, "a1"), _delta(2, "a2")]), ("run_b", [_delta(1, "b1")])])
    with pytest.raises(AlreadyExistsError) as clash:
        await stores.record_deltas(
            [("run_a", [_delta(3, "a3")]), ("run_b", [_delta(1, "again")]), ("run_c", [_delta(1, "c1")])]
        )
    assert clash.value.metadata["runId"] == "run_b"
    assert [r.message_delta.text for r in await ledger.list_results("run_a")] == ["a1", "a2"]
    assert [r.message_delta.text for r in await ledger.list_results("run_b")] == ["b1"]
    assert await ledger.list_results("run_c") == []
    await stores.record_deltas([("run_a", [_delta(3, "a3")]), ("run_c", [_delta(1, "c1"), _delta(2, "c2")])])
    assert [r.sequence for r in await ledger.list_results("run_a")] == [1, 2, 3]
    assert [r.message_delta.text for r in await ledger.list_results("run_c")] == ["c1", "c2"]
    runs = {run: await ledger.get_run(run) for run in ("run_a", "run_b", "run_c")}
    assert {run: r.last_sequence for run, r in runs.items() if r is not None} == {
        "run_a": 3,
        "run_b": 1,
        "run_c": 2,
    }


async def test_results_are_unique_and_ordered_and_finish_is_set_once(stores: FactStores) -> None:
    ledger = stores.ledger
    await add_run(stores, _record("run_1", "evt_1", status=common_pb2.RUN_STATUS_RUNNING))
    await stores.record_deltas([("run_1", [_delta(1, "t1")])])
    await stores.record_deltas([("run_1", [_delta(3, "t3"), _delta(2, "t2")])])  # stored out of order
    with pytest.raises(AlreadyExistsError):
        await stores.record_deltas([("run_1", [_delta(2, "again")])])
    results = await ledger.list_results("run_1")
    assert [r.sequence for r in results] == [1, 2, 3]
    assert results[1].message_delta.text == "t2"
    assert [r.sequence for r in await ledger.list_results("run_1", after_sequence=1, limit=1)] == [2]
    run = await ledger.get_run("run_1")
    assert run is not None and run.status == common_pb2.RUN_STATUS_RUNNING and run.last_sequence == 3

    cancelled = await ledger.request_cancel("run_1", utcnow())
    assert cancelled is not None and cancelled.cancel_requested_at is not None
    done = await ledger.finish_run("run_1", common_pb2.RUN_STATUS_COMPLETED, "stop", {"total_tokens": 7})
    assert (
        done is not None
        and done.status == common_pb2.RUN_STATUS_COMPLETED
        and done.usage == {"total_tokens": 7}
    )
    again = await ledger.finish_run("run_1", common_pb2.RUN_STATUS_FAILED, "late")
    assert (
        again is not None
        and again.status == common_pb2.RUN_STATUS_COMPLETED
        and again.status_reason == "stop"
    )


async def test_list_runs_pages_newest_first_with_opaque_cursor(stores: FactStores) -> None:
    for i in range(5):
        await add_run(stores, _record(f"run_{i}", f"evt_{i}"))
    await add_run(stores, _record("run_other", "evt_other", conversation="c2"))
    await stores.ledger.finish_run("run_1", common_pb2.RUN_STATUS_FAILED, "boom")
    page, cursor = await stores.ledger.list_runs("c1", limit=3)
    assert [r.run_id for r in page] == ["run_4", "run_3", "run_2"] and cursor
    page2, cursor2 = await stores.ledger.list_runs("c1", before_cursor=cursor, limit=3)
    assert [r.run_id for r in page2] == ["run_1", "run_0"] and cursor2 == ""
    failed, _ = await stores.ledger.list_runs("c1", statuses=[common_pb2.RUN_STATUS_FAILED])
    assert [r.run_id for r in failed] == ["run_1"]


async def test_crash_recovery_marks_open_runs_interrupted_and_revokes_their_tokens(
    db_url: str, settings: FactStoreSettings
) -> None:
    db = Database(db_url)
    try:
        first = await FactStores.open(db, settings)
        await add_run(first, _record("run_open", "evt_a"))
        await add_run(first, _record("run_running", "evt_b", status=common_pb2.RUN_STATUS_RUNNING))
        await add_run(first, _record("run_done", "evt_c"))
        await first.ledger.finish_run("run_done", common_pb2.RUN_STATUS_COMPLETED, "stop")
        await first.sessions.register(
            RunSession(
                "run_running",
                hash_token("tok"),
                "plugin:acme/agent/default",
                utcnow() + dt.timedelta(hours=1),
                make_snapshot(run_id="run_running"),
            )
        )
        # Another replica's open run must survive this replica's restart.
        other = await FactStores.open(
            db, FactStoreSettings(artifact_dir=settings.artifact_dir, owner="host-b")
        )
        await add_run(other, _record("run_elsewhere", "evt_d"))

        restarted = await FactStores.open(db, settings)  # "the host process restarts"
        assert await _interrupt(restarted) == 2
        for run_id in ("run_open", "run_running"):
            run = await restarted.ledger.get_run(run_id)
            assert run is not None and run.status == common_pb2.RUN_STATUS_INTERRUPTED
            assert run.finished_at is not None
            assert run.status_reason == "host.restarted: the host stopped while the run was open"
            # the terminal result a follower's replay ends with (the failure table's row)
            (terminal,) = await restarted.ledger.list_results(run_id)
            assert (terminal.sequence, terminal.run_failed.code, terminal.run_failed.retryable) == (
                1,
                "host.restarted",
                True,
            )
            assert run.last_sequence == 1
        done = await restarted.ledger.get_run("run_done")
        assert done is not None and done.status == common_pb2.RUN_STATUS_COMPLETED
        elsewhere = await restarted.ledger.get_run("run_elsewhere")
        assert elsewhere is not None and elsewhere.status == common_pb2.RUN_STATUS_CREATED
        assert await restarted.sessions.lookup("tok") is None
        assert await _interrupt(restarted) == 0
    finally:
        await db.dispose()


async def test_sessions_register_lookup_expire_and_revoke(stores: FactStores) -> None:
    snapshot = make_snapshot(cross_conversation=True, deadline_at=utcnow() + dt.timedelta(minutes=1))
    session = RunSession(
        "run_1", hash_token("secret-token"), snapshot.runner_id, utcnow() + dt.timedelta(hours=1), snapshot
    )
    await stores.sessions.register(session)
    found = await stores.sessions.lookup("secret-token")
    assert found is not None and found.run_id == "run_1" and found.snapshot == snapshot
    assert await stores.sessions.lookup("wrong-token") is None
    assert await stores.sessions.lookup("") is None
    await stores.sessions.register(
        RunSession(
            "run_2", hash_token("old"), snapshot.runner_id, utcnow() - dt.timedelta(seconds=1), snapshot
        )
    )
    assert await stores.sessions.lookup("old") is None  # expired
    await stores.sessions.unregister("run_1")
    await stores.sessions.unregister("run_1")  # idempotent
    assert await stores.sessions.lookup("secret-token") is None


async def test_two_registries_on_one_database_see_each_others_sessions(
    db_url: str, settings: FactStoreSettings
) -> None:
    a_db, b_db = Database(db_url), Database(db_url)
    try:
        a = await FactStores.open(a_db, settings)
        b = await FactStores.open(b_db, FactStoreSettings(artifact_dir=settings.artifact_dir, owner="host-b"))
        snapshot = make_snapshot(run_id="run_a")
        await a.sessions.register(
            RunSession(
                "run_a", hash_token("tok-a"), snapshot.runner_id, utcnow() + dt.timedelta(hours=1), snapshot
            )
        )
        seen = await b.sessions.lookup("tok-a")
        assert seen is not None and seen.snapshot.conversation_id == "c1"
        await b.sessions.unregister("run_a")
        assert await a.sessions.lookup("tok-a") is None
        # Cursors minted by one replica verify on the other (the key lives in the database).
        await a.transcript.append(conversation_id="c1", role="user", content="hi")
        token = a.transcript.cursor("c1", 1)
        assert b.transcript.decode_cursor("c1", token, "before_cursor") == 1
    finally:
        await a_db.dispose()
        await b_db.dispose()


async def test_model_usage_sums_every_reported_count_per_model(stores: FactStores) -> None:
    await add_run(stores, _record("run_u", "evt_u"))
    usage = common_pb2.Usage(prompt_tokens=20, completion_tokens=9, total_tokens=29)
    usage.extra.update(
        {"prompt_tokens_details": {"cached_tokens": 16}, "completion_tokens_details": {"reasoning_tokens": 7}}
    )
    for _ in range(2):
        await stores.record_model_usage("run_u", "chat", usage, 1)
    run = await stores.ledger.get_run("run_u")
    assert run is not None
    assert run.metadata["model_usage"]["chat"] == {
        "prompt_tokens": 40,
        "completion_tokens": 18,
        "total_tokens": 58,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 14},
        "calls": 2,
    }
