"""Shared runner for the parity suites: one manifest granting everything, a per-test script."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

from agentrunner import RunContext, Runner, results
from agentrunner.results import RunResult

box: dict[str, Any] = {}

Script = Callable[[RunContext], AsyncIterator[RunResult]]


class ParityRunner(Runner):
    manifest = {
        "id": "plugin:test/parity/default",
        "label": "parity",
        "capabilities": ["streaming", "tool_calling", "interactions", "platform_api"],
        "permissions": {
            "tools": ["detail", "call"],
            "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
            "platform_api": ["send_message", "group.mute"],
        },
    }
    script: ClassVar[Script]

    async def run(self, ctx: RunContext) -> AsyncIterator[RunResult]:
        box["ctx"] = ctx
        async for item in ParityRunner.script(ctx):
            yield item


def use(script: Script) -> type[ParityRunner]:
    """Installs the script for the next run and clears the capture box."""
    ParityRunner.script = script
    box.clear()
    return ParityRunner


async def done() -> AsyncIterator[RunResult]:
    yield results.completed("ok")
