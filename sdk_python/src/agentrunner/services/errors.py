"""Failures of external services as `<provider>.<reason>` codes, and the redaction of secrets.

`ServiceError` is what a service runner raises; `ServiceRunner` turns it into one `run.failed` with
`code = "<provider>.<reason>"`, the right `retryable`, and `details.kind` from the SDK's failure-kind
vocabulary, so a client can act on the failure without knowing the provider. The helpers map what goes
wrong on the wire: an HTTP status (with `Retry-After` honoured in the message), a timeout, a refused or
dropped connection, invalid JSON, an error event inside a 200 stream, an empty answer.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from agentrunner.failures import failure_kind

__all__ = [
    "Redactor",
    "ServiceError",
    "from_http_status",
    "from_transport",
    "mentions_rate_limit",
    "parse_retry_after",
    "reported_failure",
]

#: reason -> failure kind (`details.kind`, a word of `agentrunner.failures.FailureKind`) and whether
#: retrying the run may succeed.
REASONS: dict[str, tuple[str, bool]] = {
    "config_invalid": ("config_invalid", False),
    "auth_error": ("auth_error", False),
    "not_found": ("http_error", False),
    "rate_limited": ("rate_limited", True),
    "timeout": ("timeout", True),
    "server_error": ("http_error", True),
    "http_error": ("http_error", False),
    "connection_failed": ("connection_error", True),
    "connection_lost": ("connection_error", True),
    "response_invalid": ("protocol_error", False),
    "api_error": ("api_error", False),
    "stream_error": ("stream_error_event", False),
    # the service ran the request and reports that its own run failed (a Dify workflow whose status is
    # `failed`, a Coze chat `chat.failed`, a Langflow flow whose component raised)
    "workflow_failed": ("api_error", False),
    "chat_failed": ("api_error", False),
    "flow_failed": ("api_error", False),
    "empty_response": ("empty_response", False),
    "input_error": ("input_invalid", False),
    "conversation_not_found": ("api_error", False),
    "cancelled": ("cancelled", False),
    "unexpected_error": ("internal_error", False),
}

_MAX_MESSAGE = 500

#: Wording of a rate limit inside a service's failure text or code: an HTTP 429 named in the text,
#: "rate limit" / "ratelimit" / "rate_limit", "request rate is too high", "too many requests", "too
#: frequent", "throttl…" (DashScope's `Throttling.*` codes), "LimitRequests" (DashScope's per-model
#: request limit), and the Chinese services' 频繁 ("too frequent") / 限流 ("throttled").
_RATE_LIMIT = re.compile(
    r"(?<![\w.])429(?![\w.])|rate[\s_-]?limit|rate is too high|too many requests|too frequent|throttl"
    r"|limit[\s_-]?requests|频繁|限流",
    re.I,
)
#: A used-up quota or an unpaid account is not a rate limit, even with a 429: retrying cannot succeed.
_QUOTA_EXHAUSTED = re.compile(r"insufficient[\s_-]?quota|exceeded your current quota|arrearage", re.I)


class ServiceError(Exception):
    """An external service failed; becomes `run.failed` with code `<provider>.<reason>`.

    `stale_id=True` marks "the stored external conversation id is unknown to the service": the runner
    drops it and retries the turn once with a fresh conversation. `retryable` defaults from the reason.
    """

    def __init__(
        self,
        provider: str,
        reason: str,
        message: str,
        *,
        retryable: bool | None = None,
        kind: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        stale_id: bool = False,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        default_kind, default_retryable = REASONS.get(reason, ("api_error", False))
        self.provider = provider
        self.reason = reason
        self.message = message
        self.retryable = default_retryable if retryable is None else retryable
        self.kind = failure_kind(kind or default_kind).value
        self.status = status
        self.retry_after = retry_after
        self.stale_id = stale_id
        self.details = dict(details or {})

    @property
    def code(self) -> str:
        """The run failure code, `<provider>.<reason>` (e.g. `dify.rate_limited`), as the host stores it."""
        return f"{self.provider}.{self.reason}"

    def failure_details(self) -> dict[str, Any]:
        """`run.failed.details`: kind, HTTP status and retry hint when known, plus extras."""
        out: dict[str, Any] = {"kind": self.kind, **self.details}
        if self.status is not None:
            out["http_status"] = self.status
        if self.retry_after is not None:
            out["retry_after_seconds"] = self.retry_after
        return out

    def __repr__(self) -> str:
        return f"ServiceError({self.code!r}, {self.message!r}, retryable={self.retryable})"


class Redactor:
    """Replaces secret values (API keys, JWT secrets, header values, tokens) with `***` in any text.

    Secrets shorter than 4 characters are ignored (they would redact ordinary words). Also replaces
    the value of any `Bearer` / `Basic` credential and of `api_key=`-style query parameters.
    """

    _PATTERNS = (
        re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
        re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|signature)=)[^&\s\"']+"),
    )

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted(
            {s for s in secrets if isinstance(s, str) and len(s) >= 4}, key=len, reverse=True
        )

    def add(self, *secrets: str) -> None:
        """Adds secret values to mask (values shorter than four characters are ignored: masking them would
        mangle ordinary text)."""
        self._secrets = sorted(
            {*self._secrets, *(s for s in secrets if isinstance(s, str) and len(s) >= 4)},
            key=len,
            reverse=True,
        )

    def __call__(self, text: str) -> str:
        """`text` with the known secrets, bearer/basic credentials and key/token query parameters replaced
        by `***`, so a service's error text can be shown without leaking credentials."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        text = self._PATTERNS[0].sub(lambda m: f"{m.group(1)} ***", text)
        return self._PATTERNS[1].sub(lambda m: f"{m.group(1)}***", text)


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), None when absent/invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    return max(0.0, round(seconds, 1))


def _body_message(body: bytes) -> str:
    """The service's own error text from an error body (JSON `message`/`error`/`msg`…), else the text."""
    text = body[:4096].decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text[:300]
    return find_message(data) or text[:300]


def find_message(data: Any) -> str:
    if isinstance(data, str):
        return data
    if not isinstance(data, Mapping):
        return ""
    for key in ("message", "msg", "error_message", "errorMsg", "error", "detail", "code"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, Mapping):
            inner = find_message(value)
            if inner:
                return inner
    return ""


def from_http_status(provider: str, status: int, headers: Mapping[str, str], body: bytes) -> ServiceError:
    """A non-success HTTP answer as a typed error (401/403 auth, 404, 408/429/5xx retryable)."""
    detail = _body_message(body)
    suffix = f": {detail}" if detail else ""
    retry_after = parse_retry_after(headers.get("retry-after"))
    if status in (401, 403):
        return ServiceError(
            provider, "auth_error", f"HTTP {status} (check the API key){suffix}", status=status
        )
    if status == 404:
        return ServiceError(provider, "not_found", f"HTTP 404 (check the URL and ids){suffix}", status=status)
    if status == 429:
        wait = f"; retry after {retry_after:g} s" if retry_after is not None else ""
        return ServiceError(
            provider,
            "rate_limited",
            f"HTTP 429 rate limited{wait}{suffix}",
            status=status,
            retry_after=retry_after,
        )
    if status == 408:
        return ServiceError(provider, "timeout", f"HTTP 408 request timeout{suffix}", status=status)
    if status >= 500:
        wait = f"; retry after {retry_after:g} s" if retry_after is not None else ""
        return ServiceError(
            provider, "server_error", f"HTTP {status}{wait}{suffix}", status=status, retry_after=retry_after
        )
    return ServiceError(provider, "http_error", f"HTTP {status}{suffix}", status=status)


def from_transport(provider: str, exc: httpx.TransportError, *, started: bool) -> ServiceError:
    """A transport failure: timeout, refused connection, or a connection lost (`started`: mid-body)."""
    if isinstance(exc, httpx.TimeoutException):
        what = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for data",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free connection",
        }.get(type(exc), "waiting")
        return ServiceError(provider, "timeout", f"timed out {what}")
    if isinstance(exc, httpx.ConnectError):
        return ServiceError(provider, "connection_failed", f"cannot connect: {_short(exc)}")
    if started or isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return ServiceError(
            provider, "connection_lost", f"the connection was lost mid-response: {_short(exc)}"
        )
    return ServiceError(provider, "connection_failed", f"transport error: {_short(exc)}")


def mentions_rate_limit(*texts: Any, status: int | None = None) -> bool:
    """Whether a service's failure (its message, code, an embedded HTTP `status`) names a rate limit
    (status 429 or `_RATE_LIMIT` wording), and not an exhausted quota (`_QUOTA_EXHAUSTED`)."""
    joined = " ".join(str(t) for t in texts if t is not None and t != "")
    if _QUOTA_EXHAUSTED.search(joined):
        return False
    return status == 429 or bool(_RATE_LIMIT.search(joined))


def reported_failure(
    provider: str,
    reason: str,
    message: str,
    *,
    code: Any = None,
    status: Any = None,
    details: Mapping[str, Any] | None = None,
) -> ServiceError:
    """A failure the service reports in a successful response (an error event mid-stream, a failed
    workflow / chat / flow in a 200 body), classified the same way wherever it arrives.

    It is `<provider>.<reason>` (not retryable), unless it embeds a rate limit: an HTTP status 429 in the
    event (`status`), or rate-limit wording in `message` or the service's `code` (`mentions_rate_limit`;
    an exhausted quota is not one) -> `<provider>.rate_limited`, retryable (a later attempt may pass),
    with `details.reported` = `reason`.
    """
    extra = dict(details or {})
    if code not in (None, ""):
        extra.setdefault("service_code", str(code))
    number = status if isinstance(status, int) and not isinstance(status, bool) else None
    if mentions_rate_limit(message, code, status=number):
        extra["reported"] = reason
        return ServiceError(provider, "rate_limited", message, status=number, details=extra)
    return ServiceError(provider, reason, message, status=number, details=extra)


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"
