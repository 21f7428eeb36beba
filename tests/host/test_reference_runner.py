"""Happy paths against the real reference runner (SDK CLI process) through an in-process host."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import pytest_asyncio

from agentrunner.v1 import common_pb2, host_service_pb2
from tests.helpers import next_message, rest_of
from tests.host.conftest import Host, results, run_request, start_process, stop_process, text_of

pytestmark = pytest.mark.asyncio(loop_scope="session")
REF = "plugin:langbot/reference/default"


@pytest.fixture(scope="module")
def reference_runner() -> Iterator[str]:
    proc, address = start_process(
        [
            sys.executable,
            "-m",
            "agentrunner",
            "serve",
            "agentrunner_runners.reference:ReferenceRunner",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
    )
    yield address
    stop_process(proc)


@pytest_asyncio.fixture(loop_scope="session")
async def ref_host(make_host, reference_runner: str) -> Host:
    return await make_host(
        {
            "listen": {"address": "127.0.0.1:0"},
            "limits": {"cancel_grace_seconds": 2.0},
            "runners": [{"id": "ref", "address": reference_runner}],
            "agents": [{"id": "ref", "runner_id": REF, "event_types": ["message.*"], "timeout_seconds": 20}],
            "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "ref"}}],
        }
    )


async def test_streamed_echo(ref_host: Host) -> None:
    updates = await ref_host.run("hello")
    kinds = [r.WhichOneof("payload") for r in results(updates)]
    assert kinds.count("message_delta") == 3 and kinds[-1] == "run_completed"
    assert (
        "".join(r.message_delta.text for r in results(updates) if r.HasField("message_delta"))
        == "echo: hello"
    )
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


async def test_non_streaming_delivery_gets_no_deltas(ref_host: Host) -> None:
    updates = await ref_host.run("hello", streaming=False)
    assert "message_delta" not in [r.WhichOneof("payload") for r in results(updates)]
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED


@pytest.mark.parametrize(
    ("text", "code"),
    [("fail", "runner.exception"), ("fail:controlled", "runner.error"), ("empty", "runner.empty_output")],
)
async def test_failures(ref_host: Host, text: str, code: str) -> None:
    updates = await ref_host.run(text)
    assert results(updates)[-1].run_failed.code == code
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_FAILED


@pytest.mark.parametrize("text", ["malformed:oversize", "malformed:unknown", "malformed:state"])
async def test_malformed_results_are_dropped_and_the_run_completes(ref_host: Host, text: str) -> None:
    updates = await ref_host.run(text, streaming=False)
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert results(updates)[-1].run_completed.message.content == f"echo: {text}"
    assert all(r.ByteSize() < 1 << 20 for r in results(updates))
    assert not any(r.HasField("state_updated") and r.state_updated.scope == 0 for r in results(updates))


async def test_cancel_reaches_the_reference_runner_over_control(ref_host: Host) -> None:
    call = ref_host.stub.Run(run_request("slow:50"), timeout=30)
    run_id = (await next_message(call)).accepted.run_id
    await call.read()
    await ref_host.stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="stop"), timeout=5)
    rest = await rest_of(call)
    failed = results(rest)[-1].run_failed
    assert failed.code == "cancelled" and "stop" in failed.message  # the runner's own terminal, not ours
    assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED
    assert "tick 49" not in text_of(rest)
