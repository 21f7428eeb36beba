"""Host path vs a bare grpc.aio relay of the same messages (issue 4 benchmark; not a test).

Four processes, all on loopback: this client, the two paths under test (the host via its CLI, and the
bare relay below), and the bench runner (`bench_runner.py`) via the SDK CLI, which both paths call.
Both paths are up for the whole run and measured interleaved, so that a change in the machine's load
(client, paths and runner share two cores) affects both alike. Measured in one run:

- ttfb_p50_ratio: p50 time from starting `Run` to the first result, host / relay (sequential runs,
  alternating path run by run);
- throughput_ratio: `message.delta` results per second received with 100 concurrent runs, each streaming
  `BENCH_DELTAS` deltas as fast as the bench runner can send them, host / relay (pooled over
  `BENCH_TPUT_ROUNDS` alternating windows per path: on this shared 2-core VM one window's ratio
  ranges about 0.63-0.97, so a handful of windows leaves the pooled figure at the mercy of a few);
- rss_kib_per_open_run: host RSS growth per open run with 1,000 `stall` runs open.

Writes bench/results.json and prints one summary line.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import grpc
import psutil
import yaml

from agentrunner.v1 import (
    host_service_pb2,
    host_service_pb2_grpc,
    runner_service_pb2,
    runner_service_pb2_grpc,
)

HERE = pathlib.Path(__file__).parent
REF_ID = "plugin:bench/burst/default"
DELTAS = int(os.environ.get("BENCH_DELTAS", "200"))
TTFB_RUNS = int(os.environ.get("BENCH_TTFB_RUNS", "300"))
CONCURRENCY = 100
TPUT_SECONDS = float(os.environ.get("BENCH_TPUT_SECONDS", "4"))
TPUT_ROUNDS = int(os.environ.get("BENCH_TPUT_ROUNDS", "8"))
OPEN_RUNS = int(os.environ.get("BENCH_OPEN_RUNS", "1000"))


# -- the bare relay (runs in its own process: `bench_host.py --relay PORT RUNNER`) -----------------------
class Relay(host_service_pb2_grpc.HostServiceServicer):
    def __init__(self, runner: str) -> None:
        self.stub = runner_service_pb2_grpc.RunnerServiceStub(grpc.aio.insecure_channel(runner))
        self.n = 0

    async def Run(self, request, context):  # type: ignore[override]
        self.n += 1
        run_id = f"run_{self.n}"
        req = runner_service_pb2.RunRequest(runner_id=REF_ID, runner_name="default")
        req.context.run_id = run_id
        req.context.input.text = request.event.input.text
        req.context.delivery.supports_streaming = request.event.delivery.supports_streaming
        yield host_service_pb2.HostServiceRunResponse(accepted=host_service_pb2.RunAccepted(run_id=run_id))
        call = self.stub.Run(req, timeout=context.time_remaining() or 300)
        try:
            async for response in call:
                yield host_service_pb2.HostServiceRunResponse(result=response.result)
        finally:
            call.cancel()
        yield host_service_pb2.HostServiceRunResponse(finished=host_service_pb2.RunFinished(run_id=run_id))


async def serve_relay(port: int, runner: str) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    host_service_pb2_grpc.add_HostServiceServicer_to_server(Relay(runner), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"AGENTRUNNER_HOST_LISTENING 127.0.0.1:{bound}", flush=True)
    await server.wait_for_termination()


# -- process helpers -------------------------------------------------------------------------------------
def start(
    args: list[str], marker: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """Starts a process (`env` on top of this one's) and waits for its `marker` line: (process, address)."""
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(marker):
        proc.kill()
        raise RuntimeError(f"{args[:4]} did not start: {line!r}")
    return proc, line.split()[1]


def start_runner(env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """The bench runner (`bench_runner.py`) via the SDK CLI, on a free port."""
    args = ["-m", "agentrunner", "serve", "bench_runner:BenchRunner", "--host", "127.0.0.1", "--port", "0"]
    return start([sys.executable, *args], "AGENTRUNNER_LISTENING", env)


def stop(procs: list[subprocess.Popen[str]], timeout: float = 15) -> None:
    """Terminates the processes, then kills whichever has not exited within `timeout` seconds."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def host_config(tmp: pathlib.Path, runner_addr: str, name: str = "host") -> pathlib.Path:
    """The benchmark host's config file `tmp/NAME.yaml` (its SQLite database `tmp/NAME.db`, one agent on
    the bench runner): several hosts can share `tmp` under their own names."""
    config = tmp / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "database": {"url": f"sqlite+aiosqlite:///{tmp}/{name}.db"},
                "runners": [{"id": "ref", "address": runner_addr}],
                "agents": [
                    {
                        "id": "bench",
                        "runner_id": REF_ID,
                        "event_types": ["*"],
                        "timeout_seconds": 300,
                    }
                ],
                "bindings": [{"id": "all", "event": "*", "target": {"agent": "bench"}}],
            }
        )
    )
    return config


def start_host(config: pathlib.Path) -> tuple[subprocess.Popen[str], str]:
    """A host serving `config`, its database migrated first (setup, before anything is measured):
    (process, address). The benches' common start (this file's, `bench_runtimes.py`, `bench_bridge.py`)."""
    py = sys.executable
    subprocess.run(
        [py, "-m", "agentrunner_host", "db", "upgrade", "--config", str(config)],
        check=True,
        capture_output=True,
    )
    return start(
        [py, "-m", "agentrunner_host", "serve", "--config", str(config), "--log-level", "WARNING"],
        "AGENTRUNNER_HOST_LISTENING",
    )


def request(
    text: str, conversation: str = "bench", *, agent: str = "", bot: str = ""
) -> host_service_pb2.HostServiceRunRequest:
    """A streaming `message.received` run request (`agent`: an explicit agent; `bot`: the bot id)."""
    req = host_service_pb2.HostServiceRunRequest(agent_id=agent)
    req.event.event_type = "message.received"
    req.event.bot_id = bot
    req.event.conversation.conversation_id = conversation
    req.event.input.text = text
    req.event.delivery.supports_streaming = True
    return req


async def first_result(
    stub: host_service_pb2_grpc.HostServiceStub,
    req: host_service_pb2.HostServiceRunRequest,
    run_timeout: float = 30,
) -> float:
    """Seconds from starting one `Run` to its first result (the stream is read to its end)."""
    started = time.perf_counter()
    first = None
    async for update in stub.Run(req, timeout=run_timeout):
        if first is None and update.HasField("result"):
            first = time.perf_counter() - started
    return first or 0.0


async def delta_window(
    stub: host_service_pb2_grpc.HostServiceStub,
    make: Callable[[], host_service_pb2.HostServiceRunRequest],
    seconds: float,
    concurrency: int,
    run_timeout: float = 60,
) -> tuple[int, float]:
    """`message.delta` results received and seconds taken: `concurrency` workers start runs (`make`)
    for `seconds`, then the runs in flight finish (their deltas count, and so does their time)."""
    deltas = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal deltas
        while time.perf_counter() < stop_at:
            async for update in stub.Run(make(), timeout=run_timeout):
                if update.HasField("result") and update.result.HasField("message_delta"):
                    deltas += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return deltas, time.perf_counter() - started


async def ttfb(stubs: dict[str, host_service_pb2_grpc.HostServiceStub], n: int) -> dict[str, list[float]]:
    """Sequential runs, alternating the paths run by run (ABBA order), so that drift in the machine's
    load (a shared 2-core VM) hits both paths alike instead of whichever was measured second."""
    out: dict[str, list[float]] = {name: [] for name in stubs}
    names = list(stubs)
    for i in range(n + 20):
        for name in names if i % 2 == 0 else reversed(names):
            t = await first_result(stubs[name], request("hello"))
            if i >= 20:  # warm-up
                out[name].append(t)
    return out


async def rss_per_open_run(stub: host_service_pb2_grpc.HostServiceStub, pid: int) -> float:
    proc = psutil.Process(pid)
    await asyncio.sleep(0.5)
    before = proc.memory_info().rss
    calls = [stub.Run(request("stall"), timeout=120) for _ in range(OPEN_RUNS)]
    await asyncio.gather(*(c.read() for c in calls))  # every run accepted (and its runner call opened)
    await asyncio.sleep(1.0)
    after = proc.memory_info().rss
    for c in calls:
        c.cancel()
    await asyncio.sleep(1.0)
    return (after - before) / 1024 / OPEN_RUNS


async def measure(addresses: dict[str, str], pids: dict[str, int]) -> dict[str, dict[str, object]]:
    """Both paths, interleaved: ttfb run by run, throughput in TPUT_ROUNDS alternating windows (ABBA);
    each path's rate is its deltas over its time, pooled over its windows."""
    channels = {name: grpc.aio.insecure_channel(address) for name, address in addresses.items()}
    try:
        stubs = {name: host_service_pb2_grpc.HostServiceStub(ch) for name, ch in channels.items()}
        out: dict[str, dict[str, object]] = {name: {} for name in stubs}
        times = await ttfb(stubs, TTFB_RUNS)
        for name, t in times.items():
            out[name]["ttfb_p50_ms"] = statistics.median(t) * 1000
            out[name]["ttfb_p95_ms"] = statistics.quantiles(t, n=20)[18] * 1000
        totals = {name: [0, 0.0] for name in stubs}
        names = list(stubs)
        for round_ in range(TPUT_ROUNDS):
            for name in names if round_ % 2 == 0 else reversed(names):
                deltas, seconds = await delta_window(
                    stubs[name], lambda: request(f"burst:{DELTAS}"), TPUT_SECONDS, CONCURRENCY
                )
                totals[name][0] += deltas
                totals[name][1] += seconds
                out[name].setdefault("delta_per_s_windows", []).append(round(deltas / seconds))  # type: ignore[union-attr]
        for name, (deltas, seconds) in totals.items():
            out[name]["delta_per_s"] = deltas / seconds
        for name in names:
            out[name]["rss_kib_per_open_run"] = await rss_per_open_run(stubs[name], pids[name])
        return out
    finally:
        for ch in channels.values():
            await ch.close()


async def main() -> int:
    py = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    runner, runner_addr = start_runner()
    results: dict[str, object] = {}
    procs: list[subprocess.Popen[str]] = [runner]
    try:
        relay, relay_addr = start([py, __file__, "--relay", "0", runner_addr], "AGENTRUNNER_HOST_LISTENING")
        procs.append(relay)
        with tempfile.TemporaryDirectory() as tmp:
            config = host_config(pathlib.Path(tmp), runner_addr)
            host, host_addr = start_host(config)
            procs.append(host)
            try:
                results.update(
                    await measure(
                        {"relay": relay_addr, "host": host_addr}, {"relay": relay.pid, "host": host.pid}
                    )
                )
            finally:
                stop([host])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    h, r = results["host"], results["relay"]  # type: ignore[assignment]
    summary = {
        "ttfb_p50_ratio": round(h["ttfb_p50_ms"] / r["ttfb_p50_ms"], 3),  # type: ignore[index]
        "throughput_ratio": round(h["delta_per_s"] / r["delta_per_s"], 3),  # type: ignore[index]
        "rss_kib_per_open_run": round(h["rss_kib_per_open_run"], 1),  # type: ignore[index]
    }
    results["summary"] = summary
    results["targets"] = {
        "ttfb_p50_ratio": "<= 1.5",
        "throughput_ratio": ">= 0.7",
        "rss_kib_per_open_run": "<= 150",
    }
    results["setup"] = {
        "ttfb_runs": TTFB_RUNS,
        "concurrency": CONCURRENCY,
        "throughput_seconds_per_window": TPUT_SECONDS,
        "throughput_windows_per_path": TPUT_ROUNDS,
        "interleaved": "ttfb run by run, throughput window by window (ABBA)",
        "open_runs": OPEN_RUNS,
        "cpus": os.cpu_count(),
        "stores": "SQLite (WAL) fact stores, every result recorded (deltas in batches)",
        "deltas_per_run": DELTAS,
        "host_log_level": "WARNING",
    }
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--relay":
        asyncio.run(serve_relay(int(sys.argv[2]), sys.argv[3]))
    else:
        sys.exit(asyncio.run(main()))
