"""Item 1 of issue 36: every operation on a run behaves the same whichever replica the client or the
runner reaches. Replica `a` runs the runs; clients call `c`; the runner's proxy calls and control
stream reach `b` (replica `a` advertises `b`'s address), so each operation crosses two replicas."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import grpc
import pytest

from agentrunner.client import host_service_channel
from agentrunner.errors import from_rpc_error
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import (
    common_pb2,
    host_service_pb2,
    host_service_pb2_grpc,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
)
from tests.fleet.support import Fleet, db_check, next_item, read_rest, run_request, runner_run, sequences

pytestmark = pytest.mark.asyncio(loop_scope="module")
pb = proxy_service_pb2


def _texts(updates: list[host_service_pb2.HostServiceRunResponse]) -> list[str]:
    return [u.reply.message.content for u in updates if u.HasField("reply")]


def _terminal(updates: list[host_service_pb2.HostServiceRunResponse]) -> object:
    return [u.result for u in updates if u.HasField("result")][-1]


async def _open(
    fleet: Fleet, channel: grpc.aio.Channel, name: str, text: str, conv: str, thread: str = ""
) -> tuple[Any, str]:
    """A run opened on replica `name`, read up to its `accepted` item."""
    call = fleet[name].stub(channel).Run(run_request(text, conv, thread_id=thread), timeout=120)
    accepted = await next_item(call)
    return call, accepted.accepted.run_id


async def test_cancel_from_another_replica_reaches_the_runner_through_a_third(fleet: Fleet) -> None:
    async with fleet["a"].channel() as ca, fleet["c"].channel() as cc:
        call, run_id = await _open(fleet, ca, "a", "hold 60", "cancel-1")
        entry = await runner_run(fleet.tmp, run_id)
        assert entry["endpoint"].endswith(str(fleet.ports["b"]))  # its proxy calls reach `b`
        await call.read()  # the first delta: its control stream is open (on `b`)
        await asyncio.sleep(0.3)
        started = time.monotonic()
        answer = (
            await fleet["c"]
            .stub(cc)
            .CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="from c"), timeout=10)
        )
        assert answer.run.HasField("cancel_request_time")
        rest = await read_rest(call)
        took = time.monotonic() - started
    terminal = _terminal(rest)
    # the runner's own stop, at once (the grace is 3 s): the signal went c -> a -> b's control stream
    assert terminal.run_failed.code == "cancelled"  # type: ignore[attr-defined]
    assert terminal.run_failed.message == "runner stopped: from c", terminal  # type: ignore[attr-defined]
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    assert took < 2.0, took


async def test_attach_reply_get_and_list_through_other_replicas(fleet: Fleet) -> None:
    """A run streaming on `a`, attached through `c` while it streams: the same results, gap-free and
    without repeats, then the terminal; a reply its runner sends through `b` reaches both streams."""
    async with fleet["a"].channel() as ca, fleet["c"].channel() as cc:
        own, run_id = await _open(fleet, ca, "a", "stream 150 10", "attach-1")
        stub_c = fleet["c"].stub(cc)
        follower = stub_c.AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=60)
        followed, mine = await asyncio.gather(read_rest(follower), read_rest(own))
        assert followed[0].accepted.run_id == run_id  # (`attached` is for a resubmitted event only)
        assert sequences(followed) == sequences(mine) == list(range(1, 152))
        assert followed[-1].finished.status == mine[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED

        replying, reply_run = await _open(fleet, ca, "a", "reply", "attach-2")
        mine = await read_rest(replying)
        assert _texts(mine) == ["a reply through the fleet"]
        again = await read_rest(
            stub_c.AttachRun(host_service_pb2.AttachRunRequest(run_id=reply_run), timeout=30)
        )
        assert _texts(again) == ["a reply through the fleet"] and sequences(again) == sequences(mine)

        got = await stub_c.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)
        assert got.run.status == common_pb2.RUN_STATUS_COMPLETED and got.run.last_sequence == 151
        listed = await stub_c.ListRuns(
            host_service_pb2.ListRunsRequest(conversation_id="attach-1"), timeout=10
        )
        assert [r.run_id for r in listed.runs] == [run_id]


async def test_steering_input_sent_to_another_replica_joins_the_open_run(fleet: Fleet) -> None:
    async with fleet["a"].channel() as ca, fleet["c"].channel() as cc:
        own, run_id = await _open(fleet, ca, "a", "steer 30", "steer-1")
        await runner_run(fleet.tmp, run_id)
        await asyncio.sleep(0.5)  # (its control stream is open on `b`)
        steered = fleet["c"].stub(cc).Run(run_request("new input", "steer-1"), timeout=60)
        followed, mine = await asyncio.gather(read_rest(steered), read_rest(own))
    assert followed[0].accepted.run_id == run_id and followed[0].accepted.attached
    assert _terminal(mine).run_completed.message.content == "steered: new input"  # type: ignore[attr-defined]
    assert _terminal(followed) == _terminal(mine)


async def test_run_records_from_a_run_on_another_replica(fleet: Fleet) -> None:
    """`AppendRunResult`, `FinalizeRunRecord` and `CancelRunRecord` on a run open on `a`, sent to `c`
    with the token of a run of the same conversation open on `b`."""
    async with fleet["a"].channel() as ca, fleet["b"].channel() as cb, fleet["c"].channel() as cc:
        target, target_id = await _open(fleet, ca, "a", "hold 60", "records-1")
        await target.read()  # its delta
        # (another thread: a run of its own, not steering input for the first)
        other, other_id = await _open(fleet, cb, "b", "hold 60", "records-1", thread="t2")
        token = (await runner_run(fleet.tmp, other_id))["token"]
        proxy = proxy_service_pb2_grpc.ProxyServiceStub(cc)
        md = [(RUN_TOKEN_HEADER, token), (RUN_ID_HEADER, other_id)]
        append = pb.AppendRunResultRequest(run_id=target_id)
        append.result.run_log.text = "from a run on b, through c"
        appended = await proxy.AppendRunResult(append, metadata=md, timeout=10)
        assert appended.result.sequence == 2 and appended.result.run_id == target_id  # the run numbered it
        joined = await target.read()
        assert joined.result.run_log.text == "from a run on b, through c" and joined.result.sequence == 2
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            finalize = pb.FinalizeRunRecordRequest(run_id=target_id, status=common_pb2.RUN_STATUS_COMPLETED)
            await proxy.FinalizeRunRecord(finalize, metadata=md, timeout=10)
        typed = from_rpc_error(refused.value)
        assert typed.reason == "FAILED_PRECONDITION" and "is open" in typed.message  # as on `a` itself
        cancelled = await proxy.CancelRunRecord(
            pb.CancelRunRecordRequest(run_id=target_id, reason="records"), metadata=md, timeout=10
        )
        assert cancelled.run.HasField("cancel_request_time")
        rest = await read_rest(target)
        assert _terminal(rest).run_failed.message == "runner stopped: records"  # type: ignore[attr-defined]
        await fleet["c"].stub(cc).CancelRun(host_service_pb2.CancelRunRequest(run_id=other_id), timeout=10)
        assert (await read_rest(other))[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED


async def test_send_message_and_interaction_answers_cross_replicas(fleet: Fleet) -> None:
    async with fleet["a"].channel() as ca, fleet["b"].channel() as cb, fleet["c"].channel() as cc:
        # SendMessage from a run on `b` to a conversation with a run open on `a`
        listening, listening_id = await _open(fleet, ca, "a", "hold 60", "message-1")
        await listening.read()
        sent = await read_rest(
            fleet["b"].stub(cb).Run(run_request("send message-1", "message-2"), timeout=30)
        )
        assert sent[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
        item = await listening.read()
        assert item.HasField("reply") and item.reply.message.content == "a message from another run"
        assert item.reply.reply_id.startswith("msg.")
        await (
            fleet["c"].stub(cc).CancelRun(host_service_pb2.CancelRunRequest(run_id=listening_id), timeout=10)
        )
        await read_rest(listening)

        # an interaction asked by a run on `a`, answered through `c`
        asked = await read_rest(fleet["a"].stub(ca).Run(run_request("ask", "ask-1"), timeout=30))
        interaction = next(u.interaction for u in asked if u.HasField("interaction"))
        answer = host_service_pb2.SubmitInteractionRequest(
            interaction_id=interaction.request.interaction_id, action_id="confirm"
        )
        answered = await read_rest(fleet["c"].stub(cc).SubmitInteraction(answer, timeout=30))
        assert _terminal(answered).run_completed.message.content == "answered: confirm"  # type: ignore[attr-defined]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrunner_host", *args], capture_output=True, text=True, timeout=60
    )


async def test_one_address_for_the_fleet_spreads_calls_over_every_replica(fleet: Fleet) -> None:
    """The SDK's channel and the CLI given every replica's address (comma-separated): calls go round
    robin over the three (each run's `owner` is the replica its `Run` reached), and every one works."""
    every = ",".join(f"127.0.0.1:{fleet.ports[name]}" for name in "abc")
    async with host_service_channel(every) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        ended = [
            await read_rest(stub.Run(run_request(f"hello {i}", f"rr-{i}"), timeout=60)) for i in range(9)
        ]
    assert all(u[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED for u in ended)
    run_ids = [u[0].accepted.run_id for u in ended]
    owners = fleet.sql("SELECT owner FROM runs WHERE run_id = ANY(:ids)", ids=run_ids)
    assert sorted({o for (o,) in owners}) == ["a", "b", "c"], owners

    listed = await asyncio.to_thread(_cli, "runs", "list", "--host", every, "--conversation", "rr-3", "-q")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [run_ids[3]]
    bad = await asyncio.to_thread(_cli, "runs", "list", "--host", f"{every},nowhere")
    assert bad.returncode == 2 and "'nowhere' is not host:port" in bad.stderr, bad.stderr


async def test_the_database_is_whole_after_the_operations(fleet: Fleet) -> None:
    await asyncio.sleep(0.5)
    done = db_check(fleet.url, fleet.live())
    assert done.returncode == 0, done.stdout + done.stderr
