"""Admission control (issue 37): a host holds at most `limits.max_open_runs` runs open at once (default
10,000); a run beyond it is refused RESOURCE_EXHAUSTED with `ErrorInfo` (`RATE_LIMITED`, retryable) and
`RetryInfo` before anything is recorded, and admitted again once a run has ended."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any, cast

import grpc
import pytest
from grpc_status import rpc_status

from agentrunner.errors import RateLimitedError, from_rpc_error
from agentrunner.v1 import host_service_pb2
from agentrunner_host.config.model import LimitsConfig
from tests.helpers import next_message
from tests.host.conftest import FakeRunner, Host, HostFactory, host_config, run_request


def test_the_default_cap_is_ten_thousand_open_runs() -> None:
    """The default the issue sets: 10,000 open runs per host (the SDK runner's default cap is the same)."""
    assert LimitsConfig().max_open_runs == 10_000


async def _open(
    host: Host, conversation: str
) -> grpc.aio.UnaryStreamCall[Any, host_service_pb2.HostServiceRunResponse]:
    call = host.stub.Run(run_request("stall", conversation_id=conversation), timeout=30)
    assert (await next_message(call)).HasField("accepted")
    assert (await next_message(call)).result.message_delta.text == "working"
    return call


@pytest.mark.asyncio(loop_scope="session")
async def test_a_run_beyond_the_cap_is_refused_with_retry_info_and_nothing_recorded(
    make_host: HostFactory, fake_runner: FakeRunner
) -> None:
    config = host_config(fake_runner.address)
    config["limits"].update(max_open_runs=2, busy_retry_seconds=1.5)
    host: Host = await make_host(config)
    held = [await _open(host, f"adm-{i}") for i in range(2)]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in host.stub.Run(run_request("hello", conversation_id="adm-late"), timeout=30):
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = rpc_status.from_call(cast(grpc.Call, caught.value))  # an aio error has the same accessors
    assert details is not None
    kinds = [d.type_url.rsplit("/", 1)[-1] for d in details.details]
    assert kinds == ["google.rpc.ErrorInfo", "google.rpc.RetryInfo"]
    error = from_rpc_error(caught.value)
    assert isinstance(error, RateLimitedError) and error.retryable
    assert error.retry_delay == 1.5 and error.metadata["maxOpenRuns"] == "2"
    with contextlib.closing(
        sqlite3.connect(str(host.app.db.url.database))
    ) as conn:  # the refused run left nothing behind
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (2,)

    held[0].cancel()
    for _ in range(100):
        if host.app.runs.open_runs < 2:
            break
        await asyncio.sleep(0.02)
    again = [u async for u in host.stub.Run(run_request("hello", conversation_id="adm-again"), timeout=30)]
    assert again[0].HasField("accepted") and again[-1].HasField("finished")
    held[1].cancel()
    for _ in range(100):
        if host.app.runs.open_runs == 0:
            break
        await asyncio.sleep(0.02)
    # steering's index of open runs by conversation forgets ended runs (no per-run memory left behind)
    assert host.app.runs.open_runs == 0 and host.app.runs._by_conversation == {}
