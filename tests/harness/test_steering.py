"""Steering for harnesses: follow-ups run as resumed turns, one terminal result, usage summed."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner import Runner, results
from agentrunner.harness import steered_turns
from agentrunner.testing import HostDouble

pytestmark = pytest.mark.asyncio

TURNS: list[tuple[int, str]] = []


class Steered(Runner):
    manifest = {"id": "plugin:test/steered/default", "capabilities": ["steering"]}
    max_followups = 256

    async def run(self, ctx):
        async def turn(prompt: str, index: int):
            TURNS.append((index, prompt))
            if prompt == "fail":
                yield results.failed(
                    "x.turn_failed", "the harness failed", kind="turn_failed", usage=results.usage(1, 1)
                )
                return
            yield results.message(f"answer to {prompt}")
            yield results.completed(usage=results.usage(10, 2, total_cost_usd=0.5))

        async for result in steered_turns(ctx, ctx.input.text, turn, max_followups=type(self).max_followups):
            yield result


def _items(*texts: str) -> dict[str, Any]:
    return {"items": [{"steeringId": f"s{i}-{t}", "input": {"text": t}} for i, t in enumerate(texts)]}


@pytest.fixture(autouse=True)
def _reset() -> None:
    TURNS.clear()


async def test_follow_ups_run_in_order_with_one_terminal_and_summed_usage() -> None:
    async with HostDouble(control=False) as host:
        host.on("PullSteering", _items("second", "third")).on("PullSteering", {"items": []})
        out = await host.run(Steered, "first")
    assert TURNS == [(0, "first"), (1, "second"), (2, "third")]
    assert out.types == ["message.completed"] * 3 + ["run.completed"]
    usage = out.terminal.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (30, 6, 36)
    assert json_format.MessageToDict(usage.extra) == {"total_cost_usd": 1.5}
    assert out.metadata["turns"] == 3


async def test_a_failing_follow_up_ends_the_run_with_its_failure_and_the_usage_so_far() -> None:
    async with HostDouble(control=False) as host:
        host.on("PullSteering", _items("fail")).on("PullSteering", {"items": []})
        out = await host.run(Steered, "first")
    assert out.failure is not None and out.failure.code == "x.turn_failed"
    assert out.terminal.usage.prompt_tokens == 11


async def test_a_pull_error_disables_steering_without_failing_the_run() -> None:
    async with HostDouble(control=False) as host:
        host.on("PullSteering", error="RUNTIME_ERROR")
        out = await host.run(Steered, "only")
        pulls = len(host.calls_to("PullSteering"))
    assert out.completed and TURNS == [(0, "only")] and pulls == 1


async def test_follow_ups_are_capped() -> None:
    Steered.max_followups = 2
    try:
        async with HostDouble(control=False) as host:
            host.on("PullSteering", _items("a", "b", "c", "d")).on("PullSteering", {"items": []})
            out = await host.run(Steered, "first")
    finally:
        Steered.max_followups = 256
    assert [p for _, p in TURNS] == ["first", "a", "b"]
    assert out.completed
