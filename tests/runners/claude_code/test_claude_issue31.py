"""The claude-code defaults and failure handling of issue 31, against the fake `claude` (which behaves
like Claude Code 2.1.328 there: session totals after `--resume`, `api_retry` lines, synthetic error
text, an `is_error` result line for a missing session). `tests/real` runs the same against the real CLI."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.testing import HostDouble
from agentrunner_runners.claude_code import SESSION_KEY
from agentrunner_runners.claude_code.outcome import TOTALS_KEY
from tests.runners.claude_code.conftest import Fake, run
from tests.runners.claude_code.test_claude_behaviours import _processes_with

pytestmark = pytest.mark.asyncio

KEY = "sk-ant-api03-issue31-key-0123456789abcdef"


def _extra(out) -> dict[str, Any]:
    return json_format.MessageToDict(out.terminal.usage.extra)


def _state(out, key: str):
    values = [json_format.MessageToDict(r.state_updated)["value"] for r in out.of_type("state.updated")]
    keys = [r.state_updated.key for r in out.of_type("state.updated")]
    return [v for k, v in zip(keys, values, strict=True) if k == key]


async def test_cost_per_run_is_the_difference_of_the_session_totals(host: HostDouble, fake: Fake) -> None:
    first = await run(host, fake, "one")
    sid = _state(first, SESSION_KEY)[0]
    (totals,) = _state(first, TOTALS_KEY)
    assert _extra(first)["total_cost_usd"] == 0.0123 and totals["total_cost_usd"] == 0.0123
    state = {SESSION_KEY: sid, TOTALS_KEY: totals}
    second = await run(host, fake, "two", state={"conversation": state})
    third = await run(
        host, fake, "three", state={"conversation": {**state, **{TOTALS_KEY: _state(second, TOTALS_KEY)[0]}}}
    )
    for out, session_total in ((second, 0.0246), (third, 0.0369)):
        extra = _extra(out)
        # the CLI reported the session's totals (0.0246, 0.0369); each run cost 0.0123
        assert extra["total_cost_usd"] == 0.0123 and extra["duration_api_ms"] == 30
        assert extra["session_total_cost_usd"] == session_total
    # a resumed session whose totals were never stored: the run's cost is unknown, not the total
    unknown = await run(host, fake, "four", state={"conversation": {SESSION_KEY: sid}})
    assert "total_cost_usd" not in _extra(unknown) and _extra(unknown)["session_total_cost_usd"] > 0.04


async def test_the_clis_api_error_text_is_never_streamed_and_a_500_is_retryable(
    host: HostDouble, fake: Fake
) -> None:
    out = await run(host, fake, "apierror")
    assert out.of_type("message.delta") == [] and out.of_type("message.completed") == []
    details = json_format.MessageToDict(out.failure.details)
    assert (out.failure.code, details["kind"], details["status"], out.failure.retryable) == (
        "claude_code.api_error",
        "http_error",
        500,
        True,
    )
    logs = [r.run_log.text for r in out.of_type("run.log")]
    assert sum("retrying the model API after HTTP 500" in line for line in logs) == 2


async def test_a_refused_key_is_an_auth_error_at_once(
    host: HostDouble, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    start = time.monotonic()
    out = await run(host, fake, "badkey")
    elapsed = time.monotonic() - start
    details = json_format.MessageToDict(out.failure.details)
    assert (out.failure.code, details["kind"], details["status"]) == (
        "claude_code.auth_error",
        "auth_error",
        401,
    )
    assert not out.failure.retryable and elapsed < 15  # the fake keeps "retrying" for 60 s
    assert KEY not in out.failure.message
    assert _processes_with(str(fake.root)) == []


async def test_claude_variables_reach_claude_code_and_the_key_only_through_the_helper(
    host: HostDouble, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Team: langbot")
    monkeypatch.setenv("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "4096")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-claude-0123456789")
    out = await run(host, fake, "leak")
    (call,) = fake.invocations()
    env = call["claude_env"]
    assert (
        env["ANTHROPIC_CUSTOM_HEADERS"] == "X-Team: langbot"
        and env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
    )
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "2"
    # the key is not in Claude Code's environment (its Bash tool would show it) but reaches it
    assert "ANTHROPIC_API_KEY" not in call["env"] and "OPENAI_API_KEY" not in call["env"]
    assert call["api_key"] == KEY
    settings = Path(call["argv"][call["argv"].index("--settings") + 1])
    assert not await asyncio.to_thread(settings.parent.exists)  # removed with the run
    # what a tool printed is redacted from the previews
    (done,) = out.of_type("tool.call.completed")
    preview = done.tool_call_completed.result_preview["text"]
    assert KEY not in preview and "KEY_SEEN=[REDACTED]" in preview


async def test_env_json_wins_and_an_auth_token_is_moved_to_the_helper_too(
    host: HostDouble, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    await run(
        host,
        fake,
        "hi",
        config={"env-json": {"ANTHROPIC_AUTH_TOKEN": KEY, "CLAUDE_CODE_MAX_RETRIES": "5"}},
    )
    (call,) = fake.invocations()
    assert "ANTHROPIC_AUTH_TOKEN" not in call["env"] and call["api_key"] == KEY
    assert call["claude_env"]["CLAUDE_CODE_MAX_RETRIES"] == "5"
