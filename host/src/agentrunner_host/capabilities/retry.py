"""Retries of provider calls (chat, streaming before the first token, embeddings, rerank).

The policy is the official `openai` package's, made explicit and bounded: 408, 409, 429 and 5xx answers,
dropped connections and timeouts are retried with exponential backoff and jitter; `retry-after-ms` /
`Retry-After` (seconds or an HTTP date) replace the backoff when the provider sends them, and
`x-should-retry` overrides the status. Unlike the package, every wait is clipped: no retry starts if its
wait would end past the run's deadline or past the call's `max_wait`, and each provider (base URL) has a
retry budget, the token bucket of gRPC's retry throttling (A6): every failed attempt costs a token,
every success gives back `budget_ratio`, and retries stop while half the bucket or less is left, so a
provider that is down is not hammered by every run at once. When retries end, the caller gets the last
attempt's typed error with the delay the provider asked for (or the backoff that would have come next)
as `retry_delay`, sent to runners as `google.rpc.RetryInfo`.

Each attempt is a child span of the call's span (`<call span name>/attempt`): its number, the delay
honoured before it and where that delay came from (the provider's Retry-After or the backoff), and,
when it failed, the ErrorInfo reason, the HTTP status and the Retry-After the provider sent. Never the
error text, a header or the request: provider messages may echo what the host sent.

`tenacity` runs the loop (imported at the first call, like the tracing helpers: the config types here
are imported by every process that reads a host config); this module supplies the wait, stop and
bookkeeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field

from agentrunner.errors import AgentRunnerError

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from tenacity import RetryCallState

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: Statuses the `openai` package retries (besides 5xx).
RETRY_STATUSES = frozenset({408, 409, 429})


class RetryConfig(BaseModel):
    """Retry policy of one model provider entry (`models[].retry` in the host config)."""

    model_config = ConfigDict(extra="forbid")

    #: attempts per call, the first included (the `openai` package's default `max_retries=2` is 3)
    max_attempts: int = Field(default=3, ge=1, le=20)
    #: first backoff in seconds; doubled (`multiplier`) per retry up to `max_backoff`, minus 0-25 % jitter
    initial_backoff: float = Field(default=0.5, ge=0)
    max_backoff: float = Field(default=8.0, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    #: the most one call waits between its attempts in total; a longer Retry-After fails the call at once
    max_wait: float = Field(default=60.0, ge=0)
    #: the provider's retry budget (token bucket shared by every call to the same base URL)
    budget_tokens: float = Field(default=10.0, gt=0)
    budget_ratio: float = Field(default=0.1, ge=0)


class RetryBudget:
    """gRPC-style retry throttling for one provider: retries are allowed while more than half the
    tokens are left; failures cost one, successes earn `ratio` back."""

    def __init__(self, max_tokens: float, ratio: float) -> None:
        self.max_tokens = max_tokens
        self.ratio = ratio
        self.tokens = max_tokens

    def failed(self) -> None:
        self.tokens = max(self.tokens - 1.0, 0.0)

    def succeeded(self) -> None:
        self.tokens = min(self.tokens + self.ratio, self.max_tokens)

    def allows_retry(self) -> bool:
        return self.tokens > self.max_tokens / 2


class Transient(Exception):
    """A failed attempt the policy may retry: the typed error the caller gets if no retry follows, and
    the delay the provider asked for, if any."""

    def __init__(self, error: AgentRunnerError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms`, else `Retry-After` (seconds or an HTTP date), else None."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if seconds == seconds and seconds >= 0:  # not NaN
            return seconds
    value = headers.get("retry-after")
    if value:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(parsed.timestamp() - time.time(), 0.0)
    return None


def should_retry_status(status: int, headers: Mapping[str, str]) -> bool:
    """The `openai` package's rule: `x-should-retry` wins, else 408/409/429/5xx."""
    override = headers.get("x-should-retry")
    if override in ("true", "false"):
        return override == "true"
    return status in RETRY_STATUSES or status >= 500


@dataclasses.dataclass(slots=True)
class CallStats:
    """What one call's retries did (tests and logs read it)."""

    attempts: int = 0
    waits: list[float] = dataclasses.field(default_factory=list)
    #: where each wait came from: "retry-after" (the provider asked) or "backoff"
    wait_sources: list[str] = dataclasses.field(default_factory=list)


class Retrier:
    """Runs provider calls under one provider's policy and budget."""

    def __init__(self, config: RetryConfig, budget: RetryBudget, what: str) -> None:
        self.config = config
        self.budget = budget
        self.what = what

    def backoff(self, retry_number: int) -> float:
        """The jittered exponential backoff before retry `retry_number` (1-based)."""
        c = self.config
        base = min(c.initial_backoff * c.multiplier ** (retry_number - 1), c.max_backoff)
        return base * (1.0 - 0.25 * random.random())

    async def call(
        self,
        attempt: Callable[[float | None], Awaitable[T]],
        *,
        deadline: float | None,
        stats: CallStats | None = None,
        span: Span | None = None,
        span_name: str = "agentrunner.provider",
    ) -> T:
        """`attempt(time_left)` until it returns, raises a non-`Transient` error, or the policy stops;
        `deadline` is a `time.monotonic()` instant (None: unbounded). A `Transient` that ends the retries
        is raised as its typed error with `retry_delay` set. Attempts are spans `<span_name>/attempt`,
        children of `span` (the call's; the current one when None), which gets the attempt count."""
        from tenacity import AsyncRetrying, retry_if_exception_type

        run = _Attempts(self, attempt, deadline, stats if stats is not None else CallStats(), span, span_name)
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Transient),
            wait=run.wait,
            stop=run.stop,
            sleep=run.sleep,
            reraise=True,
        )
        try:
            return await retrying(run.one)
        except Transient as exc:
            error = exc.error
            error.retry_delay = run.next_wait if exc.retry_after is None else exc.retry_after
            error.metadata["attempts"] = str(run.stats.attempts)
            raise error from None
        finally:
            if span is not None:
                span.set_attribute("agentrunner.retry.attempts", run.stats.attempts)


class _Attempts(Generic[T]):
    """The attempts of one `Retrier.call`: what tenacity asks of the policy (`wait`, `stop`, `sleep`)
    and one attempt (`one`: its span, the budget's bookkeeping, the log line of a failure)."""

    def __init__(
        self,
        retrier: Retrier,
        attempt: Callable[[float | None], Awaitable[T]],
        deadline: float | None,
        stats: CallStats,
        span: Span | None,
        span_name: str,
    ) -> None:
        self.retrier = retrier
        self.attempt = attempt
        self.deadline = deadline
        self.stats = stats
        self.span = span
        self.span_name = span_name
        #: seconds slept between attempts so far
        self.waited = 0.0
        #: the wait the last failure asked for (the provider's Retry-After, else the backoff)
        self.next_wait = 0.0

    def wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        delay = exc.retry_after if isinstance(exc, Transient) else None
        self.next_wait = delay if delay is not None else self.retrier.backoff(state.attempt_number)
        self.stats.wait_sources.append("backoff" if delay is None else "retry-after")
        return self.next_wait

    def stop(self, state: RetryCallState) -> bool:
        upcoming = state.upcoming_sleep
        config = self.retrier.config
        if state.attempt_number >= config.max_attempts or not self.retrier.budget.allows_retry():
            return True
        if self.waited + upcoming > config.max_wait:
            return True
        return self.deadline is not None and time.monotonic() + upcoming >= self.deadline

    async def sleep(self, seconds: float) -> None:
        self.waited += seconds
        self.stats.waits.append(seconds)
        await asyncio.sleep(seconds)

    async def one(self) -> T:
        stats, budget = self.stats, self.retrier.budget
        stats.attempts += 1
        left = None if self.deadline is None else self.deadline - time.monotonic()
        attempt_span = _attempt_span(self.span, f"{self.span_name}/attempt", stats)
        try:
            result = await self.attempt(left)
        except Transient as exc:
            budget.failed()
            _failed(attempt_span, exc.error, exc.retry_after)
            log.info(
                "provider_attempt_failed",
                provider=self.retrier.what,
                attempt=stats.attempts,
                reason=exc.error.reason,
                error=exc.error.message,
                retry_after=exc.retry_after,
            )
            raise
        except asyncio.CancelledError:
            attempt_span.set_attribute("agentrunner.retry.cancelled", True)
            raise
        except BaseException as exc:
            _failed(attempt_span, exc, None)
            raise
        finally:
            attempt_span.end()
        budget.succeeded()
        return result


def _attempt_span(parent: Span | None, name: str, stats: CallStats) -> Span:
    """The span of attempt `stats.attempts`, with the wait honoured before it (0 for the first)."""
    from opentelemetry import trace

    from agentrunner_host.observability.telemetry import start_span

    context = trace.set_span_in_context(parent) if parent is not None else None
    span = start_span(name, context, trace.SpanKind.INTERNAL)
    span.set_attribute("agentrunner.retry.attempt", stats.attempts)
    retried = stats.attempts > 1 and len(stats.waits) >= stats.attempts - 1
    span.set_attribute("agentrunner.retry.delay_s", stats.waits[-1] if retried else 0.0)
    if retried and stats.wait_sources:
        span.set_attribute("agentrunner.retry.delay_source", stats.wait_sources[-1])
    return span


def _failed(span: Span, error: BaseException, provider_delay: float | None) -> None:
    """Marks a failed attempt: the reason (never the message: a provider may echo what it was sent),
    the HTTP status when there was an answer, the delay the provider asked for."""
    from opentelemetry import trace

    reason = getattr(error, "reason", "") or type(error).__name__
    span.set_attribute("error.type", reason)
    status = str(getattr(error, "metadata", {}).get("httpStatus", ""))
    if status.isdigit():
        span.set_attribute("http.response.status_code", int(status))
    if provider_delay is not None:
        span.set_attribute("agentrunner.retry.retry_after_s", provider_delay)
    span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
