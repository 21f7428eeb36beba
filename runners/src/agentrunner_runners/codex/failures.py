"""What a failed Codex turn means for the user: typed, retryable or not, in words without Python reprs.

Codex reports a model-API failure two ways:
- `app-server`: `turn/completed` (status `failed`) and `error` notifications carry `codexErrorInfo`
  (public `codex-rs/app-server-protocol`: a string such as `internalServerError`, `unauthorized`,
  `usageLimitExceeded`, `contextWindowExceeded`, or an object such as
  `{"httpConnectionFailed": {"httpStatusCode": 401}}` / `responseStreamDisconnected` /
  `responseTooManyFailedAttempts` with the upstream HTTP status);
- `exec`: only text (`turn.failed {error{message}}`, "Reconnecting... 1/5 (unexpected status 401
  Unauthorized: ...)", and for an upstream 5xx Codex's own "We're currently experiencing high demand").

`classify` turns either into one `RunnerFailure`: an authentication problem (`codex.auth_error`, not
retryable), a rate limit or overload (`codex.rate_limited`, retryable), an upstream server error
(`codex.upstream_error`, retryable), a connection failure (`codex.connection_error`, retryable), or the
caller's default. `fatal_retry` tells a retry that cannot help (a 401 / 403 being retried), so the
runner can stop at the first one instead of waiting for Codex's five reconnects.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness.turns import harness_failure

_failed = functools.partial(harness_failure, "codex")

_RATE = re.compile(r"\b429\b|rate.?limit|too.?many.?requests|usage.?limit|overloaded|quota", re.I)
_AUTH = re.compile(
    r"\b(401|403)\b|unauthori[sz]ed|invalid api key|incorrect api key|not logged in|codex login", re.I
)
_UPSTREAM = re.compile(
    r"\b(?:status|http)\s*:?\s*5\d\d\b|internal server error|high demand|temporar(?:il)?y unavailable"
    r"|bad gateway|service unavailable",
    re.I,
)
_STATUS_INFO = (
    "httpConnectionFailed",
    "responseStreamConnectionFailed",
    "responseStreamDisconnected",
    "responseTooManyFailedAttempts",
)
_RATE_INFO = frozenset({"rateLimitExceeded", "usageLimitExceeded", "serverOverloaded"})
_UPSTREAM_INFO = frozenset({"internalServerError", "flexUnavailable", "policyCapacityUnavailable"})


def info_name(info: Any) -> str:
    """The `codexErrorInfo` variant: `internalServerError`, `httpConnectionFailed`, ... ("" for none)."""
    if isinstance(info, str):
        return info
    if isinstance(info, dict) and len(info) == 1:
        return str(next(iter(info)))
    return ""


def http_status(info: Any) -> int | None:
    """The upstream HTTP status a `codexErrorInfo` object carries, if any."""
    if isinstance(info, dict):
        for value in info.values():
            if isinstance(value, dict) and isinstance(value.get("httpStatusCode"), int):
                return int(value["httpStatusCode"])
    return None


def describe(info: Any) -> str:
    """`codexErrorInfo` in words: "HTTP 401 (httpConnectionFailed)", "internalServerError", ""."""
    name, status = info_name(info), http_status(info)
    if status is not None:
        return f"HTTP {status} ({name})" if name else f"HTTP {status}"
    return name


def fatal_retry(message: str, info: Any = None) -> bool:
    """Whether a failure Codex is about to retry cannot succeed on retry (the credentials are refused)."""
    status = http_status(info)
    return status in (401, 403) or info_name(info) == "unauthorized" or bool(_AUTH.search(message))


def classify(message: str, default: RunnerFailure, info: Any = None) -> RunnerFailure:
    """The failure for Codex's `message` (already redacted) and `codexErrorInfo` (module docstring)."""
    text = message.strip()[:1000]
    name, status = info_name(info), http_status(info)
    said = describe(info)
    details: dict[str, Any] = {}
    if name:
        details["codex_error"] = name
    if status is not None:
        details["http_status"] = status
    suffix = f" ({said})" if said and said not in text else ""
    if name == "unauthorized" or status in (401, 403) or _AUTH.search(text):
        return _failed(
            "auth_error",
            f"Codex could not authenticate with the model API{suffix}: {text}",
            FailureKind.AUTH_ERROR,
            **details,
        )
    if name in _RATE_INFO or status == 429 or _RATE.search(text):
        return _failed(
            "rate_limited",
            f"the model API is rate limiting or overloaded{suffix}: {text}",
            FailureKind.RATE_LIMITED,
            retryable=True,
            **details,
        )
    if name in _UPSTREAM_INFO or (status is not None and status >= 500) or _UPSTREAM.search(text):
        return _failed(
            "upstream_error",
            f"the model API failed{suffix}: {text}; try again later",
            FailureKind.HTTP_ERROR,
            retryable=True,
            **details,
        )
    if name in _STATUS_INFO and status is None:
        return _failed(
            "connection_error",
            f"Codex could not reach the model API ({name}): {text}",
            FailureKind.CONNECTION_ERROR,
            retryable=True,
            **details,
        )
    if details:
        default.details = {**(default.details or {}), **details}
        if suffix and suffix not in default.message:
            default.message += suffix
    return default
