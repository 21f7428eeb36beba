"""A LangBot Runner plugin through the bridge next to the same workload as a native runner (issue 38).

One host (its CLI, SQLite) with two agents: `native` on the SDK bench runner (`bench_runner.py`,
`agentrunner serve`) and `bridge` on the `bench/burst` plugin (`langbot_plugins/burst/`, written against
the public `langbot-plugin` SDK) behind the bridge the host starts itself (`runners:` kind
`langbot-plugins`). Both stream the same deltas; they are measured interleaved (ABBA), so drift in the
machine's load hits both alike:

- `*_ttfr_ms`: p50 time from starting `HostService.Run` to its first result (sequential runs);
- `*_deltas_per_s`: `message.delta` results per second reaching the client with `CONCURRENCY` runs at a
  time, each streaming `DELTAS` deltas as fast as it can, pooled over `ROUNDS` windows per path.

Writes bench/results_bridge.json and prints one key=value line.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pathlib
import statistics
import sys
import tempfile

import grpc
import yaml

from agentrunner.v1 import host_service_pb2_grpc

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_host import delta_window, first_result, request, start_host, start_runner, stop  # noqa: E402

TTFR_RUNS = int(os.environ.get("BENCH_BRIDGE_TTFR_RUNS", "100"))
DELTAS = int(os.environ.get("BENCH_BRIDGE_DELTAS", "200"))
CONCURRENCY = int(os.environ.get("BENCH_BRIDGE_CONCURRENCY", "20"))
SECONDS = float(os.environ.get("BENCH_BRIDGE_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_BRIDGE_ROUNDS", "4"))
PATHS = ("native", "bridge")


def config(tmp: pathlib.Path, runner_addr: str) -> pathlib.Path:
    path = tmp / "host.yaml"
    agents = [
        {
            "id": "native",
            "runner_id": "plugin:bench/burst/default",
            "event_types": ["*"],
            "timeout_seconds": 300,
        },
        {
            "id": "bridge",
            "runner_id": "plugin:bench/burst/burst",
            "event_types": ["*"],
            "timeout_seconds": 300,
        },
    ]
    path.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "database": {"url": f"sqlite+aiosqlite:///{tmp}/host.db"},
                "runners": [
                    {"id": "native", "address": runner_addr},
                    {
                        "id": "langbot",
                        "kind": "langbot-plugins",
                        "plugins_dir": str(HERE / "langbot_plugins"),
                        "args": ["--skip-deps-check"],
                    },
                ],
                "agents": agents,
                "bindings": [
                    {
                        "id": a["id"],
                        "scope": {"type": "bot", "id": a["id"]},
                        "event": "*",
                        "target": {"agent": a["id"]},
                    }
                    for a in agents
                ],
            }
        )
    )
    return path


async def measure(address: str) -> dict[str, dict[str, float]]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        ttfr: dict[str, list[float]] = {p: [] for p in PATHS}
        for i in range(TTFR_RUNS + 10):
            for path in PATHS if i % 2 == 0 else reversed(PATHS):
                t = await first_result(stub, request("hello", f"bench-{path}", bot=path), run_timeout=60)
                if i >= 10:  # warm-up
                    ttfr[path].append(t)
        totals = {p: [0, 0.0] for p in PATHS}
        for round_ in range(ROUNDS):
            for path in PATHS if round_ % 2 == 0 else reversed(PATHS):
                deltas, seconds = await delta_window(
                    stub,
                    functools.partial(request, f"burst:{DELTAS}", f"bench-{path}", bot=path),
                    SECONDS,
                    CONCURRENCY,
                    120,
                )
                totals[path][0] += deltas
                totals[path][1] += seconds
    return {
        p: {
            "ttfr_p50_ms": statistics.median(ttfr[p]) * 1000,
            "ttfr_p95_ms": statistics.quantiles(ttfr[p], n=20)[18] * 1000,
            "deltas_per_s": totals[p][0] / totals[p][1],
        }
        for p in PATHS
    }


async def main() -> int:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    runner, runner_addr = start_runner()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = config(pathlib.Path(tmp), runner_addr)
            host, address = start_host(cfg)
            try:
                results = await measure(address)
            finally:
                stop([host])
    finally:
        stop([runner])
    summary = {
        "bridge_ttfr_ms": round(results["bridge"]["ttfr_p50_ms"], 2),
        "native_ttfr_ms": round(results["native"]["ttfr_p50_ms"], 2),
        "bridge_deltas_per_s": round(results["bridge"]["deltas_per_s"]),
        "native_deltas_per_s": round(results["native"]["deltas_per_s"]),
    }
    setup = {
        "ttfr_runs": TTFR_RUNS,
        "deltas_per_run": DELTAS,
        "concurrency": CONCURRENCY,
        "seconds_per_window": SECONDS,
        "windows_per_path": ROUNDS,
        "interleaved": "ttfr run by run, throughput window by window (ABBA)",
        "cpus": os.cpu_count(),
        "stores": "SQLite (WAL), every result recorded (deltas in batches)",
    }
    out = {"summary": summary, "paths": results, "setup": setup}
    (HERE / "results_bridge.json").write_text(json.dumps(out, indent=2) + "\n")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
