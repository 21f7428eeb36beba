"""The benchmark's runner (SDK): `burst:N` streams N `message.delta` results as fast as it can (`burst:N:B`:
each B bytes), then `run.completed`; `stall` waits until cancelled; `trickle` sends a delta every 100 ms
until cancelled; anything else is one delta and a completed message.
Served with `python -m agentrunner serve bench_runner:BenchRunner` (cwd `bench/`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from agentrunner import RunContext, Runner, results
from agentrunner.v1 import result_pb2


class BenchRunner(Runner):
    manifest: ClassVar[dict[str, Any]] = {
        "id": "plugin:bench/burst/default",
        "label": "Bench",
        "description": "Streams deltas fast for the host benchmark.",
        "capabilities": ["streaming"],
    }

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        text = ctx.input.to_text().strip()
        if text == "stall":
            await asyncio.Event().wait()
        if text == "trickle":  # one delta every 100 ms until cancelled
            for i in range(100_000):
                yield results.delta(f"t{i} ")
                await asyncio.sleep(0.1)
        parts = text.split(":")
        count = int(parts[1]) if parts[0] == "burst" else 1
        if len(parts) > 2:  # `burst:N:B`: N deltas of B bytes each (bench_peers.py)
            piece = "x" * int(parts[2])
            for _ in range(count):
                yield results.delta(piece)
        else:
            for i in range(count):
                yield results.delta(f"d{i} ")
        yield results.completed(f"{count} deltas")
