"""The run deadline of every service runner: the toolkit's guard ends a slow exchange as the runner's
own `<provider>.timeout` (retryable, logged by the runner), not the SDK's generic `deadline_exceeded`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from structlog.testing import CapturingLogger

import agentrunner.services.runner as service_runner
from agentrunner.runner import Runner
from agentrunner.testing import HostDouble
from agentrunner_runners.coze import CozeRunner
from agentrunner_runners.dashscope import DashScopeRunner
from agentrunner_runners.dify import DifyRunner
from agentrunner_runners.langflow import LangflowRunner
from agentrunner_runners.n8n import N8nRunner
from agentrunner_runners.tbox import TboxRunner
from agentrunner_runners.testing.mock_services import MockServices

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: each runner with a config reaching its mock (a per-read `timeout` far beyond the run's deadline)
RUNNERS: dict[str, tuple[type[Runner], Any]] = {
    "coze": (
        CozeRunner,
        lambda m: {"api-base": m.url("/coze"), "api-key": "k", "bot-id": "7350000000000001"},
    ),
    "dashscope": (
        DashScopeRunner,
        lambda m: {"base-url": m.url("/dashscope/api/v1"), "api-key": "k", "app-id": "app0001"},
    ),
    "dify": (DifyRunner, lambda m: {"base-url": m.url("/dify/v1"), "api-key": "k"}),
    "langflow": (
        LangflowRunner,
        lambda m: {"base-url": m.url("/langflow"), "flow-id": "flow-1", "api-key": "k"},
    ),
    "n8n": (N8nRunner, lambda m: {"webhook-url": m.url("/n8n/webhook/chat")}),
    "tbox": (TboxRunner, lambda m: {"base-url": m.url("/tbox"), "api-key": "k", "app-id": "202501tbox"}),
}


@pytest.mark.parametrize("provider", sorted(RUNNERS))
async def test_the_run_deadline_ends_a_slow_service_as_its_own_timeout(
    host: HostDouble, mock: MockServices, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, config = RUNNERS[provider]
    logs = CapturingLogger()  # the toolkit's logger, whatever structlog config an earlier test left
    monkeypatch.setattr(service_runner, "log", logs)
    started = time.monotonic()
    out = await host.run(runner, "mock:slow x", config={**config(mock), "timeout": 60}, deadline=2.0)
    elapsed = time.monotonic() - started
    assert out.failure is not None, out.results
    assert (out.failure.code, out.failure.retryable) == (f"{provider}.timeout", True), out.failure
    assert "run deadline" in out.failure.message
    assert 1.0 < elapsed < 10, elapsed  # at the deadline, not after the 60 s per-read timeout
    failed = [c.kwargs for c in logs.calls if c.args == ("service failed",)]
    assert [(e["provider"], e["code"]) for e in failed] == [(provider, f"{provider}.timeout")], logs.calls
    assert out.of_type("state.updated") == []  # nothing committed after a failed turn
