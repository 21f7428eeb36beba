"""Pure checks over what a conformance kit recorded: result streams, proxy calls, rich error statuses.

Each function returns a list of problems (empty = the rule holds), phrased for the table's detail column.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from agentrunner.errors import DOMAIN
from agentrunner.protocol import RUN_TOKEN_HEADER
from agentrunner.testing import ProxyCall, RunOutcome
from agentrunner.v1 import result_pb2

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
#: A call arriving this long after the run's terminal result was read counts as a call after the end.
AFTER_END_SLACK = 0.25
#: How much later than the run deadline a proxy call's own deadline may be (clock and scheduling slack).
DEADLINE_SLACK = 0.5


def short(items: Sequence[str], limit: int = 3) -> list[str]:
    """At most `limit` problems, plus a count of the rest."""
    if len(items) <= limit:
        return list(items)
    return [*items[:limit], f"... and {len(items) - limit} more"]


def error_info(error: grpc.RpcError) -> tuple[grpc.StatusCode, error_details_pb2.ErrorInfo | None, int]:
    """The status code, our domain's ErrorInfo (if any) and how many ErrorInfo details the status had."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    status: status_pb2.Status | None = rpc_status.from_call(error)  # type: ignore[arg-type]
    found: list[error_details_pb2.ErrorInfo] = []
    for detail in status.details if status is not None else []:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info):
            found.append(info)
    ours = next((i for i in found if i.domain == DOMAIN), None)
    return code, ours, len(found)


def rich_error(
    error: grpc.RpcError | None, code: grpc.StatusCode, reason: str | tuple[str, ...]
) -> list[str]:
    """An error status is `code` with exactly one ErrorInfo of our domain, `reason` and `retryable`."""
    reasons = (reason,) if isinstance(reason, str) else reason
    reason = " or ".join(reasons)
    if error is None:
        return [f"expected {code.name} with ErrorInfo {reason}, the call succeeded"]
    got, info, count = error_info(error)
    problems = []
    if got != code:
        problems.append(f"status {got.name}, expected {code.name}")
    if info is None:
        problems.append(f"no google.rpc.ErrorInfo with domain {DOMAIN} in grpc-status-details-bin")
        return problems
    if count != 1:
        problems.append(f"{count} ErrorInfo details, expected exactly one")
    if info.reason not in reasons:
        problems.append(f"ErrorInfo.reason {info.reason!r}, expected {reason}")
    if info.metadata.get("retryable") not in ("true", "false"):
        problems.append("ErrorInfo.metadata['retryable'] is not 'true' or 'false'")
    return problems


def grammar(outcome: RunOutcome) -> list[str]:
    """The stream grammar, and that the stream ended with a result rather than a gRPC error."""
    problems = list(outcome.grammar_errors)
    if outcome.code != grpc.StatusCode.OK:
        problems.insert(0, f"the Run call ended with gRPC {outcome.code.name} instead of a terminal result")
    return short(problems)


def ended_well(outcome: RunOutcome) -> list[str]:
    """One line at most: the stream ended with a terminal result and kept the grammar."""
    problems = grammar(outcome)
    if not problems:
        return []
    more = len(outcome.grammar_errors) + (outcome.code != grpc.StatusCode.OK) - 1
    return [problems[0] + (f" (+{more} more grammar problems)" if more > 0 else "")]


def terminal_code(outcome: RunOutcome) -> str | None:
    """The code of the run's `run.failed`, or None when it did not fail (for the table's detail)."""
    failure = outcome.failure
    return failure.code if failure is not None else None


def streaming_capability(outcome: RunOutcome, streaming: bool) -> list[str]:
    """A runner whose manifest does not declare streaming sends no `message.delta` (a host may not
    render deltas for it)."""
    if streaming:
        return []
    deltas = len(outcome.of_type("message.delta"))
    return [f"{deltas} message.delta results, but the manifest does not declare streaming"] if deltas else []


def token_etiquette(calls: Iterable[ProxyCall], token: str, run_id: str) -> list[str]:
    """Every proxy call carries the run's token, and the Control stream's hello names the run and token."""
    problems = []
    for call in calls:
        sent = call.metadata.get(RUN_TOKEN_HEADER, "")
        if sent != token:
            problems.append(f"{call.method} without the run's {RUN_TOKEN_HEADER} metadata")
        if call.method == "Control":
            hello = call.request
            if getattr(hello, "run_id", "") != run_id or getattr(hello, "run_token", "") != token:
                problems.append("ControlHello does not carry the run's run_id and run_token")
    return problems


def trace_etiquette(calls: Iterable[ProxyCall], trace_id: str) -> list[str]:
    """Every proxy call carries a W3C `traceparent` with the run's trace id, so the host can join its trace."""
    problems = []
    for call in calls:
        value = call.metadata.get("traceparent", "")
        match = TRACEPARENT.match(value)
        if match is None:
            problems.append(f"{call.method} without a W3C traceparent (got {value!r})")
        elif match.group(1) != trace_id:
            problems.append(
                f"{call.method}: traceparent trace id {match.group(1)} is not the run's {trace_id}"
            )
    return problems


def deadline_etiquette(calls: Iterable[ProxyCall], deadline_mono: float) -> list[str]:
    """Every call but the Control stream carries a gRPC deadline no later than the run deadline."""
    problems = []
    for call in calls:
        if call.method == "Control":
            continue
        if call.time_remaining is None:
            problems.append(f"{call.method} without a gRPC deadline")
            continue
        left = deadline_mono - call.received_at
        if call.time_remaining > left + DEADLINE_SLACK:
            problems.append(
                f"{call.method} deadline {call.time_remaining:.1f}s exceeds the run's remaining {left:.1f}s"
            )
    return problems


def calls_after(calls: Iterable[ProxyCall], end: float | None) -> list[str]:
    """Proxy calls made after the run's terminal result (beyond a small slack): a runner must stop."""
    if end is None:
        return []
    return [
        f"{c.method} {c.received_at - end:.2f}s after the run ended"
        for c in calls
        if c.method != "Control" and c.received_at > end + AFTER_END_SLACK
    ]


def repeats(calls: Iterable[ProxyCall]) -> dict[tuple[str, bytes], list[ProxyCall]]:
    """Calls grouped by method and exact request (a repeated group is a retry)."""
    groups: dict[tuple[str, bytes], list[ProxyCall]] = defaultdict(list)
    for call in calls:
        if call.method != "Control":
            groups[(call.method, call.request.SerializeToString(deterministic=True))].append(call)
    return groups


def retry_etiquette(
    calls: Sequence[ProxyCall], *, retryable: bool, min_gap: float, max_attempts: int
) -> list[str]:
    """How a runner reacts to an error answer: no retry when not retryable, else spaced and bounded."""
    problems = []
    for (method, _), group in repeats(calls).items():
        if len(group) == 1:
            continue
        if not retryable:
            problems.append(f"{method} retried {len(group) - 1} time(s) after a non-retryable error")
            continue
        if len(group) > max_attempts:
            problems.append(f"{method} tried {len(group)} times (at most {max_attempts})")
        gaps = [b.received_at - a.received_at for a, b in itertools.pairwise(group)]
        if gaps and min(gaps) < min_gap:
            problems.append(f"{method} retried after {min(gaps):.2f}s (wait at least {min_gap:.2f}s)")
    return problems


def is_failed(result: result_pb2.RunResult | None, code: str) -> bool:
    """Whether `result` is a `run.failed` with `code`."""
    return (
        result is not None and result.WhichOneof("payload") == "run_failed" and result.run_failed.code == code
    )
