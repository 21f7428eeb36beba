"""How a run ends: the `run.failed` codes the host sets, as ONE table, and the builders of terminal
results.

`FAILURES` is the single source of each host-set code's retryable flag and the run status it ends the
run with; `docs/protocol.md` §3 lists the same rows (a test checks the two agree). A runner's own
`run.failed` code ends its run `failed`, except the two codes with a status of their own (`cancelled`,
`deadline_exceeded`), whoever sets them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeAlias

import grpc
from google.protobuf import json_format, timestamp_pb2

from agentrunner.failures import HOST_CODE_KINDS
from agentrunner.v1 import common_pb2, host_service_pb2, result_pb2
from agentrunner_host.ports import RunRecord

RunStatus: TypeAlias = common_pb2.RunStatus.ValueType


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """One host-set `run.failed` code."""

    code: str
    retryable: bool
    #: the run's final status when a run ends with this code
    status: RunStatus
    #: the message used when the caller gives none
    message: str


def _row(
    code: str, retryable: bool, message: str, status: RunStatus = common_pb2.RUN_STATUS_FAILED
) -> Failure:
    return Failure(code, retryable, status, message)


FAILURES: dict[str, Failure] = {
    f.code: f
    for f in (
        _row("runner.config_invalid", False, "the agent's runner config does not fit the manifest"),
        _row("runner.no_terminal", True, "the runner stream ended without a terminal result"),
        _row("runner.empty_output", False, "the runner completed without any message"),
        _row("runner.unavailable", True, "the runner is not available"),
        _row("runner.stream_broken", True, "the runner stream broke before a terminal result"),
        _row("runner.protocol_error", False, "the runner sent a message that is not a RunResponse"),
        _row("deadline_exceeded", True, "the run deadline passed", common_pb2.RUN_STATUS_TIMEOUT),
        _row("cancelled", False, "cancelled", common_pb2.RUN_STATUS_CANCELLED),
        _row("host.store_error", True, "the host could not record this run's facts"),
        _row("host.error", True, "the host failed while running this run"),
        # written by the next start of the host instance that ran it (`FactStores.mark_interrupted`)
        _row(
            "host.restarted",
            True,
            "the host stopped while the run was open",
            common_pb2.RUN_STATUS_INTERRUPTED,
        ),
    )
}


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def failed(
    run_id: str, code: str, message: str = "", sequence: int = 0, **details: Any
) -> result_pb2.RunResult:
    """A `run.failed` result with a host-set code of `FAILURES` (retryable from the table); `sequence` 0
    is numbered when the run records it."""
    row = FAILURES[code]
    result = result_pb2.RunResult(run_id=run_id, sequence=sequence, timestamp=_now())
    result.run_failed.code = code
    result.run_failed.message = message or row.message
    result.run_failed.retryable = row.retryable
    kind = HOST_CODE_KINDS.get(code)
    if kind is not None:
        details.setdefault("kind", kind.value)
    if details:
        result.run_failed.details.update(details)
    return result


def status_of(terminal: result_pb2.RunResult) -> tuple[RunStatus, str]:
    """The run status and reason a terminal result ends its run with."""
    if terminal.HasField("run_completed"):
        return common_pb2.RUN_STATUS_COMPLETED, terminal.run_completed.finish_reason or "stop"
    code = terminal.run_failed.code
    row = FAILURES.get(code)
    return (row.status if row is not None else common_pb2.RUN_STATUS_FAILED), code


def empty_output(completed: result_pb2.RunResult) -> result_pb2.RunResult:
    """`run.completed` without any output becomes `runner.empty_output` (grammar rule 7), same sequence
    and usage."""
    result = failed(completed.run_id, "runner.empty_output", sequence=completed.sequence)
    result.usage.CopyFrom(completed.usage)
    return result


def from_call_error(
    run_id: str,
    runner_id: str,
    code: grpc.StatusCode,
    details: str,
    *,
    received_any: bool,
    cancel_reason: str,
) -> result_pb2.RunResult:
    """The terminal result of a runner call that ended with a gRPC error before any terminal result."""
    if code == grpc.StatusCode.CANCELLED and cancel_reason:
        return failed(run_id, "cancelled", cancel_reason)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return failed(run_id, "deadline_exceeded")
    if code == grpc.StatusCode.UNAVAILABLE and not received_any:
        return failed(run_id, "runner.unavailable", f"runner {runner_id} is unreachable")
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and "deserializ" in details.lower():
        return failed(run_id, "runner.protocol_error")
    return failed(
        run_id,
        "runner.stream_broken",
        f"the runner stream broke ({code.name}) before a terminal result",
        grpcCode=code.name,
    )


def usage_of(terminal: result_pb2.RunResult | None) -> dict[str, Any] | None:
    """A terminal result's usage as the ledger stores it (None without one)."""
    if terminal is None or not terminal.HasField("usage"):
        return None
    return json_format.MessageToDict(terminal.usage)


def finished(
    run_id: str,
    status: RunStatus,
    reason: str,
    record: RunRecord | None,
    terminal: result_pb2.RunResult | None,
) -> host_service_pb2.RunFinished:
    """A run's `finished` item: the status and reason as stored (`record`; as decided when the ledger
    could not be written) and the terminal result's usage."""
    out = host_service_pb2.RunFinished(
        run_id=run_id,
        status=record.status if record is not None else status,
        reason=record.status_reason if record is not None else reason,
    )
    if terminal is not None and terminal.HasField("usage"):
        out.usage.CopyFrom(terminal.usage)
    return out


def terminal_status_name(status: int) -> str:
    """`RUN_STATUS_COMPLETED` -> `completed` (metrics labels, logs, errors)."""
    return STATUS_NAMES.get(status, str(status))


STATUS_NAMES: dict[int, str] = {
    v: common_pb2.RunStatus.Name(v).removeprefix("RUN_STATUS_").lower() for v in common_pb2.RunStatus.values()
}
