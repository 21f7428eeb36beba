"""What runners may do to other runs and how much a page may hold (issue 16 items 4, 8, 14, 16): runs
without a conversation share none; appended results take the run's own numbering; pages are capped in
bytes (the cap is in the response, and paging continues); a replica refuses, typed, what only the
replica running a run can do."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf.message import Message

from agentrunner.errors import from_rpc_error
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import (
    common_pb2,
    host_service_pb2,
    host_service_pb2_grpc,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
)
from agentrunner_host.store.migrate import upgrade
from tests.hardening.conftest import (
    HostProcess,
    Matrix,
    Proc,
    checked,
    host_config,
    run_to_end,
    start_rogue,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
pb = proxy_service_pb2


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def channel(matrix_sqlite: Matrix) -> AsyncIterator[grpc.aio.Channel]:
    async with matrix_sqlite.host.channel(options=[("grpc.max_send_message_length", 32 << 20)]) as ch:
        yield ch


def md(live: dict[str, str]) -> list[tuple[str, str]]:
    return [(RUN_TOKEN_HEADER, live["token"]), (RUN_ID_HEADER, live["run_id"])]


async def test_runs_without_a_conversation_cannot_reach_each_other(
    matrix_sqlite: Matrix, channel: grpc.aio.Channel
) -> None:
    """Item 4: two runs without a conversation could get, page and cancel each other."""
    a_task, a = await matrix_sqlite.token_run(channel, 60, conversation_id="")
    b_task, b = await matrix_sqlite.token_run(channel, 60, conversation_id="")
    proxy = proxy_service_pb2_grpc.ProxyServiceStub(channel)
    calls: tuple[tuple[Callable[..., Awaitable[Any]], Message], ...] = (
        (proxy.GetRunRecord, pb.GetRunRecordRequest(run_id=b["run_id"])),
        (proxy.ListRunRecordEvents, pb.ListRunRecordEventsRequest(run_id=b["run_id"])),
        (proxy.CancelRunRecord, pb.CancelRunRecordRequest(run_id=b["run_id"])),
    )
    for call, request in calls:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(request, metadata=md(a), timeout=10)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    own = await proxy.GetRunRecord(pb.GetRunRecordRequest(), metadata=md(a), timeout=10)
    assert own.run.run_id == a["run_id"]
    record = (await host_service_pb2_grpc.HostServiceStub(channel).GetRun(
        host_service_pb2.GetRunRequest(run_id=b["run_id"]), timeout=10
    )).run  # fmt: skip
    assert record.status == common_pb2.RUN_STATUS_RUNNING  # never cancelled by the other run
    for task in (a_task, b_task):
        task.cancel()
    await asyncio.gather(a_task, b_task, return_exceptions=True)


async def test_an_appended_result_takes_the_runs_own_numbering(
    matrix_sqlite: Matrix, channel: grpc.aio.Channel
) -> None:
    """Item 8: an explicit sequence collided with the live run's numbering and left a ledger gap."""
    task, live = await matrix_sqlite.token_run(channel, 2, conversation_id="append")
    proxy = proxy_service_pb2_grpc.ProxyServiceStub(channel)
    appended = []
    for sequence in (10, 0, 2):
        request = pb.AppendRunResultRequest()
        request.result.sequence = sequence
        request.result.run_log.text = f"appended with sequence {sequence}"
        appended.append((await proxy.AppendRunResult(request, metadata=md(live), timeout=10)).result.sequence)
    updates = await task
    results = [u.result for u in updates if u.HasField("result")]
    assert [r.sequence for r in results] == list(range(1, len(results) + 1))
    assert appended == sorted(appended) and len(set(appended)) == 3
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    report = checked(matrix_sqlite.url)
    assert report.ok, "\n".join(map(str, report.problems))


async def test_pages_are_capped_in_bytes_and_paging_reaches_everything(
    matrix_sqlite: Matrix, channel: grpc.aio.Channel
) -> None:
    """Item 14: ListHistory returned a 22 MB page, which the SDK's 16 MiB limit then refused."""
    for i in range(6):  # 6 user messages of 1.5 MiB (and the runner's short replies)
        await run_to_end(channel, f"m{i} " + "h" * (3 << 19), conversation_id="pages", deadline=60)
    task, live = await matrix_sqlite.token_run(channel, 60, conversation_id="pages")
    # a client with gRPC's default 4 MiB receive limit pages through all of it
    async with grpc.aio.insecure_channel(matrix_sqlite.host.address) as small:
        proxy = proxy_service_pb2_grpc.ProxyServiceStub(small)
        users: list[str] = []
        cursor, pages = "", 0
        while True:
            page = await proxy.ListHistory(
                pb.ListHistoryRequest(limit=50, before_cursor=cursor), metadata=md(live), timeout=20
            )
            pages += 1
            assert page.max_page_bytes > 0 and page.ByteSize() <= page.max_page_bytes + 64 * 1024
            users += [item.content[:3] for item in page.items if item.role == "user"]
            if not page.has_more:
                break
            cursor = page.next_cursor
        assert pages >= 3
        assert sorted(u for u in users if u.startswith("m")) == [f"m{i} " for i in range(6)]
        events = await proxy.ListEvents(pb.ListEventsRequest(limit=50), metadata=md(live), timeout=20)
        assert events.max_page_bytes == page.max_page_bytes
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_list_runs_pages_are_capped_in_bytes(matrix_sqlite: Matrix, channel: grpc.aio.Channel) -> None:
    """Item 14 for HostService.ListRuns: a page was capped in runs only (200 runs of up to a 1 MiB
    terminal usage each), so a default 4 MiB client could not list them."""
    for _ in range(8):  # 8 runs whose records carry 700 KiB of usage each
        updates = await run_to_end(channel, "big_usage 700", conversation_id="big-runs", deadline=60)
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    async with grpc.aio.insecure_channel(matrix_sqlite.host.address) as small:
        stub = host_service_pb2_grpc.HostServiceStub(small)
        token, pages, seen = "", 0, []
        while True:
            page = await stub.ListRuns(
                host_service_pb2.ListRunsRequest(page_size=200, page_token=token, conversation_id="big-runs"),
                timeout=20,
            )
            pages += 1
            assert 0 < page.ByteSize() <= page.max_page_bytes
            seen += [run.run_id for run in page.runs]
            if not page.next_page_token:
                break
            token = page.next_page_token
    assert pages >= 2 and len(seen) == len(set(seen)) == 8


async def test_after_the_runner_rules_the_ledger_is_whole(matrix_sqlite: Matrix) -> None:
    await asyncio.sleep(0.5)
    report = checked(matrix_sqlite.url)
    assert report.ok, "\n".join(map(str, report.problems))


# -- two replicas on one PostgreSQL database (item 16) ----------------------------------------------------


class Replicas:
    def __init__(self, a: HostProcess, b: HostProcess, rogue: Proc, tmp: pathlib.Path) -> None:
        self.a, self.b, self.rogue, self.tmp = a, b, rogue, tmp


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, postgres_server: object) -> Iterator[Replicas]:
    tmp = tmp_path_factory.mktemp("replicas")
    url = postgres_server.url(postgres_server.create_database())  # type: ignore[attr-defined]
    upgrade(url)
    rogue = start_rogue(tmp)
    hosts = []
    for name in ("replica-a", "replica-b"):
        (tmp / name).mkdir()
        config = host_config(rogue.address, {"url": url, "artifact_dir": str(tmp / "artifacts")})
        config["instance_id"] = name
        hosts.append(HostProcess(tmp / name, config))
    yield Replicas(hosts[0], hosts[1], rogue, tmp)
    for host in hosts:
        host.kill(15)
    rogue.kill()


async def test_a_replica_refuses_what_only_the_replica_running_the_run_can_do(replicas: Replicas) -> None:
    """Item 16: CancelRun sent to the replica that does not hold the run answered OK and the run kept
    going (so did CancelRunRecord); AppendRunResult and FinalizeRunRecord wrote behind its back."""
    ma = Matrix("a", replicas.a, replicas.rogue, replicas.tmp)
    async with replicas.a.channel() as ca, replicas.b.channel() as cb:
        task, live = await ma.token_run(ca, 30, conversation_id="replicated")
        # a run on replica B in the same conversation: its token may cancel / append to runs there
        task_b, other = await Matrix("b", replicas.b, replicas.rogue, replicas.tmp).token_run(
            cb, 30, conversation_id="replicated"
        )
        stub_b = host_service_pb2_grpc.HostServiceStub(cb)
        proxy_b = proxy_service_pb2_grpc.ProxyServiceStub(cb)
        refusals: list[Awaitable[Any]] = [
            stub_b.CancelRun(host_service_pb2.CancelRunRequest(run_id=live["run_id"]), timeout=10),
            proxy_b.CancelRunRecord(
                pb.CancelRunRecordRequest(run_id=live["run_id"]), metadata=md(other), timeout=10
            ),
            proxy_b.FinalizeRunRecord(
                pb.FinalizeRunRecordRequest(run_id=live["run_id"], status=common_pb2.RUN_STATUS_COMPLETED),
                metadata=md(other),
                timeout=10,
            ),
        ]
        append = pb.AppendRunResultRequest(run_id=live["run_id"])
        append.result.run_log.text = "from the other replica"
        refusals.append(proxy_b.AppendRunResult(append, metadata=md(other), timeout=10))
        for refusal in refusals:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await refusal
            assert from_rpc_error(caught.value).reason == "FAILED_PRECONDITION", caught.value
        # the run was never touched: it is still running on A, and A can cancel it
        stub_a = host_service_pb2_grpc.HostServiceStub(ca)
        assert (await stub_a.GetRun(host_service_pb2.GetRunRequest(run_id=live["run_id"]))).run.status == (
            common_pb2.RUN_STATUS_RUNNING
        )
        await stub_a.CancelRun(host_service_pb2.CancelRunRequest(run_id=live["run_id"]), timeout=10)
        updates = await task
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)
    await asyncio.sleep(0.5)
    report = checked(ma.url, live_owners=("replica-a", "replica-b"))
    assert report.ok, "\n".join(map(str, report.problems))
