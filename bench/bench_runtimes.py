"""A runner through a connected runtime next to the same runner dialed directly (issue 34 benchmark; not a
test).

One host process serves both paths, so the figures isolate the transport: agent `dialed` reaches the
bench runner (`bench_runner.py`) served with `python -m agentrunner serve` (the host dials it), agent
`runtime` reaches the same runner started with `python -m agentrunner connect` (it dials the host; the
agent's `runtime_selector` sends its runs there). Measured in one run, the paths interleaved run by run
and window by window (ABBA) as in `bench_host.py`:

- runtime_ttfr_ratio: p50 time from starting `Run` to the first result, runtime / dialed (target <= 1.10);
- runtime_throughput_ratio: `message.delta` results per second with 100 concurrent runs, runtime / dialed
  (target >= 0.90);
- reconnect_s: median time from a dropped connection (a TCP relay between a runtime and the host cuts
  every connection) to the runtime connected again (its backoff starts at 0.1 s);
- runtime_kill_to_failed_s: median time from SIGKILL of a runtime with a live run to the client receiving
  that run's `run.failed` (`runner.stream_broken`).

Writes bench/results_runtimes.json and prints one key=value line.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
import yaml

from agentrunner.v1 import host_service_pb2_grpc

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_host import REF_ID, delta_window, first_result, request, start_host, start_runner, stop  # noqa: E402

DELTAS = int(os.environ.get("BENCH_DELTAS", "200"))
TTFB_RUNS = int(os.environ.get("BENCH_TTFB_RUNS", "300"))
CONCURRENCY = 100
TPUT_SECONDS = float(os.environ.get("BENCH_TPUT_SECONDS", "4"))
TPUT_ROUNDS = int(os.environ.get("BENCH_TPUT_ROUNDS", "6"))
REPEATS = int(os.environ.get("BENCH_RUNTIME_REPEATS", "5"))
KEY = "bench-runtime-key"
CONNECTED = "AGENTRUNNER_RUNTIME_CONNECTED"


def host_config(tmp: pathlib.Path, runner_addr: str) -> pathlib.Path:
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    agents = [
        {"id": "dialed", "runner_id": REF_ID, "event_types": ["*"], "timeout_seconds": 300},
        {
            "id": "runtime",
            "runner_id": REF_ID,
            "event_types": ["*"],
            "timeout_seconds": 300,
            "runtime_selector": {"role": "bench"},
        },
        {"id": "victim", "runner_id": REF_ID, "event_types": ["*"], "runtime_selector": {"role": "victim"}},
    ]
    config = tmp / "host.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": {"address": "127.0.0.1:0"},
                "database": {"url": f"sqlite+aiosqlite:///{tmp}/host.db"},
                "runners": [{"id": "ref", "address": runner_addr, "runner_ids": [REF_ID]}],
                "runtimes": {
                    "clients": [
                        {"id": "bench", "api_key_sha256": [digest], "runner_ids": [REF_ID], "max_slots": 256}
                    ]
                },
                "agents": agents,
                "bindings": [{"id": "all", "event": "*", "target": {"agent": "dialed"}}],
            }
        )
    )
    return config


class RuntimeProc:
    """A `python -m agentrunner connect` process whose stdout lines are read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, address: str, runtime_id: str, role: str, slots: int) -> RuntimeProc:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentrunner",
            "connect",
            address,
            "bench_runner:BenchRunner",
            "--runtime-id",
            runtime_id,
            "--label",
            f"role={role}",
            "--slots",
            str(slots),
            "--detect",
            "",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "AGENTRUNNER_RUNTIME_KEY": KEY},
            cwd=HERE,
        )
        runtime = cls(proc)
        await runtime.connected()
        return runtime

    async def connected(self, limit: float = 60) -> float:
        """Waits for the next `AGENTRUNNER_RUNTIME_CONNECTED` line; returns when it came (perf_counter)."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), limit)
            if not line:
                raise RuntimeError("the runtime exited")
            if line.startswith(CONNECTED.encode()):
                return time.perf_counter()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()


class Relay:
    """A TCP relay in front of the host that can cut every connection through it at once."""

    def __init__(self, target: str) -> None:
        self.host, port = target.rsplit(":", 1)
        self.port = int(port)
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()


async def compare(stub: host_service_pb2_grpc.HostServiceStub) -> dict[str, dict[str, object]]:
    """Both paths, interleaved (ABBA): ttfb run by run, throughput window by window."""
    paths = ["dialed", "runtime"]
    out: dict[str, dict[str, object]] = {p: {} for p in paths}
    times: dict[str, list[float]] = {p: [] for p in paths}
    for i in range(TTFB_RUNS + 20):
        for path in paths if i % 2 == 0 else reversed(paths):
            t = await first_result(stub, request("hello", f"bench-{path}", agent=path))
            if i >= 20:
                times[path].append(t)
    for path, t in times.items():
        out[path]["ttfb_p50_ms"] = statistics.median(t) * 1000
        out[path]["ttfb_p95_ms"] = statistics.quantiles(t, n=20)[18] * 1000
    totals = {p: [0, 0.0] for p in paths}
    for round_ in range(TPUT_ROUNDS):
        for path in paths if round_ % 2 == 0 else reversed(paths):
            deltas, seconds = await delta_window(
                stub,
                functools.partial(request, f"burst:{DELTAS}", f"bench-{path}", agent=path),
                TPUT_SECONDS,
                CONCURRENCY,
            )
            totals[path][0] += deltas
            totals[path][1] += seconds
            out[path].setdefault("delta_per_s_windows", []).append(round(deltas / seconds))  # type: ignore[union-attr]
    for path, (deltas, seconds) in totals.items():
        out[path]["delta_per_s"] = deltas / seconds
    return out


async def reconnects(host_addr: str) -> list[float]:
    """Seconds from cutting a runtime's connections (relay) to the runtime connected again."""
    relay = Relay(host_addr)
    through = await relay.start()
    runtime = await RuntimeProc.start(through, "bench-reconnect", "reconnect", 1)
    out = []
    try:
        for _ in range(REPEATS):
            await asyncio.sleep(0.5)
            cut = time.perf_counter()
            relay.cut()
            out.append(await runtime.connected() - cut)
    finally:
        await runtime.kill()
    return out


async def kills(stub: host_service_pb2_grpc.HostServiceStub, host_addr: str) -> list[float]:
    """Seconds from SIGKILL of a runtime with a live run to that run's `run.failed` at the client."""
    out = []
    for i in range(REPEATS):
        runtime = await RuntimeProc.start(host_addr, f"bench-victim-{i}", "victim", 1)
        call = stub.Run(request("trickle", "bench-victim", agent="victim"), timeout=60)
        assert (await call.read()).HasField("accepted")
        assert (await call.read()).HasField("result")  # (a result came: the run is live on the runtime)
        await asyncio.sleep(0.2)
        killed = time.perf_counter()
        await runtime.kill()
        failed_at = None
        while (update := await call.read()) is not grpc.aio.EOF:
            if update.HasField("result") and update.result.HasField("run_failed") and failed_at is None:
                failed_at = time.perf_counter()
                assert update.result.run_failed.code == "runner.stream_broken", update.result.run_failed
        assert failed_at is not None
        out.append(failed_at - killed)
    return out


async def main() -> int:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    runner, runner_addr = start_runner()
    procs: list[subprocess.Popen[str]] = [runner]
    results: dict[str, object] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = host_config(pathlib.Path(tmp), runner_addr)
            host, host_addr = start_host(config)
            procs.append(host)
            runtime = await RuntimeProc.start(host_addr, "bench-runtime", "bench", CONCURRENCY + 8)
            try:
                async with grpc.aio.insecure_channel(host_addr) as channel:
                    stub = host_service_pb2_grpc.HostServiceStub(channel)
                    await asyncio.sleep(1.0)  # (every slot stream open)
                    results.update(await compare(stub))
                    results["reconnect_s"] = await reconnects(host_addr)
                    results["kill_to_failed_s"] = await kills(stub, host_addr)
            finally:
                await runtime.kill()
                stop([host])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    d, r = results["dialed"], results["runtime"]  # type: ignore[assignment]
    summary = {
        "runtime_ttfr_ratio": round(r["ttfb_p50_ms"] / d["ttfb_p50_ms"], 3),  # type: ignore[index]
        "runtime_throughput_ratio": round(r["delta_per_s"] / d["delta_per_s"], 3),  # type: ignore[index]
        "reconnect_s": round(statistics.median(results["reconnect_s"]), 3),  # type: ignore[arg-type]
        "runtime_kill_to_failed_s": round(statistics.median(results["kill_to_failed_s"]), 3),  # type: ignore[arg-type]
    }
    results["summary"] = summary
    results["targets"] = {
        "runtime_ttfr_ratio": "<= 1.10",
        "runtime_throughput_ratio": ">= 0.90",
        "runtime_kill_to_failed_s": "<= 1.0",
    }
    results["setup"] = {
        "ttfb_runs": TTFB_RUNS,
        "concurrency": CONCURRENCY,
        "deltas_per_run": DELTAS,
        "throughput_seconds_per_window": TPUT_SECONDS,
        "throughput_windows_per_path": TPUT_ROUNDS,
        "repeats": REPEATS,
        "cpus": os.cpu_count(),
        "one host for both paths": "agent dialed -> endpoint, agent runtime -> runtime_selector",
    }
    (HERE / "results_runtimes.json").write_text(json.dumps(results, indent=2) + "\n")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
