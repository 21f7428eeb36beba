"""Our side of `bench_peers.py`: this host (its CLI, SQLite, default limits) in front of the SDK bench
runner (`bench/bench_runner.py` via `agentrunner serve`): two hops, client -> host -> runner.

`measure` starts both fresh, drives `HostService.Run` with a grpc.aio client (120 s deadline per call)
and prints `common.measure`'s JSON object, where the serving process is the host (`cpu_us_per_run`; the
runner's CPU over the same runs is `cpu_us_per_run_other`). The sequential runs share one conversation
(what a chat does); the concurrent ones have a conversation each. Then the shared-conversation check:
`--shared` sequential 1-delta runs alternating (ABBA) between one conversation for all of them and a new
conversation per run: `ttfr_shared_p50_ms`, `ttfr_fresh_p50_ms`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from common import DEADLINE, ONE, add_args, measure

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc

BENCH = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))
from bench_host import host_config, start, start_runner, stop  # noqa: E402

_fresh = itertools.count()


def request(text: str, conversation: str) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest()
    req.event.event_type = "message.received"
    req.event.conversation.conversation_id = conversation
    req.event.input.text = text
    req.event.delivery.supports_streaming = True
    return req


async def run(
    stub: host_service_pb2_grpc.HostServiceStub, text: str, conversation: str = ""
) -> tuple[float, int]:
    """(seconds to the first delta, deltas) of one run; `conversation` empty: the shared one for 1-delta
    runs, a new one for bursts (concurrent runs are separate chats)."""
    if not conversation:
        conversation = "peers-shared" if text == ONE else f"peers-{next(_fresh)}"
    started = time.perf_counter()
    first = 0.0
    deltas = 0
    async for update in stub.Run(request(text, conversation), timeout=DEADLINE):
        if update.HasField("result") and update.result.HasField("message_delta"):
            deltas += 1
            if not first:
                first = time.perf_counter() - started
    return first, deltas


async def shared_vs_fresh(stub: host_service_pb2_grpc.HostServiceStub, n: int) -> dict[str, float]:
    """p50 time to first result, one conversation for every run vs a new one per run, ABBA order."""
    times: dict[str, list[float]] = {"shared": [], "fresh": []}
    for i in range(n + 10):
        for mode in ("shared", "fresh") if i % 2 == 0 else ("fresh", "shared"):
            conversation = "peers-ab-shared" if mode == "shared" else f"peers-ab-{next(_fresh)}"
            first, _ = await run(stub, ONE, conversation)
            if i >= 10:  # warm-up
                times[mode].append(first)
    return {f"ttfr_{m}_p50_ms": statistics.median(t) * 1000 for m, t in times.items()}


async def drive(args: argparse.Namespace, address: str, host_pid: int, runner_pid: int) -> dict[str, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        out = await measure(lambda text: run(stub, text), lambda: [host_pid], args, [runner_pid])
        out.update(await shared_vs_fresh(stub, args.shared))
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["measure"])
    parser.add_argument("--shared", type=int, default=200)
    add_args(parser)
    args = parser.parse_args()
    py = sys.executable
    env = {"PYTHONPATH": str(BENCH)}
    runner, runner_addr = start_runner(env)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = host_config(pathlib.Path(tmp), runner_addr)
            subprocess.run(
                [py, "-m", "agentrunner_host", "db", "upgrade", "--config", str(config)],
                check=True,
                capture_output=True,
            )
            host, address = start(
                [py, "-m", "agentrunner_host", "serve", "--config", str(config), "--log-level", "WARNING"],
                "AGENTRUNNER_HOST_LISTENING",
            )
            try:
                print(json.dumps(asyncio.run(drive(args, address, host.pid, runner.pid))))
            finally:
                stop([host])
    finally:
        stop([runner])


if __name__ == "__main__":
    main()
