"""The codex runner's safe defaults, unit by unit: what a failure Codex reports means (typed,
retryable, words without Python reprs), a retry that cannot help, the conversation's `config.toml`
(secrets kept from the model's commands, `/tmp` not writable, the LangBot tools callable)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner_runners.codex import invocation
from agentrunner_runners.codex.app_stream import CodexAppStream
from agentrunner_runners.codex.exec_stream import CodexExecStream
from agentrunner_runners.codex.failures import classify, describe


def _default() -> RunnerFailure:
    return RunnerFailure("codex.turn_failed", "the Codex turn failed", kind=FailureKind.TURN_FAILED)


@pytest.mark.parametrize(
    ("message", "info", "code", "retryable"),
    [
        # what the real CLI (0.169) reports, app-server then exec
        ("We’re currently experiencing high demand, which may cause temporary errors.", "internalServerError",
         "codex.upstream_error", True),
        ("We’re currently experiencing high demand, which may cause temporary errors.", None,
         "codex.upstream_error", True),
        ("unexpected status 401 Unauthorized: Incorrect API key provided.",
         {"httpConnectionFailed": {"httpStatusCode": 401}}, "codex.auth_error", False),
        ("unexpected status 401 Unauthorized: Incorrect API key provided.", None, "codex.auth_error", False),
        ("stream failed", {"responseTooManyFailedAttempts": {"httpStatusCode": 429}}, "codex.rate_limited", True),
        ("You've hit your usage limit.", "usageLimitExceeded", "codex.rate_limited", True),
        ("stream disconnected", {"responseStreamDisconnected": {"httpStatusCode": None}},
         "codex.connection_error", True),
        ("stream failed", {"responseStreamConnectionFailed": {"httpStatusCode": 502}}, "codex.upstream_error", True),
        ("the context window is full", "contextWindowExceeded", "codex.turn_failed", False),
        ("line 503 of a traceback", None, "codex.turn_failed", False),
    ],
)  # fmt: skip
def test_what_codex_reports_becomes_a_typed_failure(
    message: str, info: Any, code: str, retryable: bool
) -> None:
    failure = classify(message, _default(), info)
    assert (failure.code, failure.retryable) == (code, retryable)
    assert not re.search(r"\{'|\bNone\b", failure.message), failure.message
    if info is not None:
        assert failure.details["codex_error"] == describe(info).split(" (")[-1].rstrip(")")


def test_codex_error_info_in_words() -> None:
    assert describe({"httpConnectionFailed": {"httpStatusCode": 401}}) == "HTTP 401 (httpConnectionFailed)"
    assert describe("internalServerError") == "internalServerError" and describe(None) == ""


def test_a_retry_that_cannot_help_is_fatal_in_both_transports() -> None:
    exec_stream = CodexExecStream()
    exec_stream.feed({"type": "error", "message": "Reconnecting... 1/5 (high demand, temporary errors.)"})
    first = exec_stream.fatal  # (a local: mypy would keep `fatal is None` across the next `feed`)
    assert first is None  # a 5xx: Codex's own retries may help
    exec_stream.feed(
        {"type": "error", "message": "Reconnecting... 1/5 (unexpected status 401 Unauthorized: x)"}
    )
    assert exec_stream.fatal is not None and "401" in exec_stream.fatal
    app = CodexAppStream()
    error = {
        "message": "Reconnecting... 1/5",
        "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": 401}},
        "additionalDetails": "unexpected status 401 Unauthorized",
    }
    out = app.notify("error", {"error": error, "willRetry": True})
    assert app.fatal == "unexpected status 401 Unauthorized" and "401" in out[0].run_log.text


def test_the_mcp_startup_status_is_kept_and_a_failed_server_is_a_warning() -> None:
    app = CodexAppStream()
    assert app.notify("mcpServer/startupStatus/updated", {"name": "langbot", "status": "starting"}) == []
    (warning,) = app.notify(
        "mcpServer/startupStatus/updated", {"name": "docs", "status": "failed", "error": "boom"}
    )
    assert app.mcp_status == {"langbot": "starting", "docs": "failed"} and "docs" in warning.run_log.text


def _home(tmp_path: Path, user: str, servers: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    source = tmp_path / "user"
    source.mkdir(exist_ok=True)
    (source / "config.toml").write_text(user)
    target = invocation.make_home(
        tmp_path / "ws" / ".codex" / "home",
        source,
        servers or {},
        defaults=invocation.default_tables(["OPENAI_API_KEY", "LANGBOT_MCP_TOKEN"]),
    )
    return tomllib.loads((target / "config.toml").read_text())


def test_the_conversation_config_keeps_secrets_from_commands_and_tmp_unwritable(tmp_path: Path) -> None:
    bridge = {"url": "http://127.0.0.1:1/mcp", "bearer_token_env_var": "LANGBOT_MCP_TOKEN"}
    config = _home(
        tmp_path, 'model = "m"\n', {"langbot": {**bridge, "default_tools_approval_mode": "approve"}}
    )
    policy = config["shell_environment_policy"]
    assert policy["ignore_default_excludes"] is False
    assert {"OPENAI_API_KEY", "LANGBOT_MCP_TOKEN", "*KEY*", "*TOKEN*"} <= set(policy["exclude"])
    assert config["sandbox_workspace_write"] == {"exclude_slash_tmp": True, "exclude_tmpdir_env_var": True}
    assert config["mcp_servers"]["langbot"]["default_tools_approval_mode"] == "approve"
    assert config["model"] == "m"


def test_the_users_own_tables_win_and_the_tmp_check_sees_them(tmp_path: Path) -> None:
    user = (
        '[sandbox_workspace_write]\nexclude_slash_tmp = false\n[shell_environment_policy]\ninherit = "core"\n'
    )
    config = _home(tmp_path, user)  # valid TOML: no second table of the same name
    assert config["sandbox_workspace_write"] == {"exclude_slash_tmp": False}
    assert config["shell_environment_policy"] == {"inherit": "core"}
    parsed, defaults = tomllib.loads(user), invocation.default_tables([])
    key = "sandbox_workspace_write.exclude_slash_tmp"
    assert invocation.effective(key, {}, parsed, defaults) is False
    assert invocation.effective(key, {key: True}, parsed, defaults) is True  # config-overrides-json wins
    assert invocation.effective(key, {}, {}, defaults) is True  # the runner's default
    assert (
        invocation.effective(key, {"sandbox_workspace_write": {"exclude_slash_tmp": False}}, {}, defaults)
        is False
    )
