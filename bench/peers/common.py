"""What every side of `bench_peers.py` measures, the same way (standard library only: the A2A side runs
it in its own venv).

A side supplies `run(text) -> (seconds to the first delta, deltas received)` for one streamed run with a
120 s deadline, and the process ids that serve it. `measure` then takes, on fresh processes:

- `ttfr_p50_ms`: p50 time to the first result of sequential 1-delta runs (`burst:1:100`), after warm-up;
- `cpu_us_per_run`: user + system CPU time of the serving processes (threads included, read from
  /proc/PID/stat before and after) over `--cpu` sequential 1-delta runs, divided by their number;
- `deltas_per_s_single`: one run streaming `--single` 100-byte deltas, deltas received / wall time;
- `deltas_per_s_conc`: `--conc` runs at once, each `--each` deltas, all deltas received / wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

Run = Callable[[str], Awaitable[tuple[float, int]]]
DEADLINE = 120.0
ONE = "burst:1:100"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--ttfr", type=int, default=200)
    parser.add_argument("--cpu", type=int, default=200)
    parser.add_argument("--single", type=int, default=20_000)
    parser.add_argument("--conc", type=int, default=50)
    parser.add_argument("--each", type=int, default=1_000)


def parse(text: str) -> tuple[int, int]:
    """`burst:N:B` -> (N deltas, B bytes each); anything else is one 100-byte delta."""
    parts = text.strip().split(":")
    if parts[0] == "burst" and len(parts) >= 2:
        return int(parts[1]), int(parts[2]) if len(parts) > 2 else 100
    return 1, 100


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of the processes (each with its threads), from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


async def measure(
    run: Run,
    pids: Callable[[], Sequence[int]],
    args: argparse.Namespace,
    other_pids: Sequence[int] = (),
) -> dict[str, float]:
    """The four figures of one side (see the module docstring), in that order; `other_pids`' CPU per run
    over the same runs is reported apart (`cpu_us_per_run_other`: our runner, behind the host)."""
    for _ in range(args.warmup):
        await run(ONE)
    ttfr = [(await run(ONE))[0] for _ in range(args.ttfr)]
    serving = pids()
    before, before_other = cpu_seconds(serving), cpu_seconds(other_pids)
    for _ in range(args.cpu):
        await run(ONE)
    cpu_us = (cpu_seconds(serving) - before) / args.cpu * 1e6
    cpu_other_us = (cpu_seconds(other_pids) - before_other) / args.cpu * 1e6
    started = time.perf_counter()
    _, single = await run(f"burst:{args.single}:100")
    single_rate = single / (time.perf_counter() - started)
    started = time.perf_counter()
    counts = await asyncio.gather(*(run(f"burst:{args.each}:100") for _ in range(args.conc)))
    conc = sum(c for _, c in counts)
    conc_rate = conc / (time.perf_counter() - started)
    if single != args.single or conc != args.conc * args.each:
        raise RuntimeError(f"deltas lost: {single}/{args.single}, {conc}/{args.conc * args.each}")
    return {
        "ttfr_p50_ms": statistics.median(ttfr) * 1000,
        "cpu_us_per_run": cpu_us,
        "cpu_us_per_run_other": cpu_other_us,
        "deltas_per_s_single": single_rate,
        "deltas_per_s_conc": conc_rate,
        "serving_processes": len(serving),
    }
