"""`run.failed` codes: one table (`run/outcomes.py`), the docs agree with it, and a runner call's gRPC
error maps to the code, retryable flag and run status a client sees."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.run import outcomes

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
STATUS = {
    "failed": common_pb2.RUN_STATUS_FAILED,
    "timeout": common_pb2.RUN_STATUS_TIMEOUT,
    "cancelled": common_pb2.RUN_STATUS_CANCELLED,
    "interrupted": common_pb2.RUN_STATUS_INTERRUPTED,
}


def _documented() -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in DOCS.read_text().splitlines():
        m = re.match(r"\| `([a-z_.]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip(), m.group(4).strip())
    return rows


def test_docs_list_every_host_code_with_the_tables_retryable_flag_and_status() -> None:
    documented = _documented()
    host_rows = {code for code, (by, _, _) in documented.items() if "host" in by}
    assert host_rows == set(outcomes.FAILURES)
    for code, failure in outcomes.FAILURES.items():
        _, retryable, status = documented[code]
        assert retryable == ("yes" if failure.retryable else "no"), code
        assert STATUS[status] == failure.status, code


@pytest.mark.parametrize("code", sorted(outcomes.FAILURES))
def test_a_failure_carries_its_tables_flag_and_ends_the_run_with_its_status(code: str) -> None:
    result = outcomes.failed("run_1", code, sequence=3)
    assert (result.run_id, result.sequence, result.run_failed.code) == ("run_1", 3, code)
    assert result.run_failed.retryable is outcomes.FAILURES[code].retryable
    assert result.run_failed.message and result.HasField("timestamp")
    assert outcomes.status_of(result) == (outcomes.FAILURES[code].status, code)


def test_a_runners_own_code_fails_the_run_and_completion_keeps_its_finish_reason() -> None:
    own = result_pb2.RunResult(run_failed=result_pb2.RunFailed(code="runner.all_models_failed"))
    assert outcomes.status_of(own) == (common_pb2.RUN_STATUS_FAILED, "runner.all_models_failed")
    done = result_pb2.RunResult(run_completed=result_pb2.RunCompleted(finish_reason="length"))
    assert outcomes.status_of(done) == (common_pb2.RUN_STATUS_COMPLETED, "length")
    assert outcomes.status_of(result_pb2.RunResult(run_completed=result_pb2.RunCompleted())) == (
        common_pb2.RUN_STATUS_COMPLETED,
        "stop",
    )


@pytest.mark.parametrize(
    ("code", "details", "received_any", "cancel_reason", "expected"),
    [
        (grpc.StatusCode.CANCELLED, "", True, "stop now", "cancelled"),
        (grpc.StatusCode.CANCELLED, "", True, "", "runner.stream_broken"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", False, "", "deadline_exceeded"),
        (grpc.StatusCode.UNAVAILABLE, "", False, "", "runner.unavailable"),
        (grpc.StatusCode.UNAVAILABLE, "", True, "", "runner.stream_broken"),
        (grpc.StatusCode.INTERNAL, "Exception deserializing response!", True, "", "runner.protocol_error"),
        (grpc.StatusCode.UNKNOWN, "could not deserialize", False, "", "runner.protocol_error"),
        (grpc.StatusCode.INTERNAL, "boom", True, "", "runner.stream_broken"),
    ],
)
def test_a_runner_call_error_maps_to_one_code(
    code: grpc.StatusCode, details: str, received_any: bool, cancel_reason: str, expected: str
) -> None:
    result = outcomes.from_call_error(
        "run_1", "plugin:x/y/z", code, details, received_any=received_any, cancel_reason=cancel_reason
    )
    assert result.run_failed.code == expected
    assert result.run_failed.retryable is outcomes.FAILURES[expected].retryable
    if expected == "cancelled":
        assert result.run_failed.message == cancel_reason
    if expected == "runner.stream_broken":
        assert result.run_failed.details["grpcCode"] == code.name


def test_an_empty_completion_becomes_empty_output_with_its_sequence_and_usage() -> None:
    done = result_pb2.RunResult(run_id="run_1", sequence=7, run_completed=result_pb2.RunCompleted())
    done.usage.prompt_tokens = 5
    failed = outcomes.empty_output(done)
    assert failed.run_failed.code == "runner.empty_output" and not failed.run_failed.retryable
    assert (failed.sequence, failed.usage.prompt_tokens) == (7, 5)
