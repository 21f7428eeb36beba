"""What a Claude Code turn's end means: a typed failure from its `result` line or its retry lines, a
rejected `--resume`, and the run's own cost out of the session's cumulative totals.

Failures (README, *Failure codes*): the `result` line's `api_error_status` (Claude Code 2.1 reports
the HTTP status of the request that failed) decides first, its text second: 401/403 → `auth_error`,
429/529 → `rate_limited` (retryable), 5xx → `http_error` (retryable), no status and a connection
error (`ECONNREFUSED`, ...) → `connection_error` (retryable), `error_during_execution` →
`execution_error`, anything else → `api_error`. A 401/403 in an `api_retry` line ends the turn at
once (`auth_failure`): Claude Code would otherwise retry a refused key for minutes.

Cost: after `--resume`, the `result` line's `total_cost_usd` and `duration_api_ms` are the session's
totals so far, not the run's. The runner keeps the totals it last saw in conversation state
(`TOTALS_KEY`, `{session_id, total_cost_usd, duration_api_ms}`) and reports the difference as the
run's `total_cost_usd` / `duration_api_ms`, with the totals as `session_total_cost_usd` /
`session_duration_api_ms`. A new session starts from zero. A resumed session without stored totals
(state from before this accounting) takes the cost from the line's `model_usage_since_last_result`
when present, else leaves the run's cost unset; unknown is not zero.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness.turns import harness_failure

TOTALS_KEY = "external.claude_code_session_totals"
CUMULATIVE = ("total_cost_usd", "duration_api_ms")
_RESUME_REJECTED = re.compile(
    r"no conversation found|session .*not found|invalid session|unknown session", re.I
)
_RATE = re.compile(r"\b(429|529)\b|overloaded|rate.?limit", re.I)
_AUTH = re.compile(r"\b(401|403)\b|invalid api key|authentication|not logged in|/login|unauthorized", re.I)
_CONNECTION = re.compile(
    r"ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|connection (?:refused|error|reset)|socket hang up",
    re.I,
)

failed = functools.partial(harness_failure, "claude_code")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def classify(result: dict[str, Any], message: str) -> RunnerFailure:
    """The failure of an `is_error` / `error_*` result line (module docstring)."""
    excerpt = message[:1000]
    status = result.get("api_error_status")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    detail: dict[str, Any] = {"status": status} if status is not None else {}
    if status in (401, 403) or (status is None and _AUTH.search(message)):
        return failed(
            "auth_error", f"Claude Code could not authenticate: {excerpt}", FailureKind.AUTH_ERROR, **detail
        )
    if status in (429, 529) or (status is None and _RATE.search(message)):
        return failed(
            "api_error",
            f"the model API is overloaded or rate limiting: {excerpt}",
            FailureKind.RATE_LIMITED,
            retryable=True,
            **detail,
        )
    if status is not None and status >= 500:
        return failed(
            "api_error",
            f"the model API failed (HTTP {status}); try again: {excerpt}",
            FailureKind.HTTP_ERROR,
            retryable=True,
            **detail,
        )
    if status is None and _CONNECTION.search(message):
        return failed(
            "api_error",
            f"Claude Code could not reach the model API; try again: {excerpt}",
            FailureKind.CONNECTION_ERROR,
            retryable=True,
        )
    if str(result.get("subtype") or "") == "error_during_execution":
        return failed(
            "execution_error", f"Claude Code failed during execution: {excerpt}", FailureKind.TURN_FAILED
        )
    return failed("api_error", f"Claude Code reported an error: {excerpt}", FailureKind.API_ERROR, **detail)


def auth_failure(line: dict[str, Any]) -> RunnerFailure:
    """The failure of an `api_retry` line reporting 401/403: the credentials were refused."""
    status = line.get("error_status")
    reason = str(line.get("error") or "refused")
    return failed(
        "auth_error",
        f"Claude Code could not authenticate with the model API (HTTP {status}, {reason}); "
        "check ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN",
        FailureKind.AUTH_ERROR,
        status=status,
    )


def resume_rejected(result: dict[str, Any] | None, stderr: str) -> bool:
    """Whether Claude Code refused `--resume` because the session does not exist (it prints an
    `is_error` result line with "No conversation found with session ID ..." and exits 1)."""
    texts = [stderr]
    if result is not None and result.get("is_error"):
        texts += [str(e) for e in result.get("errors") or []]
        texts.append(str(result.get("result") or ""))
    return any(_RESUME_REJECTED.search(text) for text in texts)


@dataclasses.dataclass(slots=True)
class Totals:
    """A session's cumulative `total_cost_usd` / `duration_api_ms` as last reported."""

    session_id: str
    values: dict[str, float]

    @classmethod
    def stored(cls, value: Any) -> Totals | None:
        if not isinstance(value, dict) or not isinstance(value.get("session_id"), str):
            return None
        return cls(value["session_id"], {k: float(value[k]) for k in CUMULATIVE if _number(value.get(k))})

    def to_state(self) -> dict[str, Any]:
        return {"session_id": self.session_id, **self.values}


def run_cost(
    result: dict[str, Any], before: Totals | None, session_id: str, *, fresh: bool
) -> tuple[dict[str, float], Totals]:
    """This run's cost and API time (`extra` of its usage) and the session's new totals."""
    reported = {k: float(result[k]) for k in CUMULATIVE if _number(result.get(k))}
    extra = {f"session_{k}": v for k, v in reported.items()}
    base: dict[str, float] | None = None
    if fresh:
        base = {}
    elif before is not None and before.session_id == session_id:
        base = before.values
    for key, total in reported.items():
        if base is not None:
            previous = base.get(key, 0.0)
            extra[key] = round(total - previous, 10) if total >= previous else total
    if base is None:
        since = result.get("model_usage_since_last_result")
        costs = (
            [m.get("costUSD") for m in since.values() if isinstance(m, dict)]
            if isinstance(since, dict)
            else []
        )
        numbers = [float(c) for c in costs if isinstance(c, int | float) and not isinstance(c, bool)]
        if costs and len(numbers) == len(costs):
            extra["total_cost_usd"] = round(sum(numbers), 10)
    return extra, Totals(session_id, reported)
