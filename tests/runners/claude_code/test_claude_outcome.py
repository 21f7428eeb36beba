"""How the end of a Claude Code turn is read (`outcome`), on `result` lines as Claude Code 2.1.328
writes them (recorded against the Anthropic API mock and an unreachable base URL)."""

from __future__ import annotations

from typing import Any

import pytest

from agentrunner_runners.claude_code.outcome import Totals, classify, resume_rejected, run_cost


def _result(text: str, **fields: Any) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": True, "result": text, **fields}


@pytest.mark.parametrize(
    ("line", "code", "kind", "retryable"),
    [
        (
            _result("API Error: 500 Internal server error.", api_error_status=500),
            "api_error",
            "http_error",
            True,
        ),
        (
            _result("Invalid API key · Fix external API key", api_error_status=401),
            "auth_error",
            "auth_error",
            False,
        ),
        (_result("API Error: 529 Overloaded", api_error_status=529), "api_error", "rate_limited", True),
        (_result("API Error: Connection refused (ECONNREFUSED)"), "api_error", "connection_error", True),
        (_result("API Error: 400 prompt is too long", api_error_status=400), "api_error", "api_error", False),
        (
            {"subtype": "error_during_execution", "is_error": True, "errors": ["[ede_diagnostic] boom"]},
            "execution_error",
            "turn_failed",
            False,
        ),
    ],
)
def test_failures_are_typed_by_status_first(
    line: dict[str, Any], code: str, kind: str, retryable: bool
) -> None:
    failure = classify(line, str(line.get("result") or line.get("errors")))
    assert (failure.code, failure.kind, failure.retryable) == (f"claude_code.{code}", kind, retryable)


def test_a_missing_session_is_recognised_from_the_result_line() -> None:
    missing = {"subtype": "error_during_execution", "is_error": True, "num_turns": 0}
    missing["errors"] = ["No conversation found with session ID: 0b5c0d8e-0000-4000-8000-000000000000"]
    assert resume_rejected(missing, "") and not resume_rejected(_result("API Error: 500"), "")


def test_run_cost_is_the_difference_to_the_stored_totals() -> None:
    line = {"total_cost_usd": 0.00042, "duration_api_ms": 374}
    before = Totals("s1", {"total_cost_usd": 0.00028, "duration_api_ms": 350})
    cost, after = run_cost(line, before, "s1", fresh=False)
    assert cost == {
        "total_cost_usd": 0.00014,
        "duration_api_ms": 24.0,
        "session_total_cost_usd": 0.00042,
        "session_duration_api_ms": 374.0,
    }
    assert after.to_state() == {"session_id": "s1", "total_cost_usd": 0.00042, "duration_api_ms": 374.0}
    # another session's totals are no baseline; without one the CLI's per-result model usage is used
    since = {"model_usage_since_last_result": {"m": {"costUSD": 0.00014}}}
    assert run_cost({**line, **since}, before, "s2", fresh=False)[0]["total_cost_usd"] == 0.00014
    assert "total_cost_usd" not in run_cost(line, None, "s2", fresh=False)[0]
    assert run_cost(line, before, "s3", fresh=True)[0]["total_cost_usd"] == 0.00042
