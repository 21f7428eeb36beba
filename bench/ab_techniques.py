"""Paired A/B benchmark of one host technique against the same host without it (not part of `make bench`).

    uv run python bench/ab_techniques.py TECHNIQUE [--pairs N] [--seconds S] [--sequential RUNS | --ratio RUNS]

TECHNIQUE is one of `VARIANTS` (or `aa`: the host against an identical copy of itself, to calibrate).
With `--tree COMMIT`, variant B is `host/src` as it was at COMMIT (`git archive`) with TECHNIQUE's
workload and no patch: the current host against an earlier one, to find which change made a run dearer.
Variant B is a copy of `host/src` in a temp dir with the technique switched off by a textual patch of
the current sources (the script refuses to run if a patch no longer applies). Both hosts run at once,
on their own SQLite databases, against the same bench runner; the client measures them in windows of
`--seconds`, alternating the order pair by pair (AB, BA, AB, ...), so drift in the shared machine's load
hits both alike. Per window: runs finished per second (wall clock) and host-process CPU seconds per run
(psutil: user + system of the host process, robust to other processes' load). Prints each pair's B/A
ratios and their median and range; a figure outside the A/A range is a real difference.

With `--sequential RUNS`, each pair is RUNS sequential one-delta runs per host instead, alternating
the two hosts run by run (the order swapped pair by pair), and the figure is the B/A ratio of the
median time to the first result (the `ttfb_p50_ratio` workload of `bench_host.py`) and of host CPU
seconds per run.

With `--ratio RUNS`, each host gets a setup of its own (its own bench runner and bare relay, as in
`bench_host.py`), and each pair measures each setup's `ttfb_p50_ratio` (RUNS sequential runs, host and
relay alternated run by run); the figure is B's ratio over A's, so the machine's drift cancels inside
the ratio the target is stated in.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import bench_host  # (run as bench/ab_techniques.py: bench/ is on the path)
import grpc
import psutil

from agentrunner.v1 import host_service_pb2_grpc

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
REF_ID = "plugin:bench/burst/default"

#: technique -> (file under agentrunner_host, text with it, text without it, workload: text, concurrency).
#: A technique decided and deleted leaves its row here only in the commit that measured it (the held
#: run-start commit and `wire_result` were measured at 8f21303: docs/performance.md).
VARIANTS: dict[str, tuple[str, str, str, str, int]] = {
    # the host against an unchanged copy of itself: the spread every other figure is read against
    "aa": ("run/start.py", "", "", "burst:3", 20),
    # the host-wide delta batch at its size vs at a tenth of it: delta-heavy runs
    "delta_batch": ("run/journal.py", "DELTA_BATCH = 2048", "DELTA_BATCH = 204", "burst:200", 50),
    # the run start's transaction run on the event loop when no other write waits (and held open until
    # the runner call went out) vs always on the writer thread: measure with `--sequential` (the latency
    # it is for) and without
    "inline_start": (
        "store/incoming.py",
        "await self.db.run_write_held(write, then=write_later)",
        "await self.db.run_write(with_then(write, write_later)), None",
        "burst:3",
        20,
    ),
    # the run start's COMMIT (with the user message and the session) after the runner call went out
    # (`StartedRun.held`) vs before the runner is called (still inline on the event loop)
    "held_start": ("run/start.py", "hold=start.failure is None", "hold=False", "burst:3", 20),
}


def _variant(tmp: pathlib.Path, technique: str, tree: str | None = None) -> pathlib.Path:
    """A copy of the host package with `technique` switched off (or as it was at `tree`); its PYTHONPATH entry."""
    if tree is not None:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", tree, "host/src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        return tmp / "host" / "src"
    src = ROOT / "host" / "src"
    dest = tmp / "variant"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    path, with_it, without_it, _, _ = VARIANTS[technique]
    if with_it:
        target = dest / "agentrunner_host" / path
        text = target.read_text()
        if text.count(with_it) != 1:
            raise SystemExit(f"{technique}: {path} no longer contains {with_it!r} once; update VARIANTS")
        target.write_text(text.replace(with_it, without_it))
    return dest


def _host(tmp: pathlib.Path, name: str, runner: str, pythonpath: str) -> tuple[subprocess.Popen[str], str]:
    config = bench_host.host_config(tmp, runner, name)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")]))}
    py = sys.executable
    subprocess.run(
        [py, "-m", "agentrunner_host", "db", "upgrade", "--config", str(config)],
        check=True,
        capture_output=True,
        env={**os.environ, **env},
    )
    return bench_host.start(
        [py, "-m", "agentrunner_host", "serve", "--config", str(config), "--log-level", "WARNING"],
        "AGENTRUNNER_HOST_LISTENING",
        env,
    )


async def _window(
    stub: host_service_pb2_grpc.HostServiceStub, proc: psutil.Process, text: str, workers: int, seconds: float
) -> tuple[float, float]:
    """(runs per wall second, host CPU seconds per run) over one window."""
    runs = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal runs
        while time.perf_counter() < stop_at:
            async for _ in stub.Run(bench_host.request(text), timeout=60):
                pass
            runs += 1

    cpu0 = sum(proc.cpu_times()[:2])
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall = time.perf_counter() - started
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    return runs / wall, cpu / max(runs, 1)


async def _first_result(stub: host_service_pb2_grpc.HostServiceStub) -> float:
    """Seconds from starting one `Run` to its first result (the stream is read to its end)."""
    started = time.perf_counter()
    first = 0.0
    async for update in stub.Run(bench_host.request("hello"), timeout=30):
        if not first and update.HasField("result"):
            first = time.perf_counter() - started
    return first


async def _sequential_pair(
    stubs: dict[str, host_service_pb2_grpc.HostServiceStub],
    procs: dict[str, psutil.Process],
    order: list[str],
    runs: int,
) -> tuple[float, float]:
    """(ttfb p50 B/A, host CPU s/run B/A) over `runs` sequential runs per host, alternated run by run."""
    times: dict[str, list[float]] = {name: [] for name in order}
    cpu: dict[str, float] = dict.fromkeys(order, 0.0)
    for _ in range(runs):
        for name in order:
            cpu0 = sum(procs[name].cpu_times()[:2])
            times[name].append(await _first_result(stubs[name]))
            cpu[name] += sum(procs[name].cpu_times()[:2]) - cpu0
    p50 = {name: statistics.median(t) for name, t in times.items()}
    return p50["b"] / p50["a"], cpu["b"] / max(cpu["a"], 1e-9)


async def _pairs(
    pairs: int, label: str, pair: Callable[[list[str]], Awaitable[tuple[float, float]]]
) -> list[tuple[float, float]]:
    """`pair(order)` for `pairs` pairs, the order swapped pair by pair (AB, BA, ...); each pair's B/A
    ratios printed as they come."""
    out = []
    for i in range(pairs):
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        ratio = await pair(order)
        print(
            f"pair {i + 1} ({''.join(order).upper()}): {label} B/A x{ratio[0]:.3f}  CPU s/run B/A x{ratio[1]:.3f}",
            flush=True,
        )
        out.append(ratio)
    return out


async def _ratio_pair(
    setups: dict[str, dict[str, host_service_pb2_grpc.HostServiceStub]],
    procs: dict[str, psutil.Process],
    order: list[str],
    runs: int,
) -> tuple[float, float]:
    """(ttfb_p50_ratio B/A, host CPU s/run B/A): each setup's host/relay ratio over `runs` sequential
    runs per path, alternated run by run; the setups one after the other in `order`."""
    ratio: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for name in order:
        stubs = setups[name]
        times: dict[str, list[float]] = {"host": [], "relay": []}
        cpu0 = sum(procs[name].cpu_times()[:2])
        for i in range(runs):
            for path in ("host", "relay") if i % 2 == 0 else ("relay", "host"):
                times[path].append(await _first_result(stubs[path]))
        cpu[name] = (sum(procs[name].cpu_times()[:2]) - cpu0) / runs
        ratio[name] = statistics.median(times["host"]) / statistics.median(times["relay"])
    return ratio["b"] / ratio["a"], cpu["b"] / max(cpu["a"], 1e-9)


async def _measure_ratios(
    addresses: dict[str, dict[str, str]], pids: dict[str, int], pairs: int, runs: int
) -> list[tuple[float, float]]:
    channels = {
        (name, path): grpc.aio.insecure_channel(a) for name, s in addresses.items() for path, a in s.items()
    }
    setups = {
        name: {path: host_service_pb2_grpc.HostServiceStub(channels[name, path]) for path in s}
        for name, s in addresses.items()
    }
    procs = {k: psutil.Process(p) for k, p in pids.items()}
    try:
        for stubs in setups.values():  # warm-up
            for _ in range(40):
                for stub in stubs.values():
                    await _first_result(stub)
        return await _pairs(pairs, "ttfb_p50_ratio", lambda order: _ratio_pair(setups, procs, order, runs))
    finally:
        for channel in channels.values():
            await channel.close()


async def _measure(
    addresses: dict[str, str],
    pids: dict[str, int],
    text: str,
    workers: int,
    pairs: int,
    seconds: float,
    sequential: int = 0,
) -> list[tuple[float, float]]:
    channels = {k: grpc.aio.insecure_channel(v) for k, v in addresses.items()}
    stubs = {k: host_service_pb2_grpc.HostServiceStub(c) for k, c in channels.items()}
    procs = {k: psutil.Process(p) for k, p in pids.items()}
    try:
        for name in stubs:  # warm-up
            await _window(stubs[name], procs[name], text, workers, 1.0)

        async def windows(order: list[str]) -> tuple[float, float]:
            got = {name: await _window(stubs[name], procs[name], text, workers, seconds) for name in order}
            return got["b"][0] / got["a"][0], got["b"][1] / got["a"][1]

        if sequential:
            return await _pairs(
                pairs, "ttfb p50", lambda order: _sequential_pair(stubs, procs, order, sequential)
            )
        return await _pairs(pairs, "runs/s", windows)
    finally:
        for channel in channels.values():
            await channel.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("technique", choices=sorted(VARIANTS))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--tree", help="variant B: host/src at this commit instead of a patch")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--sequential",
        type=int,
        default=0,
        metavar="RUNS",
        help="time to first result of RUNS sequential runs",
    )
    mode.add_argument(
        "--ratio",
        type=int,
        default=0,
        metavar="RUNS",
        help="ttfb_p50_ratio of RUNS sequential runs per path, each host with its own runner and relay",
    )
    args = parser.parse_args()
    _, _, _, text, workers = VARIANTS[args.technique]
    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        try:
            srcs = {"a": str(ROOT / "host" / "src"), "b": str(_variant(tmp, args.technique, args.tree))}
            runners: dict[str, str] = {}
            relays: dict[str, str] = {}
            for name in srcs if args.ratio else ["a"]:
                runner, runners[name] = bench_host.start_runner({"PYTHONPATH": str(HERE)})
                procs.append(runner)
                if args.ratio:
                    relay, relays[name] = bench_host.start(
                        [sys.executable, str(HERE / "bench_host.py"), "--relay", "0", runners[name]],
                        "AGENTRUNNER_HOST_LISTENING",
                        {"PYTHONPATH": str(HERE)},
                    )
                    procs.append(relay)
            hosts: dict[str, str] = {}
            pids: dict[str, int] = {}
            for name, src in srcs.items():
                host, hosts[name] = _host(tmp, name, runners.get(name, runners["a"]), src)
                procs.append(host)
                pids[name] = host.pid
            if args.ratio:
                addresses = {name: {"host": hosts[name], "relay": relays[name]} for name in srcs}
                ratios = asyncio.run(_measure_ratios(addresses, pids, args.pairs, args.ratio))
            else:
                ratios = asyncio.run(
                    _measure(hosts, pids, text, workers, args.pairs, args.seconds, args.sequential)
                )
        finally:
            bench_host.stop(procs)
    what = f"{args.technique} at {args.tree}" if args.tree else args.technique
    first = "ttfb_p50_ratio" if args.ratio else "ttfb p50" if args.sequential else "runs/s"
    for i, label in enumerate((first, "host CPU s/run")):
        values = [r[i] for r in ratios]
        print(
            f"{what} B/A {label}: median x{statistics.median(values):.3f} range x{min(values):.3f}-x{max(values):.3f} ({len(values)} pairs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
