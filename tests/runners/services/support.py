"""Shared checks of the service-runner tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentrunner.runner import Runner
from agentrunner.testing import HostDouble


@dataclasses.dataclass(frozen=True)
class Failure:
    """A turn that must fail: the text (a `mock:` scenario), config changes, and what the user sees."""

    text: str
    code: str
    retryable: bool
    needle: str
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}-{self.text.split()[0]}"


async def assert_fails(host: HostDouble, runner: type[Runner], config: dict[str, Any], case: Failure) -> None:
    """One `run.failed` with the code, `retryable` and message the case says; no secret, no state."""
    out = await host.run(runner, case.text, config={**config, **case.config})
    assert out.failure is not None, out.results
    assert (out.failure.code, out.failure.retryable) == (case.code, case.retryable), out.results
    assert case.needle in out.failure.message, out.failure.message
    assert "wrong-key" not in str(out.results)
    assert out.of_type("state.updated") == []  # nothing stored after a failed turn
