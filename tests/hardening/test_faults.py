"""Faults: the host SIGKILLed mid-run, the database stopped and started (PostgreSQL) or locked by another
process (SQLite), the artifact disk full. Runs in flight end typed, the host keeps serving and recovers
when the fault ends, and the integrity check finds nothing afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER
from agentrunner.v1 import common_pb2, host_service_pb2_grpc, proxy_service_pb2, proxy_service_pb2_grpc
from agentrunner_host.store.migrate import upgrade
from tests.hardening.conftest import (
    SOAK,
    HostProcess,
    Matrix,
    OwnPostgres,
    SqliteLock,
    checked,
    host_config,
    record,
    run_request,
    run_to_end,
    soak_or,
    sqlite_database,
    start_rogue,
    wait_for_run,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
OWNER = "hardening-host"


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    # (not under pytest's temp root: the cluster's owner, the postgres user, must reach the directory)
    root = pathlib.Path(tempfile.mkdtemp(prefix="agentrunner-own-pg-"))
    pg = OwnPostgres(root)
    yield pg
    pg.close()
    shutil.rmtree(root, ignore_errors=True)


def database(kind: str, request: pytest.FixtureRequest, tmp: pathlib.Path) -> dict[str, Any]:
    if kind == "sqlite":
        return sqlite_database(request.getfixturevalue("hardening_template"), tmp)
    url = request.getfixturevalue("own_postgres").create_database()
    upgrade(url)
    return {"url": url, "artifact_dir": str(tmp / "artifacts")}


def status(updates: list[Any]) -> int:
    return int(updates[-1].finished.status) if updates and updates[-1].HasField("finished") else -1


@pytest.mark.parametrize(
    "kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.skipif(not SOAK, reason="make soak"))]
)
async def test_a_host_killed_mid_run_leaves_a_whole_ledger_and_no_working_token(
    kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """SIGKILL with runs streaming, holding tokens and waiting on their runner; restart; check."""
    rogue = start_rogue(tmp_path)
    host = HostProcess(tmp_path, host_config(rogue.address, database(kind, request, tmp_path)))
    try:
        async with host.channel() as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            calls = [stub.Run(run_request(text, conversation_id=f"kill-{i}"), timeout=60) for i, text in
                     enumerate(["endless", "token 60", "silent", "flood 200000", "endless"])]  # fmt: skip
            for call in calls:
                await call.read()  # accepted: every run is open
            token = await wait_for_run(tmp_path, "token")
            await asyncio.sleep(0.3)
            host.kill()  # SIGKILL: no shutdown path runs
            record("faults injected", 1)
            for call in calls:
                call.cancel()
        host = host.restart()
        async with host.channel() as channel:
            proxy = proxy_service_pb2_grpc.ProxyServiceStub(channel)
            md = [(RUN_TOKEN_HEADER, token["token"]), (RUN_ID_HEADER, token["run_id"])]
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await proxy.GetRunRecord(proxy_service_pb2.GetRunRecordRequest(), metadata=md, timeout=10)
            assert from_rpc_error(caught.value).reason == "RUN_TOKEN_INVALID"
            assert status(await run_to_end(channel, "after restart", conversation_id="kill-after")) == (
                common_pb2.RUN_STATUS_COMPLETED
            )
        report = checked(host.config["database"]["url"])
        print(report.summary())
        assert report.ok, "\n".join(map(str, report.problems))
        assert report.runs >= 6
    finally:
        host.kill(15)
        rogue.kill()


async def test_a_locked_sqlite_database_stalls_writes_and_loses_nothing(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """Another process holds SQLite's write lock for a while (shorter than the busy timeout)."""
    rogue = start_rogue(tmp_path)
    db = database("sqlite", request, tmp_path)
    host = HostProcess(tmp_path, host_config(rogue.address, db))
    try:
        async with host.channel() as channel:
            running = [
                asyncio.create_task(
                    run_to_end(channel, "flood 3000", conversation_id=f"lock-{i}", deadline=60)
                )
                for i in range(4)
            ]
            await asyncio.sleep(0.2)
            record("faults injected", 1)
            lock = SqliteLock(pathlib.Path(db["url"].removeprefix("sqlite+aiosqlite:///")))
            await asyncio.sleep(soak_or(2, 10))
            lock.release()
            for task in running:
                assert status(await task) == common_pb2.RUN_STATUS_COMPLETED
        await asyncio.sleep(0.5)
        report = checked(db["url"])
        assert report.ok, "\n".join(map(str, report.problems))
    finally:
        host.kill(15)
        rogue.kill()


async def test_postgresql_stopped_and_started_the_host_answers_typed_and_recovers(
    own_postgres: OwnPostgres, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    rogue = start_rogue(tmp_path)
    host = HostProcess(tmp_path, host_config(rogue.address, database("postgresql", request, tmp_path)))
    try:
        async with host.channel() as channel:
            assert status(await run_to_end(channel, "before", conversation_id="pg-before")) == 3
            own_postgres.stop()
            record("faults injected", 1)
            try:
                outcomes: list[tuple[str, object]] = []
                for i in range(3):  # while it is down: typed refusals, retryable
                    try:
                        updates = await run_to_end(
                            channel, "during", conversation_id=f"pg-down-{i}", deadline=30
                        )
                        outcomes.append(("finished", status(updates)))
                    except grpc.aio.AioRpcError as err:
                        typed = from_rpc_error(err)
                        assert typed.retryable and err.code() == grpc.StatusCode.UNAVAILABLE, (
                            err.code(),
                            typed,
                        )
                        outcomes.append(("refused", typed.reason))
                assert all(kind == "refused" for kind, _ in outcomes), outcomes
            finally:
                own_postgres.start()
            for _ in range(20):  # the pool reconnects: the first attempts may still meet dead connections
                with contextlib.suppress(grpc.aio.AioRpcError):
                    if status(await run_to_end(channel, "after", conversation_id="pg-after")) == 3:
                        break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("the host did not recover after PostgreSQL came back")
        assert "Traceback" not in host.log_text()
        report = checked(host.config["database"]["url"])
        assert report.ok, "\n".join(map(str, report.problems))
    finally:
        host.kill(15)
        rogue.kill()


async def test_postgresql_down_mid_run_the_run_still_ends_once_it_is_back(
    own_postgres: OwnPostgres, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """Item 6: after an outage mid-run the client got `run.failed host.store_error`, but once the
    database returned the ledger still said RUNNING and the run's token still worked."""
    rogue = start_rogue(tmp_path)
    host = HostProcess(tmp_path, host_config(rogue.address, database("postgresql", request, tmp_path)))
    matrix = Matrix("pg-mid-run", host, rogue, tmp_path)
    try:
        async with host.channel() as channel:
            task, held = await matrix.token_run(channel, 1.5, conversation_id="pg-mid-run")
            own_postgres.stop()
            record("faults injected", 1)
            try:
                updates = await task  # its ending cannot be written: the client still gets one
                assert status(updates) == common_pb2.RUN_STATUS_FAILED
            finally:
                own_postgres.start()
            rows: list[Any] = []
            for _ in range(80):  # the host writes the ending once the database takes writes again
                with contextlib.suppress(Exception):
                    rows = matrix.sql("SELECT status FROM runs WHERE run_id = :r", r=held["run_id"])
                if rows and rows[0][0] not in (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING):
                    break
                await asyncio.sleep(0.25)
            assert rows and rows[0][0] == common_pb2.RUN_STATUS_FAILED, rows
            proxy = proxy_service_pb2_grpc.ProxyServiceStub(channel)
            md = [(RUN_TOKEN_HEADER, held["token"]), (RUN_ID_HEADER, held["run_id"])]
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await proxy.GetRunRecord(proxy_service_pb2.GetRunRecordRequest(), metadata=md, timeout=10)
            assert from_rpc_error(caught.value).reason == "RUN_TOKEN_INVALID"
        terminals = matrix.sql(
            "SELECT count(*) FROM run_results WHERE run_id = :r AND result_type IN ('run.completed', 'run.failed')",
            r=held["run_id"],
        )
        assert terminals[0][0] == 1
        assert "Traceback" not in host.log_text()
        # the results the outage rolled back are written with the ending: no gap before the terminal
        report = checked(host.config["database"]["url"])
        assert report.ok, "\n".join(map(str, report.problems))
    finally:
        host.kill(15)
        rogue.kill()


def _tmpfs(path: pathlib.Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return done.returncode == 0


async def test_a_full_artifact_disk_refuses_typed_and_recovers(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    artifacts = tmp_path / "artifacts"
    if not _tmpfs(artifacts, "3m"):
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN) to fill a disk")
    rogue = start_rogue(tmp_path)
    db = database("sqlite", request, tmp_path)
    db["artifact_dir"] = str(artifacts)
    host = HostProcess(tmp_path, host_config(rogue.address, db))
    try:
        async with host.channel(options=[("grpc.max_send_message_length", 32 << 20)]) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            big = run_request("with a file", conversation_id="disk", event_id="evt-disk")
            big.event.input.attachments.add(
                name="big.bin", mime_type="application/octet-stream", content=b"x" * (4 << 20)
            )
            record("faults injected", 1)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                [u async for u in stub.Run(big, timeout=30)]
            typed = from_rpc_error(caught.value)
            assert typed.reason == "RUNTIME_ERROR" and "could not write" in typed.message, typed
            assert not [p for p in artifacts.rglob("*") if p.is_file()]  # no partial file left behind
            small = run_request("fits", conversation_id="disk")
            small.event.input.attachments.add(name="s.bin", content=b"y" * (512 << 10))
            assert status([u async for u in stub.Run(small, timeout=30)]) == common_pb2.RUN_STATUS_COMPLETED
        assert "Traceback" not in host.log_text()
        # the refused run recorded nothing (its start is one transaction, attachments included)
        report = checked(db["url"])
        assert report.ok, "\n".join(map(str, report.problems))
    finally:
        host.kill(15)
        rogue.kill()
        subprocess.run(["umount", "-l", str(artifacts)], capture_output=True)  # noqa: ASYNC221 - a test's cleanup
