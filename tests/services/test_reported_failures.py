"""The toolkit's one rule for failures a service reports inside a successful response (an error event,
a failed workflow / chat / flow): not retryable, unless it is a rate limit."""

from __future__ import annotations

import pytest

from agentrunner.services import mentions_rate_limit, reported_failure


@pytest.mark.parametrize(
    ("message", "code", "status"),
    [
        ("[openai] Rate Limit Error, Error code: 429 - Rate limit reached", "completion_request_error", None),
        ("Node LLM run failed", "", 429),  # only the embedded status says it
        ("Requests rate limit exceeded, please try again later.", "", None),
        ("Allocated quota exceeded, please increase your quota limit.", "Throttling.AllocationQuota", None),
        ("You exceeded your current requests list.", "LimitRequests", None),
        ("Your request rate is too high", 4013, None),
        ("请求过于频繁，请稍后再试", "", None),
        ("Too Many Requests", "", None),
    ],
)
def test_a_reported_rate_limit_is_retryable(message: str, code: object, status: int | None) -> None:
    error = reported_failure("svc", "stream_error", message, code=code, status=status)
    assert (error.code, error.retryable, error.kind) == ("svc.rate_limited", True, "rate_limited")
    assert error.details["reported"] == "stream_error" and error.message == message


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("the flow failed on purpose", ""),
        ("Model inference failed", "InternalError.Algo"),
        # an exhausted quota or an unpaid account: retrying cannot succeed, even with a 429 in the text
        ("Error code: 429 - You exceeded your current quota, please check your plan", "insufficient_quota"),
        ("Access denied, please make sure your account is in good standing.", "Arrearage"),
        ("task 4290 failed after 1.429 s", ""),  # a 429 inside other numbers is not a status
    ],
)
def test_other_reported_failures_are_not_retryable(message: str, code: str) -> None:
    error = reported_failure("svc", "workflow_failed", message, code=code)
    assert (error.code, error.retryable) == ("svc.workflow_failed", False)
    assert not mentions_rate_limit(message, code)
    if code:
        assert error.details["service_code"] == code
