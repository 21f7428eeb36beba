"""Host processes under failure: kill -9 mid-run and restart, a database error mid-run, and two replicas
on one PostgreSQL database authorizing each other's runs from the shared session table."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.errors import from_rpc_error
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from tests.helpers import next_message, rest_of
from tests.integration.conftest import (
    PROBE_ID,
    REFERENCE_ID,
    Proc,
    cli,
    probe,
    run,
    run_request,
    start_host,
    write_config,
)

pytestmark = pytest.mark.asyncio


def reference_config(tmp: Path, runner: str, **extra: Any) -> dict[str, Any]:
    return {
        "instance_id": "host-1",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "runners": [{"id": "ref", "address": runner}],
        "agents": [{"id": "ref", "runner_id": REFERENCE_ID}],
        "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "ref"}}],
        **extra,
    }


async def get_run(address: str, run_id: str) -> host_service_pb2.Run:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return (await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=5)).run


async def test_a_host_killed_mid_run_marks_the_run_interrupted_on_restart(
    tmp_path: Path, reference_runner: Proc
) -> None:
    config = write_config(tmp_path / "host.yaml", reference_config(tmp_path, reference_runner.value))
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    host = start_host(config)
    try:
        async with grpc.aio.insecure_channel(host.value) as channel:
            call = host_service_pb2_grpc.HostServiceStub(channel).Run(run_request("slow:50"), timeout=30)
            run_id = (await next_message(call)).accepted.run_id
            assert (await next_message(call)).result.HasField("message_delta")
            host.kill()  # SIGKILL: no shutdown path runs
            with pytest.raises(grpc.aio.AioRpcError):
                while await call.read() is not grpc.aio.EOF:
                    pass
        host = start_host(config)
        record = await get_run(host.value, run_id)
        assert record.status == common_pb2.RUN_STATUS_INTERRUPTED
        assert record.status_reason.startswith("host.restarted")
        assert completed_ok(await run(host.value, "after restart"))
    finally:
        host.kill()


def completed_ok(updates: list[host_service_pb2.HostServiceRunResponse]) -> bool:
    return updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_a_database_error_mid_run_fails_the_run_and_the_host_keeps_serving(
    tmp_path: Path, reference_runner: Proc
) -> None:
    config = write_config(tmp_path / "host.yaml", reference_config(tmp_path, reference_runner.value))
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    host = start_host(config)
    try:
        async with grpc.aio.insecure_channel(host.value) as channel:
            call = host_service_pb2_grpc.HostServiceStub(channel).Run(run_request("slow:30"), timeout=30)
            run_id = (await next_message(call)).accepted.run_id
            assert (await next_message(call)).result.HasField("message_delta")
            # the database starts refusing this run's result rows (as a full disk or a lost table would)
            with contextlib.closing(sqlite3.connect(tmp_path / "host.db", timeout=10)) as db:
                db.execute(
                    f"CREATE TRIGGER broken BEFORE INSERT ON run_results WHEN NEW.run_id = '{run_id}' "
                    "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
                )
                db.commit()
            updates = await rest_of(call)
        failed = [
            u.result.run_failed for u in updates if u.HasField("result") and u.result.HasField("run_failed")
        ]
        assert [f.code for f in failed] == ["host.store_error"] and failed[0].retryable
        assert "injected" not in failed[0].message  # no internals to the client
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_FAILED
        record = await get_run(host.value, run_id)
        assert record.status == common_pb2.RUN_STATUS_FAILED and record.status_reason == "host.store_error"
        assert completed_ok(await run(host.value, "still serving", conversation_id="other"))
    finally:
        host.kill()


async def test_a_run_start_that_cannot_commit_leaves_nothing_behind_and_the_event_can_be_sent_again(
    tmp_path: Path, probe_runner: Proc
) -> None:
    """The run start commits after the runner call went out (the commit overlaps the runner's start): if
    that commit fails, the client gets a typed error and nothing of the run exists, so the same event
    can be submitted again. The part written at commit time (session, user message) fails here."""
    base = reference_config(tmp_path, probe_runner.value)
    base["agents"] = [{"id": "probe", "runner_id": PROBE_ID}]
    base["bindings"] = [{"id": "all", "event": "message.*", "target": {"agent": "probe"}}]
    config = write_config(tmp_path / "host.yaml", base)
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    db_file = tmp_path / "host.db"
    host = start_host(config)
    steps = [{"rpc": "ListHistory", "req": {"limit": 5}}]

    def rows(event_id: str) -> tuple[int, int, int]:
        with contextlib.closing(sqlite3.connect(db_file, timeout=10)) as db:
            return (
                db.execute("SELECT count(*) FROM runs WHERE event_id = ?", (event_id,)).fetchone()[0],
                db.execute("SELECT count(*) FROM event_log WHERE record_id = ?", (event_id,)).fetchone()[0],
                db.execute(
                    "SELECT count(*) FROM transcript_items WHERE event_id = ?", (event_id,)
                ).fetchone()[0],
            )

    try:
        with contextlib.closing(sqlite3.connect(db_file, timeout=10)) as db:
            db.execute(
                "CREATE TRIGGER broken BEFORE INSERT ON run_sessions BEGIN SELECT RAISE(ABORT, 'injected'); END"
            )
            db.commit()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await run(host.value, json.dumps(steps), event_id="evt-lost")
        typed = from_rpc_error(err.value)
        assert err.value.code() == grpc.StatusCode.INTERNAL and typed.reason == "RUNTIME_ERROR"
        assert "injected" not in (err.value.details() or "")  # no internals to the client
        assert rows("evt-lost") == (0, 0, 0)
        with contextlib.closing(sqlite3.connect(db_file, timeout=10)) as db:
            db.execute("DROP TRIGGER broken")
            db.commit()
        # the same event again: a run like any other, whose first proxy call already sees its message
        report, run_id = await probe(host.value, steps, event_id="evt-lost")
        history = report["steps"][0]["ok"]["items"]
        assert history[-1]["content"] == json.dumps(steps) and history[-1]["runId"] == run_id
        assert report["ctx"]["transcript_seq"] == 1 and report["ctx"]["event_seq"] == 1  # none was used up
        assert rows("evt-lost") == (1, 1, 2)  # user message and the probe's reply
    finally:
        host.kill()


@pytest.mark.postgres
async def test_a_replica_authorizes_another_replicas_run_from_the_shared_sessions(
    tmp_path: Path, probe_runner: Proc, postgres_database: Callable[..., str]
) -> None:
    url = postgres_database()
    base: dict[str, Any] = {
        "database": {"url": url, "artifact_dir": str(tmp_path / "artifacts")},
        "runners": [{"id": "probe", "address": probe_runner.value}],
        "agents": [{"id": "probe", "runner_id": PROBE_ID, "prompt": "shared prompt"}],
        "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "probe"}}],
    }
    config_b = write_config(
        tmp_path / "b.yaml", {"instance_id": "replica-b", "listen": {"address": "127.0.0.1:0"}, **base}
    )
    assert cli("db", "upgrade", "--config", str(config_b)).returncode == 0
    replica_b = start_host(config_b)
    replica_a = None
    try:
        # replica A tells its runners to send proxy calls to replica B
        config_a = write_config(
            tmp_path / "a.yaml",
            {
                "instance_id": "replica-a",
                "listen": {"address": "127.0.0.1:0", "advertise_address": replica_b.value},
                **base,
            },
        )
        replica_a = start_host(config_a)
        steps = [
            {"rpc": "GetPrompt", "req": {}},
            {"rpc": "SetState", "req": {"scope": "STATE_SCOPE_CONVERSATION", "key": "k", "value": 1}},
            {"rpc": "ListHistory", "req": {"limit": 5}},
            {"rpc": "ListHistory", "req": {"conversation_id": "not-mine"}},
        ]
        report, run_id = await probe(replica_a.value, steps, conversation_id="shared")
        out = report["steps"]
        assert out[0]["ok"]["messages"][0]["content"] == "shared prompt"
        assert out[1]["ok"] == {} and len(out[2]["ok"]["items"]) == 1
        assert out[3]["error"]["code"] == "PERMISSION_DENIED"  # B enforces A's frozen snapshot
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT event_type, data->>'outcome' FROM event_log WHERE kind = 'audit' AND run_id = %s ORDER BY seq",
                (run_id,),
            ).fetchall()
        assert [tuple(r) for r in rows if r[0] != "Control"] == [
            ("GetPrompt", "OK"), ("SetState", "OK"), ("ListHistory", "OK"), ("ListHistory", "UNAUTHORIZED")
        ]  # fmt: skip
        assert (await get_run(replica_b.value, run_id)).status == common_pb2.RUN_STATUS_COMPLETED
    finally:
        for proc in (replica_a, replica_b):
            if proc is not None:
                proc.kill()
