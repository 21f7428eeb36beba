"""Per-run cost and footprint at scale (issue 37; not a test): one `key=value` line.

Fresh processes on loopback (this client, the host via its CLI, the bench runner via the SDK CLI), the
harness of `bench_host.py`. Memory is read from /proc (RSS, `VmHWM`): unlike CPU timings on this shared
2-core VM it barely moves with the machine's load, so single figures are comparable between runs.

- open_runs: `stall` runs (each in a conversation of its own) held open at once on one host with one
  runner process (default limits): how many of the 10,000 were accepted (stderr says what the others
  got);
- rss_kib_per_open_run_1k / _10k: host RSS growth per open run with 1,000 / 10,000 open
  (`rss_kib_per_open_run_runner_10k`: the SDK runner's, the same runs), read once RSS has settled
  (two readings a second apart without a move); open_seconds_10k: from the first `Run` to the last
  `accepted`; open_cpu_seconds_host_10k / _runner_10k: the CPU each process spent on it (a steadier
  figure than the wall time under the shared machine's load);
- idle_rss_mib_host / _runner: RSS 1 s after the ready line (host: default configuration, SQLite, one
  runner endpoint), median over `--starts` fresh processes; start_seconds_host / _runner: spawn to the
  ready line, median (wall time: this figure does move with the machine's load);
- hwm_mib_streaming: host RSS high-water (`VmHWM`) of a fresh host after 50 runs x 1,000 deltas;
- ttfr_p99_ms_under_load: time to first result of new runs started one after another while those 50
  runs stream (p99).

`--fast` (or `BENCH_SCALE_FAST=1`): 1,000 open runs and no 10k phase, one start each, 50 x 200 deltas.
Child processes write bytecode (`PYTHONDONTWRITEBYTECODE` unset) and one untimed start of each warms
the caches: the figures are a warm start's, as in a deployment with compiled bytecode.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from bench_host import HERE, host_config, request, start, start_runner, stop

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc

#: the children inherit this process's environment (as in `bench_host.py`), with bytecode caches on
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """`field` of /proc/PID/status in KiB (`VmRSS` now, `VmHWM` its high-water mark)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settled_rss(pids: dict[str, int], limit: float = 60.0) -> dict[str, int]:
    """RSS of each process once it has settled: read every second until no process moved more than
    max(256 KiB, 0.5 %) over two readings in a row (calls still queued in gRPC core, the runner's side of
    the last runs and the allocator take a while after the last `accepted` with 10,000 runs), at most
    `limit` seconds."""
    last = {name: rss_kib(pid) for name, pid in pids.items()}
    quiet = 0
    deadline = time.monotonic() + limit
    while quiet < 2 and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = {name: rss_kib(pid) for name, pid in pids.items()}
        still = all(abs(now[n] - last[n]) <= max(256, last[n] // 200) for n in now)
        quiet = quiet + 1 if still else 0
        last = now
    return last


def spawn(args: list[str], marker: str) -> tuple[subprocess.Popen[str], str, float]:
    """`start`, timed: (process, address, seconds to the ready line)."""
    began = time.perf_counter()
    proc, address = start(args, marker)
    return proc, address, time.perf_counter() - began


def spawn_runner() -> tuple[subprocess.Popen[str], str, float]:
    began = time.perf_counter()
    proc, address = start_runner()
    return proc, address, time.perf_counter() - began


class Host:
    """A host process on its own SQLite database under `tmp` (migrated once per name)."""

    def __init__(self, tmp: pathlib.Path, runner_addr: str, name: str) -> None:
        self.config = host_config(tmp, runner_addr, name)
        subprocess.run(
            [sys.executable, "-m", "agentrunner_host", "db", "upgrade", "--config", str(self.config)],
            check=True,
            capture_output=True,
        )

    def spawn(self) -> tuple[subprocess.Popen[str], str, float]:
        args = ["-m", "agentrunner_host", "serve", "--config", str(self.config), "--log-level", "WARNING"]
        return spawn([sys.executable, *args], "AGENTRUNNER_HOST_LISTENING")


def idle(starts: int, tmp: pathlib.Path) -> dict[str, float]:
    """Start seconds and idle RSS, host and runner, median over `starts` fresh processes each (after one
    untimed start of each, which writes the bytecode caches)."""
    runner_t: list[float] = []
    runner_rss: list[float] = []
    host_t: list[float] = []
    host_rss: list[float] = []
    for i in range(starts + 1):
        runner, runner_addr, took = spawn_runner()
        try:
            host, _, host_took = Host(tmp, runner_addr, f"idle{i}").spawn()
            try:
                time.sleep(1.0)
                if i:  # the first start of each is the warm-up
                    runner_t.append(took)
                    host_t.append(host_took)
                    runner_rss.append(rss_kib(runner.pid) / 1024)
                    host_rss.append(rss_kib(host.pid) / 1024)
            finally:
                stop([host])
        finally:
            stop([runner])
    return {
        "idle_rss_mib_host": round(statistics.median(host_rss), 1),
        "idle_rss_mib_runner": round(statistics.median(runner_rss), 1),
        "start_seconds_host": round(statistics.median(host_t), 3),
        "start_seconds_runner": round(statistics.median(runner_t), 3),
    }


def stall(i: int) -> host_service_pb2.HostServiceRunRequest:
    """A `stall` run in a conversation of its own (open runs are chats: one run per conversation)."""
    req = request("stall")
    req.event.conversation.conversation_id = f"open-{i}"
    return req


async def hold_open(address: str, pids: dict[str, int], count: int) -> dict[str, float]:
    """Opens `count` `stall` runs at once, waits for every answer (`accepted` or a refusal), reads the
    RSS growth per accepted run of each process in `pids` once it has settled (`settled_rss`) and the
    CPU seconds each spent from the first `Run` to then, then cancels them all."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        await asyncio.sleep(1.0)
        before = {name: rss_kib(pid) for name, pid in pids.items()}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        began = time.perf_counter()
        calls = [stub.Run(stall(i), timeout=600) for i in range(count)]
        answers = await asyncio.gather(*(c.read() for c in calls), return_exceptions=True)
        took = time.perf_counter() - began
        accepted = sum(1 for a in answers if not isinstance(a, BaseException) and a.HasField("accepted"))
        failed = collections.Counter(
            a.code().name if isinstance(a, grpc.aio.AioRpcError) else type(a).__name__
            for a in answers
            if isinstance(a, BaseException)
        )
        if failed:
            print(f"# {count} runs: {accepted} accepted, not accepted: {dict(failed)}", file=sys.stderr)
        after = await settled_rss(pids)
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        for c in calls:
            c.cancel()
        await asyncio.sleep(1.0)
    out = {"accepted": accepted, "open_seconds": took}
    for name in pids:
        out[f"kib_{name}"] = (after[name] - before[name]) / max(accepted, 1)
        out[f"cpu_{name}"] = cpu[name]
    return out


async def streaming(address: str, pid: int, deltas: int, probes: int) -> dict[str, float]:
    """50 runs of `deltas` deltas each, streaming together; meanwhile new 1-delta runs one after another,
    each timed to its first result. Then the host's RSS high-water mark."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)

        async def burst() -> None:
            async for _ in stub.Run(request(f"burst:{deltas}"), timeout=300):
                pass

        accepted: list[float] = []

        async def probe() -> float:
            began = time.perf_counter()
            async for update in stub.Run(request("hello"), timeout=60):
                if update.HasField("accepted"):
                    accepted.append(time.perf_counter() - began)
                if update.HasField("result"):
                    return time.perf_counter() - began
            raise RuntimeError("a probe run ended without a result")

        await probe()  # (the channel connected, the first run's imports done)
        before = rss_kib(pid) / 1024
        load = [asyncio.create_task(burst()) for _ in range(50)]
        times: list[float] = []
        while not all(t.done() for t in load) or len(times) < probes:
            times.append(await probe())
        await asyncio.gather(*load)
    slowest = sorted(zip(times, accepted[1:], strict=False), reverse=True)[:5]
    print(
        "# slowest probes (first result / accepted, ms): "
        + ", ".join(f"{t * 1000:.0f}/{a * 1000:.0f}" for t, a in slowest),
        file=sys.stderr,
    )
    quantiles = statistics.quantiles(times, n=100)
    return {
        "hwm_mib_streaming": round(rss_kib(pid, "VmHWM") / 1024, 1),
        "rss_mib_before_streaming": round(before, 1),
        "ttfr_p99_ms": quantiles[98] * 1000,
        "ttfr_p50_ms": quantiles[49] * 1000,
    }


def run_host(tmp: pathlib.Path, runner_addr: str, name: str, job):  # type: ignore[no-untyped-def]
    host, host_addr, _ = Host(tmp, runner_addr, name).spawn()
    try:
        return asyncio.run(job(host_addr, host.pid))
    finally:
        stop([host], timeout=60)


def streaming_phase(tmp: pathlib.Path, deltas: int) -> dict[str, float]:
    """`streaming` on a fresh runner and host: the high-water mark and the probes' p99."""
    runner, runner_addr, _ = spawn_runner()
    try:
        flow = run_host(tmp, runner_addr, "stream", lambda a, p: streaming(a, p, deltas, 200))
    finally:
        stop([runner])
    return {
        "hwm_mib_streaming": flow["hwm_mib_streaming"],
        "ttfr_p99_ms_under_load": round(flow["ttfr_p99_ms"], 1),
        "ttfr_p50_ms_under_load": round(flow["ttfr_p50_ms"], 1),
        "rss_mib_before_streaming": flow["rss_mib_before_streaming"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", default=os.environ.get("BENCH_SCALE_FAST") == "1")
    parser.add_argument("--starts", type=int, default=None, help="fresh starts per process (median)")
    parser.add_argument(
        "--phase", action="append", choices=["idle", "open", "streaming"], help="only these phases (repeat)"
    )
    args = parser.parse_args()
    phases = set(args.phase or ["idle", "open", "streaming"])
    starts = args.starts or (1 if args.fast else 5)
    counts = [1000] if args.fast else [1000, 10_000]
    if "open" not in phases:
        counts = []
    line: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        if "idle" in phases:
            line.update(idle(starts, tmp))
        for count in counts:  # a fresh runner and host per phase: no memory freed by a phase before
            runner, runner_addr, _ = spawn_runner()
            try:
                held = run_host(
                    tmp,
                    runner_addr,
                    f"open{count}",
                    lambda a, p, n=count, r=runner.pid: hold_open(a, {"host": p, "runner": r}, n),
                )
            finally:
                stop([runner])
            label = "1k" if count == 1000 else "10k"
            line["open_runs"] = held["accepted"]
            line[f"rss_kib_per_open_run_{label}"] = round(held["kib_host"], 1)
            line[f"rss_kib_per_open_run_runner_{label}"] = round(held["kib_runner"], 1)
            line[f"open_seconds_{label}"] = round(held["open_seconds"], 2)
            line[f"open_cpu_seconds_host_{label}"] = round(held["cpu_host"], 2)
            line[f"open_cpu_seconds_runner_{label}"] = round(held["cpu_runner"], 2)
        if "streaming" in phases:
            line.update(streaming_phase(tmp, 200 if args.fast else 1000))
    order = [
        "open_runs",
        "rss_kib_per_open_run_1k",
        "rss_kib_per_open_run_10k",
        "open_seconds_10k",
        "idle_rss_mib_host",
        "idle_rss_mib_runner",
        "start_seconds_host",
        "start_seconds_runner",
        "hwm_mib_streaming",
        "ttfr_p99_ms_under_load",
    ]
    keys = [k for k in order if k in line] + sorted(k for k in line if k not in order)
    print(" ".join(f"{k}={line[k]}" for k in keys), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
