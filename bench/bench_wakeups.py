"""Wake-ups per run (issue 37; not a test): how often the threads of client, host and runner block and are
woken again for one sequential 1-delta run, and the host's CPU per run. One `key=value` line.

On this nested-virtualisation VM an idle vCPU halts, and every wake-up (a process hop, a thread hand-off,
a gRPC poller) costs CPU and latency: the count is the lever that holds on any machine. It is read from
`/proc/PID/task/TID/status` (`voluntary_ctxt_switches`: the thread blocked and was woken;
`nonvoluntary_ctxt_switches`: it was preempted, which follows the machine's load) before and after
`--runs` sequential runs (`hello`: one delta and a completed message, on a warmed-up channel), divided by
the runs. The processes: this client, the host via its CLI (SQLite, default configuration) and the bench
runner via the SDK CLI. Their Python threads are named at the OS level for the breakdown
(`threadnames/sitecustomize.py`, on the children's `PYTHONPATH` only).

- wakeups_per_run_host / _runner / _client: voluntary context switches per run, all threads;
- preemptions_per_run_host: involuntary ones (load-dependent: read with the load printed);
- host_cpu_us_per_run: host user + system CPU per run (µs);
- wakeups_per_s_idle_host: then the host's wake-ups per second over `--idle` seconds with no run (its
  background loops; they also count into the per-run figure, in proportion to the runs' wall time).

The breakdown by thread (event loop, gRPC's aio poller thread, gRPC's event engine threads, the SQLite
writer thread, executor threads) goes to stderr. `--tree COMMIT` runs host and SDK as they were at
COMMIT (`git archive`), for a before/after of the same count; `--env K=V` sets a variable in host and
runner (gRPC settings such as `GRPC_POLL_STRATEGY`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile

import grpc
import psutil
from bench_host import HERE, first_result, host_config, start, start_runner, stop

from agentrunner.v1 import host_service_pb2_grpc

ROOT = HERE.parent


def threads(pid: int) -> dict[int, tuple[str, int, int]]:
    """tid -> (OS thread name, voluntary, involuntary context switches) of every thread of `pid`."""
    out = {}
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines())
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        vol = int(fields["voluntary_ctxt_switches"])
        out[int(task.name)] = (name, vol, int(fields["nonvoluntary_ctxt_switches"]))
    return out


def group(pid: int, tid: int, name: str) -> str:
    """The kind of thread, by its OS name (Python threads named by `threadnames/sitecustomize.py`)."""
    if tid == pid:
        return "event loop (main)"
    if "_poll" in name:
        return "grpc aio poller"
    if name.startswith("event_engine"):
        return "grpc event engine"
    if name.startswith("grpc_") or name == "lifeguard":
        return "grpc other"
    if name.startswith("sqlite-writer"):
        return "sqlite writer"
    if name.startswith("asyncio_"):
        return "default executor"
    return f"other ({name})"


def per_run(
    before: dict[int, tuple[str, int, int]], after: dict[int, tuple[str, int, int]], pid: int, runs: int
) -> dict[str, tuple[float, float]]:
    """Thread kind -> (voluntary, involuntary) switches per run between two `threads` readings."""
    out: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for tid, (name, vol, invol) in after.items():
        _, vol0, invol0 = before.get(tid, (name, 0, 0))
        kind = group(pid, tid, name)
        out[kind][0] += (vol - vol0) / runs
        out[kind][1] += (invol - invol0) / runs
    return {k: (v[0], v[1]) for k, v in out.items()}


async def measure(
    address: str, pids: dict[str, int], runs: int, idle: float = 0
) -> tuple[dict[str, dict], float]:
    """(process -> thread kind -> switches per run, host CPU µs per run) over `runs` sequential runs;
    with `idle` seconds, also `host_idle`: the host's switches per second with no run."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        for _ in range(30):  # warm-up: connections, caches, the first runs' imports
            await first_result(stub)
        await asyncio.sleep(0.5)
        host = psutil.Process(pids["host"])
        before = {name: threads(pid) for name, pid in pids.items()}
        cpu0 = sum(host.cpu_times()[:2])
        for _ in range(runs):
            await first_result(stub)
        cpu = sum(host.cpu_times()[:2]) - cpu0
        after = {name: threads(pid) for name, pid in pids.items()}
        table = {name: per_run(before[name], after[name], pid, runs) for name, pid in pids.items()}
        if idle:  # the host with nothing to do: its background loops' wake-ups per second
            await asyncio.sleep(1.0)
            before = {"host": threads(pids["host"])}
            await asyncio.sleep(idle)
            table["host_idle"] = per_run(before["host"], threads(pids["host"]), pids["host"], round(idle))
    return table, cpu / runs * 1e6


def tree_src(tmp: pathlib.Path, commit: str) -> str:
    """host and SDK sources as they were at `commit`, for the children's PYTHONPATH."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "host/src", "sdk_python/src"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return os.pathsep.join([str(tmp / "host" / "src"), str(tmp / "sdk_python" / "src")])


def _name_threads() -> None:
    """This (client) process's threads named as the children's are (before gRPC starts any)."""
    spec = importlib.util.spec_from_file_location("threadnames", HERE / "threadnames" / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_WAKEUP_RUNS", "500")))
    parser.add_argument("--idle", type=float, default=10.0, help="then seconds of an idle host")
    parser.add_argument("--tree", help="host and SDK as they were at this commit")
    parser.add_argument("--env", action="append", default=[], help="K=V for host and runner")
    args = parser.parse_args()
    _name_threads()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        paths = [str(HERE / "threadnames"), str(HERE)]
        if args.tree:
            paths.insert(0, tree_src(tmp, args.tree))
        env = dict(e.split("=", 1) for e in args.env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, os.environ.get("PYTHONPATH")]))
        runner, runner_addr = start_runner(env)
        procs = [runner]
        try:
            config = host_config(tmp, runner_addr)
            py = sys.executable
            subprocess.run(
                [py, "-m", "agentrunner_host", "db", "upgrade", "--config", str(config)],
                check=True,
                capture_output=True,
                env={**os.environ, **env},
            )
            args_ = ["-m", "agentrunner_host", "serve", "--config", str(config), "--log-level", "WARNING"]
            host, address = start([py, *args_], "AGENTRUNNER_HOST_LISTENING", env)
            procs.append(host)
            pids = {"host": host.pid, "runner": runner.pid, "client": os.getpid()}
            table, cpu_us = asyncio.run(measure(address, pids, args.runs, args.idle))
        finally:
            stop(procs)
    print(f"# {args.runs} sequential 1-delta runs; {os.getloadavg()[0]:.1f} load", file=sys.stderr)
    idle = table.pop("host_idle", None)
    for name, kinds in table.items():
        for kind, (vol, invol) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
            print(f"# {name:6} {kind:28} wake-ups {vol:6.2f}  preemptions {invol:6.2f}", file=sys.stderr)
    line = {
        f"wakeups_per_run_{name}": round(sum(v for v, _ in kinds.values()), 1)
        for name, kinds in table.items()
    }
    if idle is not None:
        line["wakeups_per_s_idle_host"] = round(sum(v for v, _ in idle.values()), 1)
        for kind, (vol, _) in sorted(idle.items(), key=lambda kv: -kv[1][0]):
            print(f"# idle host {kind:28} wake-ups per second {vol:6.2f}", file=sys.stderr)
    line["preemptions_per_run_host"] = round(sum(i for _, i in table["host"].values()), 1)
    line["host_cpu_us_per_run"] = round(cpu_us)
    print(" ".join(f"{k}={v}" for k, v in line.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
