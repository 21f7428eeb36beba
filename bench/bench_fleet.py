"""Fleet benchmark (issue 36): host replicas as `agentrunner-host serve` processes on one PostgreSQL,
the fleet test runner (`tests/fleet/fleet_runner.py`) as their runner.

- `runs_per_s_N`, `deltas_per_s_N`: the same client load (`--clients` concurrent clients, each running
  `stream DELTAS 0` runs back to back for `--seconds`) through 1 replica, then spread over 3;
- `cpu_ms_per_run_start`, `cpu_us_per_delta`: one replica's CPU (user + system) per run of no delta,
  and per delta on top; `db_xacts_per_run`, `db_rows_per_run` (no delta), `db_xacts_per_run_N_deltas`,
  `db_xacts_per_s_1` / `_3`: the database's side (pg_stat_database, the whole cluster);
- `attach_cross_replica_ms`: `AttachRun` on replica b of a run open on replica a, to its first item
  (median);
- `cancel_cross_replica_p50_ms` / `_p99_ms`: `CancelRun` sent to replica b for a run open on a, to the
  run's `finished` on its client's stream on a (the signal crosses the fleet bus, reaches the runner's
  control stream and the runner's own terminal comes back);
  (`cancel_same_replica_*`: the same sent to replica a itself, the baseline);
- `runtime_first_result_cross_replica_ms`: a run opened on replica b whose only runtime is connected to
  replica a (the run is handed to a and relayed back to b), `Run` to its first result (median);
  `runtime_first_result_same_replica_ms`: the same run opened on a itself (the baseline; the pairs are
  taken alternately, in swapped order, so load drifts hit both alike);
- `takeover_s`: SIGKILL of the replica holding an open run, to its `finished` (interrupted) read through
  another replica (`fleet.lease_seconds` LEASE; target ≤ LEASE + 2 s).

Prints one `key=value` line. Usage: `uv run python bench/bench_fleet.py [--clients 12] [--seconds 8]`.
Needs Debian's `postgresql` binaries (a throwaway cluster is started).
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrunner.v1 import common_pb2, host_service_pb2  # noqa: E402
from agentrunner_host.store.migrate import upgrade  # noqa: E402
from tests.fleet.support import (  # noqa: E402
    LEASE,
    RUNTIME_KEY,
    RUNTIME_TARGET,
    Replica,
    read_rest,
    replica_config,
    run_request,
    runtime_replica_config,
    start_runner,
)
from tests.hardening.conftest import OwnPostgres, Proc  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Bench:
    def __init__(self, tmp: pathlib.Path, pg: OwnPostgres) -> None:
        self.tmp, self.pg = tmp, pg
        self.runner: Proc = start_runner(tmp)
        self.replicas: dict[str, Replica] = {}
        self.channels: dict[str, Any] = {}

    def fleet(self, names: str) -> None:
        """A fresh database and replicas `names` on it (each its own runner calls: no advertising)."""
        self.close_replicas()
        url = self.pg.create_database()
        upgrade(url)
        from tests.fleet.support import free_port

        for name in names:
            config = replica_config(name, free_port(), url, self.runner.address, None)
            self.replicas[name] = Replica(self.tmp / names, name, config)

    def stub(self, name: str) -> Any:
        from agentrunner.v1 import host_service_pb2_grpc

        return host_service_pb2_grpc.HostServiceStub(self.channels[name])

    async def open_channels(self) -> None:
        import grpc

        self.channels = {name: grpc.aio.insecure_channel(r.address) for name, r in self.replicas.items()}

    async def close_channels(self) -> None:
        for channel in self.channels.values():
            await channel.close()
        self.channels = {}

    def close_replicas(self) -> None:
        for replica in self.replicas.values():
            replica.kill(signal.SIGTERM)
        self.replicas = {}

    def cost(self) -> tuple[float, int, int]:
        """The replicas' CPU seconds so far, and the database's transactions (read or write) and written rows so far."""
        import psutil

        cpu = sum(sum(psutil.Process(r.popen.pid).cpu_times()[:2]) for r in self.replicas.values())
        ((commits, rows),) = self.pg_stats()
        return cpu, int(commits), int(rows)

    def pg_stats(self) -> list[Any]:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.pg.port, user="postgres", dbname="postgres") as conn:
            return list(
                conn.execute(
                    "SELECT sum(xact_commit), sum(tup_inserted + tup_updated + tup_deleted) FROM pg_stat_database"
                ).fetchall()
            )

    async def costed_load(self, clients: int, seconds: float, deltas: int) -> dict[str, float]:
        """`load`, with the replicas' CPU and the database's transactions (read or write) and written rows per run."""
        before = self.cost()
        runs_s, deltas_s = await self.load(clients, seconds, deltas)
        await asyncio.sleep(0.6)  # (PostgreSQL's statistics are reported every 500 ms)
        after = self.cost()
        runs = max(runs_s * seconds, 1.0)
        return {
            "runs_s": runs_s,
            "deltas_s": deltas_s,
            "cpu_ms_per_run": (after[0] - before[0]) * 1000 / runs,
            "xacts_per_run": (after[1] - before[1]) / runs,
            "rows_per_run": (after[2] - before[2]) / runs,
        }

    async def load(self, clients: int, seconds: float, deltas: int) -> tuple[float, float]:
        """`clients` clients, client i on replica i mod n, running runs back to back: runs/s, deltas/s."""
        names = sorted(self.replicas)
        until = time.monotonic() + seconds
        counts = [0, 0]

        async def client(i: int) -> None:
            stub = self.stub(names[i % len(names)])
            n = 0
            while time.monotonic() < until:
                n += 1
                updates = await read_rest(
                    stub.Run(run_request(f"stream {deltas} 0", f"load-{i}-{n}"), timeout=60)
                )
                if updates and updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED:
                    counts[0] += 1
                    counts[1] += sum(
                        1 for u in updates if u.HasField("result") and u.result.HasField("message_delta")
                    )

        started = time.monotonic()
        await asyncio.gather(*(client(i) for i in range(clients)))
        took = time.monotonic() - started
        return counts[0] / took, counts[1] / took

    async def hold(self, name: str, conversation: str) -> tuple[Any, str]:
        call = self.stub(name).Run(run_request("hold 60", conversation), timeout=120)
        run_id = (await call.read()).accepted.run_id
        await call.read()  # its delta: the runner's control stream is open
        return call, run_id

    async def attach_ms(self, samples: int) -> float:
        times = []
        for i in range(samples):
            call, run_id = await self.hold("a", f"attach-{i}")
            started = time.monotonic()
            follower = self.stub("b").AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=30)
            await follower.read()
            times.append((time.monotonic() - started) * 1000)
            follower.cancel()
            await self.stub("b").CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id), timeout=10)
            await read_rest(call)
        return statistics.median(times)

    async def cancel_ms(self, samples: int, via: str) -> list[float]:
        """`CancelRun` sent to replica `via` for runs open on `a`, to each run's `finished` (ms)."""
        times = []
        for i in range(samples):
            call, run_id = await self.hold("a", f"cancel-{via}-{i}")
            await asyncio.sleep(0.1)
            started = time.monotonic()
            await self.stub(via).CancelRun(
                host_service_pb2.CancelRunRequest(run_id=run_id, reason="bench"), timeout=10
            )
            rest = await read_rest(call)
            times.append((time.monotonic() - started) * 1000)
            assert rest[-1].finished.status == common_pb2.RUN_STATUS_CANCELLED, rest[-1]
        return times

    async def takeover_s(self) -> float:
        call, run_id = await self.hold("c", "takeover")
        self.replicas["c"].kill(signal.SIGKILL)
        killed = time.monotonic()
        call.cancel()
        updates = await read_rest(
            self.stub("a").AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=60)
        )
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_INTERRUPTED, updates[-1]
        return time.monotonic() - killed

    async def runtime_first_result_ms(self, samples: int) -> tuple[float, float]:
        """Replicas a and b on a fresh database with runs on runtimes only, one runtime connected to a:
        the median time from `Run` to the first result, opened on b (handed to a) and on a itself."""
        from tests.fleet.support import free_port
        from tests.runtimes.processes import start_runtime

        self.close_replicas()
        url = self.pg.create_database()
        upgrade(url)
        for name in "ab":
            config = runtime_replica_config(name, free_port(), url)
            self.replicas[name] = Replica(self.tmp / "runtimes", name, config)
        runtime = start_runtime(
            self.replicas["a"].address, "bench-rt", key=RUNTIME_KEY, target=RUNTIME_TARGET
        )
        try:
            await self.open_channels()
            times: dict[str, list[float]] = {"a": [], "b": []}
            await asyncio.sleep(1.5)  # (b reads a's runtime from the database: its heartbeats are written)
            for i in range(samples + 1):
                for via in "ab" if i % 2 else "ba":
                    started = time.monotonic()
                    call = self.stub(via).Run(run_request("stream 1 0", f"rt-{via}-{i}"), timeout=30)
                    while not (await call.read()).HasField("result"):
                        pass
                    if i:  # (the first pair warms up)
                        times[via].append((time.monotonic() - started) * 1000)
                    await read_rest(call)
            await self.close_channels()
            return statistics.median(times["b"]), statistics.median(times["a"])
        finally:
            runtime.stop()


async def measure(bench: Bench, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    for names in ("a", "abc"):
        bench.fleet(names)
        await bench.open_channels()
        await bench.load(len(names), 1.0, args.deltas)  # warm-up
        if names == "a":  # one replica's cost: a run without deltas, then with them
            bare = await bench.costed_load(args.clients, args.seconds / 2, 0)
            out["cpu_ms_per_run_start"] = bare["cpu_ms_per_run"]
            out["db_xacts_per_run"], out["db_rows_per_run"] = bare["xacts_per_run"], bare["rows_per_run"]
        n = len(names)
        costed = await bench.costed_load(args.clients, args.seconds, args.deltas)
        out[f"runs_per_s_{n}"], out[f"deltas_per_s_{n}"] = costed["runs_s"], costed["deltas_s"]
        out[f"db_xacts_per_s_{n}"] = costed["xacts_per_run"] * costed["runs_s"]
        if names == "a":
            out["cpu_us_per_delta"] = (
                (costed["cpu_ms_per_run"] - out["cpu_ms_per_run_start"]) * 1000 / args.deltas
            )
            out[f"db_xacts_per_run_{args.deltas}_deltas"] = costed["xacts_per_run"]
        if names == "abc":
            out["attach_cross_replica_ms"] = await bench.attach_ms(args.samples)
            cancels = await bench.cancel_ms(args.samples, "b")
            out["cancel_cross_replica_p50_ms"] = _pct(cancels, 0.5)
            out["cancel_cross_replica_p99_ms"] = _pct(cancels, 0.99)
            same = await bench.cancel_ms(args.samples, "a")  # the baseline: sent to the run's own replica
            out["cancel_same_replica_p50_ms"] = _pct(same, 0.5)
            out["cancel_same_replica_p99_ms"] = _pct(same, 0.99)
            out["takeover_s"] = await bench.takeover_s()
            out["lease_s"] = LEASE
        await bench.close_channels()
    cross, same = await bench.runtime_first_result_ms(args.samples)
    out["runtime_first_result_cross_replica_ms"], out["runtime_first_result_same_replica_ms"] = cross, same
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--deltas", type=int, default=50)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="agentrunner-bench-fleet-"))
    pg_root = pathlib.Path(tempfile.mkdtemp(prefix="agentrunner-bench-fleet-pg-"))  # (the postgres user's)
    pg = OwnPostgres(pg_root)
    bench = Bench(root, pg)
    try:
        out = asyncio.run(measure(bench, args))
    finally:
        bench.close_replicas()
        bench.runner.kill()
        pg.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(pg_root, ignore_errors=True)
    print(
        " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()), flush=True
    )
    cancel_ok = out["cancel_cross_replica_p99_ms"] <= 100
    takeover_ok = out["takeover_s"] <= LEASE + 2
    return 0 if cancel_ok and takeover_ok else 1


if __name__ == "__main__":
    sys.exit(main())
