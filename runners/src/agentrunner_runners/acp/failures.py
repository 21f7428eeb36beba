"""What a failed ACP turn means for the user: typed, retryable or not.

An agent reports a model-API failure as a JSON-RPC error of `session/prompt` (code -32000 "auth
required", or an internal error whose message names the upstream status), or, `codex-acp`, as an
ordinary answer (nothing to classify there). `classify` reads the message: an authentication problem
(`acp.auth_error`), a rate limit (`acp.rate_limited`, retryable), an upstream server error
(`acp.upstream_error`, retryable), else the caller's default.

`stop_failure` maps the `stopReason`s that are not a normal end: `max_tokens` (`acp.max_tokens`),
`max_turn_requests` (`acp.max_turn_requests`), `refusal` (`acp.refusal`), and `cancelled` without a
cancel of ours (`acp.agent_cancelled`).
"""

from __future__ import annotations

import functools
import re

from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness.turns import harness_failure

failed = functools.partial(harness_failure, "acp")
AUTH_REQUIRED = -32000

_RATE = re.compile(r"\b429\b|rate.?limit|too.?many.?requests|overloaded|quota", re.I)
_AUTH = re.compile(r"\b(401|403)\b|unauthori[sz]ed|authentication|invalid.{0,20}api.?key|not logged in", re.I)
_UPSTREAM = re.compile(
    r"\b(?:status|http|api error)\s*:?\s*5\d\d\b|internal server error|bad gateway|service unavailable", re.I
)


def classify(message: str, default: RunnerFailure, *, code: int | None = None) -> RunnerFailure:
    """The failure for the agent's (redacted) error `message` and JSON-RPC `code` (module docstring)."""
    text = message.strip()[:1000]
    if code == AUTH_REQUIRED or _AUTH.search(text):
        return failed("auth_error", f"the agent could not authenticate: {text}", FailureKind.AUTH_ERROR)
    if _RATE.search(text):
        return failed(
            "rate_limited",
            f"the model API is rate limiting or overloaded: {text}",
            FailureKind.RATE_LIMITED,
            retryable=True,
        )
    if _UPSTREAM.search(text):
        return failed(
            "upstream_error",
            f"the model API failed: {text}; try again later",
            FailureKind.HTTP_ERROR,
            retryable=True,
        )
    return default


def stop_failure(stop_reason: str, label: str) -> RunnerFailure | None:
    """The failure of a turn that ended with `stop_reason`, or None (`end_turn`)."""
    if stop_reason == "end_turn":
        return None
    if stop_reason == "max_tokens":
        return failed("max_tokens", f"{label} hit its output token limit", FailureKind.TURN_FAILED)
    if stop_reason == "max_turn_requests":
        return failed(
            "max_turn_requests",
            f"{label} hit its limit of model requests for one turn",
            FailureKind.MAX_TURNS,
        )
    if stop_reason == "refusal":
        return failed("refusal", f"{label} refused to continue", FailureKind.TURN_FAILED)
    if stop_reason == "cancelled":
        return failed("agent_cancelled", f"{label} cancelled the turn on its own", FailureKind.INTERRUPTED)
    return failed(
        "unknown_stop_reason",
        f"{label} ended the turn with stopReason {stop_reason!r}",
        FailureKind.PROTOCOL_ERROR,
    )
