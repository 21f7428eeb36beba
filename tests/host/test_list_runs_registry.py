"""`ListRuns` (filters, AIP-158 pages bound to their filters) and the registry as a user sees it: a
down endpoint listed with its reason, a runner that comes up after the host found within the retry
interval (+1 s), the endpoint health gauge."""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import grpc
import pytest
from prometheus_client import REGISTRY

from agentrunner.v1 import common_pb2, host_service_pb2
from tests.host.conftest import HERE, Host, HostFactory, host_config, start_process, stop_process

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _gauge(endpoint: str) -> float | None:
    return REGISTRY.get_sample_value("agentrunner_runner_endpoint_up", {"endpoint": endpoint})


async def test_list_runs_filters_and_pages(host: Host) -> None:
    for i in range(5):
        await host.run("slow 1", conversation_id="lr-a" if i % 2 == 0 else "lr-b", event_id=f"lr-{i}")
    await host.run("failed", conversation_id="lr-a", event_id="lr-failed")
    ListRuns = host.stub.ListRuns

    page = await ListRuns(host_service_pb2.ListRunsRequest(conversation_id="lr-a", page_size=2), timeout=5)
    assert [r.conversation_id for r in page.runs] == ["lr-a", "lr-a"] and page.next_page_token
    assert page.runs[0].event_id == "lr-failed"  # newest first
    rest = await ListRuns(
        host_service_pb2.ListRunsRequest(
            conversation_id="lr-a", page_size=2, page_token=page.next_page_token
        ),
        timeout=5,
    )
    seen = [r.event_id for r in [*page.runs, *rest.runs]]
    assert seen == ["lr-failed", "lr-4", "lr-2", "lr-0"] and not rest.next_page_token

    completed = await ListRuns(
        host_service_pb2.ListRunsRequest(conversation_id="lr-a", statuses=[common_pb2.RUN_STATUS_COMPLETED]),
        timeout=5,
    )
    assert [r.event_id for r in completed.runs] == ["lr-4", "lr-2", "lr-0"]
    by_agent = await ListRuns(
        host_service_pb2.ListRunsRequest(agent_id="fake-agent", page_size=200), timeout=5
    )
    assert {"lr-1", "lr-3", "lr-failed"} <= {r.event_id for r in by_agent.runs}
    none = await ListRuns(host_service_pb2.ListRunsRequest(runner_id="plugin:nobody/x/y"), timeout=5)
    assert not none.runs and not none.next_page_token

    # a token continues only the listing it came from
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ListRuns(
            host_service_pb2.ListRunsRequest(conversation_id="lr-b", page_token=page.next_page_token),
            timeout=5,
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ListRuns(host_service_pb2.ListRunsRequest(page_size=-1), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_down_endpoint_listed_with_its_reason_then_found_within_the_retry_interval(
    make_host: HostFactory, tmp_path
) -> None:
    port = _free_port()
    config = host_config(f"127.0.0.1:{port}")
    config["registry"] = {
        "refresh_interval_seconds": 300,
        "retry_interval_seconds": 1.0,
        "describe_timeout_seconds": 2,
    }
    host = await make_host(config)
    listed = await host.stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=5)
    assert not listed.runners
    (endpoint,) = listed.endpoints
    assert endpoint.endpoint_id == "fake" and not endpoint.available
    assert "connection refused" in endpoint.last_error and "UNKNOWN: ipv4" not in endpoint.last_error
    assert endpoint.HasField("check_time") and not endpoint.HasField("success_time")
    assert _gauge("fake") == 0

    # keep the registry failing for a while first: gRPC's own reconnect backoff would have grown by then
    await asyncio.sleep(15)
    proc, _address = start_process([sys.executable, str(HERE / "fake_runner.py"), str(port)], env={})
    try:
        up_at = time.monotonic()
        while time.monotonic() - up_at < 10:
            listed = await host.stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=5)
            if listed.runners:
                break
            await asyncio.sleep(0.05)
        found_after = time.monotonic() - up_at
        assert listed.runners and listed.endpoints[0].available and not listed.endpoints[0].last_error
        assert found_after <= 1.0 + 1.0, f"found {found_after:.2f} s after the runner listened"
        assert list(listed.endpoints[0].runner_ids) == [listed.runners[0].manifest.id]
        assert _gauge("fake") == 1
        finished = (await host.run("slow 2"))[-1].finished
        assert finished.status == common_pb2.RUN_STATUS_COMPLETED
    finally:
        stop_process(proc)
