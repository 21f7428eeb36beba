"""End to end: host in process, runners as separate processes over real gRPC. One test per path of the
run service (issue item 6) and the host service (item 7)."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import common_pb2, host_service_pb2
from tests.helpers import next_message, rest_of
from tests.host.conftest import (
    FAKE_ID,
    HERE,
    FakeRunner,
    Host,
    host_config,
    results,
    run_request,
    start_process,
    stop_process,
    text_of,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def drain(call):
    out = await rest_of(call)
    return out


def terminals(updates):
    return [r for r in results(updates) if r.WhichOneof("payload") in ("run_completed", "run_failed")]


def assert_one_terminal(updates):
    assert updates[0].HasField("accepted")
    assert updates[-1].HasField("finished")
    assert sum(u.HasField("finished") for u in updates) == 1
    assert len(terminals(updates)) == 1
    seqs = [r.sequence for r in results(updates)]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_happy_path_streams_accepted_results_and_finished(host: Host) -> None:
    updates = await host.run("echo hello")
    assert_one_terminal(updates)
    accepted = updates[0].accepted
    assert (
        accepted.run_id.startswith("run_")
        and accepted.runner_id == FAKE_ID
        and accepted.binding_id == "default"
    )
    assert text_of(updates) == "echo: hello|echo: hello"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    run = (await host.stub.GetRun(host_service_pb2.GetRunRequest(run_id=accepted.run_id), timeout=5)).run
    assert run.status == common_pb2.RUN_STATUS_COMPLETED and run.last_sequence == 4
    assert "event_digest" not in run.metadata  # host-private ledger metadata never leaves the host
    # the token is dead once the run ended
    assert await host.app.stores.sessions.lookup("x") is None
    from sqlalchemy import select

    from agentrunner_host.store.schema import RunSessionRow

    async with host.app.db.read() as s:
        revoked = await s.scalar(select(RunSessionRow.revoked).where(RunSessionRow.run_id == accepted.run_id))
    assert revoked is True


async def test_context_is_event_first_and_projects_the_snapshot(host: Host) -> None:
    before = time.time()
    updates = await host.run("context")
    info = json.loads(results(updates)[0].message_completed.message.content)
    assert info["resources"] == ["gpt-test"]  # selected in runner config ∩ policy ∩ manifest
    assert info["tools"] == ["current_time"]  # registry offers current_time + fetch_url; policy cuts
    assert info["config"] == {"model": "gpt-test", "greeting": "hi"}  # schema default applied
    assert info["inline"] == 2  # INLINE_MODE_CURRENT_EVENT: no history inlined
    assert info["history_page"] and info["state"]
    assert info["protocol"] == "1"
    assert info["trace_id"] == updates[0].accepted.trace_id and len(info["trace_id"]) == 32
    assert before + 25 < info["deadline"] < before + 35  # agent timeout 30 s
    assert info["token_len"] >= 22  # ≥128 bits of url-safe base64
    assert info["endpoint"] == host.address


async def test_wrong_run_id_result_is_dropped(host: Host) -> None:
    updates = await host.run("wrong_run_id")
    assert_one_terminal(updates)
    assert text_of(updates) == "|mine"


async def test_duplicated_sequences_are_dropped(host: Host) -> None:
    updates = await host.run("dupseq")
    assert_one_terminal(updates)
    assert text_of(updates) == "abc"


async def test_unknown_result_type_is_ignored(host: Host) -> None:
    updates = await host.run("unknown")
    assert_one_terminal(updates)
    assert text_of(updates) == "|after unknown"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_oversized_result_is_dropped(host: Host) -> None:
    updates = await host.run("oversize")
    assert_one_terminal(updates)
    assert text_of(updates) == "|small"


async def test_garbage_fails_the_run_and_the_host_keeps_serving(host: Host) -> None:
    updates = await host.run("garbage")
    assert_one_terminal(updates)
    failed = terminals(updates)[0].run_failed
    assert failed.code == "runner.protocol_error"
    assert (await host.run("echo still-here"))[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_stream_without_terminal_becomes_no_terminal(host: Host) -> None:
    updates = await host.run("no_terminal")
    assert_one_terminal(updates)
    assert terminals(updates)[0].run_failed.code == "runner.no_terminal"
    assert updates[-1].finished.reason == "runner.no_terminal"


async def test_completion_without_message_is_a_controlled_failure(host: Host) -> None:
    updates = await host.run("empty")
    assert_one_terminal(updates)
    failed = terminals(updates)[0].run_failed
    assert failed.code == "runner.empty_output" and not failed.retryable
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_FAILED


async def test_results_after_terminal_are_dropped(host: Host) -> None:
    updates = await host.run("after_terminal")
    assert_one_terminal(updates)
    assert "late" not in text_of(updates)


async def test_runner_error_status_mid_stream_is_stream_broken_without_leaking_details(host: Host) -> None:
    updates = await host.run("abort")
    failed = terminals(updates)[0].run_failed
    assert failed.code == "runner.stream_broken"
    assert "Traceback" not in failed.message and "secret" not in failed.message


async def test_runner_run_failed_is_forwarded(host: Host) -> None:
    updates = await host.run("failed")
    assert_one_terminal(updates)
    assert terminals(updates)[0].run_failed.code == "runner.error"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_FAILED


async def test_state_updated_checked_against_granted_scopes(host: Host) -> None:
    granted = await host.run("state conversation")
    assert next(r.WhichOneof("payload") for r in results(granted)) == "state_updated"
    denied = await host.run("state workspace")  # not in manifest ∩ state policy
    assert "state_updated" not in [r.WhichOneof("payload") for r in results(denied)]
    assert text_of(denied) == "|stated"


async def test_action_requested_is_recorded_not_executed(host: Host) -> None:
    updates = await host.run("action")
    kinds = [r.WhichOneof("payload") for r in results(updates)]
    assert kinds[0] == "action_requested"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_unreachable_runner_is_a_retryable_failure(make_host, fake_runner: FakeRunner) -> None:
    config = host_config(fake_runner.address)
    config["runners"].append({"id": "dead", "address": "127.0.0.1:1"})
    config["agents"].append({"id": "ghost", "runner_id": "plugin:test/ghost/default"})
    host = await make_host(config)
    updates = await host.run("echo x", agent_id="ghost")
    assert_one_terminal(updates)
    failed = terminals(updates)[0].run_failed
    assert failed.code == "runner.unavailable" and failed.retryable
    # the dead endpoint did not take the live one down
    assert (await host.run("echo ok"))[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_runner_killed_mid_stream_is_stream_broken(make_host, tmp_path) -> None:
    runner = FakeRunner(tmp_path / "log")
    try:
        host = await make_host(host_config(runner.address))
        updates = await host.run("die")
        assert_one_terminal(updates)
        assert text_of(updates).startswith("dying")
        failed = terminals(updates)[0].run_failed
        assert failed.code == "runner.stream_broken" and failed.retryable
        assert runner.proc.wait(timeout=5) == -9
        # the registry drops the dead endpoint's runners ...
        await host.app.registry.refresh()
        assert host.app.registry.get(FAKE_ID) is None
    finally:
        runner.stop()


async def test_deadline_cancels_a_runner_that_never_answers(host: Host, fake_runner: FakeRunner) -> None:
    started = time.monotonic()
    updates = await host.run("hang", agent_id="short-agent")
    assert time.monotonic() - started < 5
    assert_one_terminal(updates)
    failed = terminals(updates)[0].run_failed
    assert failed.code == "deadline_exceeded" and failed.retryable
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_TIMEOUT
    run_id = updates[0].accepted.run_id
    await _wait_for_line(fake_runner, f"cancelled {run_id}", 2.0)


async def _wait_for_line(runner: FakeRunner, needle: str, within: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < within:
        if any(needle in line for line in runner.lines()):
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise AssertionError(f"{needle!r} not seen within {within}s: {runner.lines()[-5:]}")


async def test_client_cancel_cancels_the_runner_call_within_a_second(
    host: Host, fake_runner: FakeRunner
) -> None:
    call = host.stub.Run(run_request("stall"), timeout=30)
    accepted = await next_message(call)
    first = await next_message(call)
    assert first.result.message_delta.text == "working"
    run_id = accepted.accepted.run_id
    call.cancel()
    elapsed = await _wait_for_line(fake_runner, f"cancelled {run_id}", 1.0)
    assert elapsed < 1.0
    for _ in range(50):
        run = (await host.stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=5)).run
        if run.status == common_pb2.RUN_STATUS_CANCELLED:
            break
        await asyncio.sleep(0.02)
    assert run.status == common_pb2.RUN_STATUS_CANCELLED
    assert host.app.runs.open_runs == 0


async def test_cancel_run_goes_over_the_control_stream(host: Host) -> None:
    call = host.stub.Run(run_request("control"), timeout=30)
    accepted = (await next_message(call)).accepted
    welcome = await next_message(call)
    assert welcome.result.message_delta.text == "welcome:10000\n"
    cancel = await host.stub.CancelRun(
        host_service_pb2.CancelRunRequest(run_id=accepted.run_id, reason="user stop"), timeout=5
    )
    assert cancel.run.HasField("cancel_request_time")
    rest = await drain(call)
    texts = [u.result.message_delta.text for u in rest if u.result.HasField("message_delta")]
    assert "cancel:user stop\n" in texts
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    # the runner acknowledged the signal on the stream
    assert len([t for t in texts if t.startswith("cancel")]) == 1


async def test_cancel_run_cancels_the_call_after_the_grace_period(
    host: Host, fake_runner: FakeRunner
) -> None:
    call = host.stub.Run(run_request("stall"), timeout=30)
    run_id = (await next_message(call)).accepted.run_id
    await call.read()
    started = time.monotonic()
    await host.stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id), timeout=5)
    rest = await drain(call)
    assert 0.25 < time.monotonic() - started < 3  # grace is 0.3 s in the test config
    assert terminals(rest)[0].run_failed.code == "cancelled"
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    await _wait_for_line(fake_runner, f"cancelled {run_id}", 1.0)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await host.stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id), timeout=5)
    assert from_rpc_error(err.value).reason == "FAILED_PRECONDITION"


async def test_duplicate_event_attaches_to_the_first_run(host: Host) -> None:
    first = await host.run("echo once", event_id="evt-dup-1")
    second = await host.run("echo once", event_id="evt-dup-1")
    assert second[0].accepted.attached and second[0].accepted.run_id == first[0].accepted.run_id
    assert results(second) == results(first)
    assert second[-1].finished.status == first[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await host.run("echo different", event_id="evt-dup-1")
    assert from_rpc_error(err.value).reason == "ALREADY_EXISTS"


async def test_duplicate_event_while_running_follows_live(host: Host) -> None:
    call = host.stub.Run(run_request("slow 10", event_id="evt-dup-live"), timeout=30)
    accepted = (await next_message(call)).accepted
    await call.read()
    second = await host.run("slow 10", event_id="evt-dup-live")
    first = await drain(call)
    assert second[0].accepted.attached and second[0].accepted.run_id == accepted.run_id
    assert [r.sequence for r in results(second)] == list(range(1, 12))
    assert second[-1].finished.status == first[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_attach_run_replays_then_follows(host: Host) -> None:
    call = host.stub.Run(run_request("slow 8"), timeout=30)
    run_id = (await next_message(call)).accepted.run_id
    await call.read()
    await call.read()
    attached = [
        u
        async for u in host.stub.AttachRun(
            host_service_pb2.AttachRunRequest(run_id=run_id, after_sequence=1), timeout=10
        )
    ]
    await asyncio.gather(*[asyncio.sleep(0)])
    await drain(call)
    assert attached[0].accepted.run_id == run_id
    assert [r.result.sequence for r in attached if r.HasField("result")] == list(range(2, 10))
    assert attached[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_discard_binding_starts_no_run(host: Host) -> None:
    updates = await host.run("echo x", bot_id="muted-bot")
    assert updates[0].accepted.run_id == "" and updates[0].accepted.binding_id == "muted"
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_DISCARDED
    assert not results(updates)


async def test_no_binding_is_typed_not_found(host: Host) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await host.run("echo x", event_type="group.member_joined")
    typed = from_rpc_error(err.value)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and typed.reason == "BINDING_NOT_FOUND"


async def test_get_unknown_run_is_not_found(host: Host) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await host.stub.GetRun(host_service_pb2.GetRunRequest(run_id="run_nope"), timeout=5)
    assert from_rpc_error(err.value).reason == "NOT_FOUND"


async def test_list_runners_serves_valid_manifests_only(host: Host) -> None:
    listed = await host.stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=5)
    ids = [r.manifest.id for r in listed.runners]
    assert ids == [FAKE_ID]  # plugin:test/fake/future speaks protocol 2 and is refused
    assert listed.runners[0].available and listed.runners[0].endpoint_id == "fake"


async def test_trace_context_flows_client_to_host_to_runner(host: Host, fake_runner: FakeRunner) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    md = (("traceparent", f"00-{trace_id}-b7ad6b7169203331-01"),)
    updates = [u async for u in host.stub.Run(run_request("echo traced"), metadata=md, timeout=10)]
    assert updates[0].accepted.trace_id == trace_id
    run_id = updates[0].accepted.run_id
    line = next(line for line in fake_runner.lines() if f"started {run_id}" in line)
    assert f"traceparent=00-{trace_id}-" in line


async def test_endpoint_coming_back_is_picked_up(make_host, tmp_path) -> None:
    runner = FakeRunner(tmp_path / "log")
    port = runner.address.rsplit(":", 1)[1]
    host = await make_host(host_config(runner.address))
    try:
        assert host.app.registry.get(FAKE_ID) is not None
        runner.stop()
        await host.app.registry.refresh()
        assert host.app.registry.get(FAKE_ID) is None
        proc, _ = start_process([sys.executable, str(HERE / "fake_runner.py"), port])
        try:
            for _ in range(100):  # retry interval is 0.3 s in the test config
                if host.app.registry.get(FAKE_ID) is not None:
                    break
                await asyncio.sleep(0.05)
            assert host.app.registry.get(FAKE_ID) is not None
            assert (await host.run("echo back"))[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
        finally:
            stop_process(proc)
    finally:
        runner.stop()


async def test_concurrent_runs_share_delta_writes_and_every_delta_is_stored(host: Host) -> None:
    # deltas of concurrent runs are committed in shared (host-wide) batches; after each run ends, a
    # replay from the store has every one of its deltas, in order, before its terminal result
    runs = await asyncio.gather(*(host.run("slow 30") for _ in range(4)))
    for updates in runs:
        run_id = updates[0].accepted.run_id
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
        replay = [
            u
            async for u in host.stub.AttachRun(
                host_service_pb2.AttachRunRequest(run_id=run_id, after_sequence=0), timeout=10
            )
        ]
        stored = [u.result for u in replay if u.HasField("result")]
        assert [r.sequence for r in stored] == list(range(1, 32))
        assert "".join(r.message_delta.text for r in stored[:-1]) == "".join(f"{i} " for i in range(1, 31))
        assert stored[-1].HasField("run_completed")


async def test_attach_while_a_delta_batch_is_being_written_misses_nothing(host: Host) -> None:
    """Deltas reach the client before they are committed, in host-wide batches. A caller attaching
    while a batch is being written gets those deltas too (they are neither in the store yet nor pending
    any more): the replay is gap-free and in order."""
    stores = host.app.stores
    real = stores.record_deltas
    writing = asyncio.Event()
    release = asyncio.Event()

    async def held(batches: object) -> None:
        writing.set()
        await release.wait()  # the batch stays in flight while the caller attaches
        await real(batches)  # type: ignore[arg-type]

    stores.record_deltas = held  # type: ignore[method-assign]
    try:
        call = host.stub.Run(run_request("slow 20"), timeout=30)
        run_id = (await next_message(call)).accepted.run_id
        await asyncio.wait_for(writing.wait(), 5)  # the batch timer took the first deltas
        attach = host.stub.AttachRun(
            host_service_pb2.AttachRunRequest(run_id=run_id, after_sequence=0), timeout=10
        )
        first = await next_message(attach)
        assert first.accepted.run_id == run_id
        second = await next_message(attach)  # the follower has read the store and subscribed
        release.set()
        attached = [first, second, *await rest_of(attach)]
        await drain(call)
    finally:
        release.set()
        stores.record_deltas = real  # type: ignore[method-assign]
    assert [u.result.sequence for u in attached if u.HasField("result")] == list(range(1, 22))
    assert attached[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
