"""Paired A/B of the history page's LIMIT written into the SQL (not part of `make bench`).

    uv run python bench/ab_history.py [--rounds N] [--iterations N] [--aa]

The `bench_history.py` setup (10,000 items on a throwaway PostgreSQL, a 50-item `ListHistory` page
from the middle, loopback gRPC through the real fact handler), served by one server with three
methods: A, the page as the host reads it (the LIMIT written in: `Database.driver_rows(literal=...)`,
PostgreSQL's generic plan), B, the same page with the LIMIT a bound parameter (as it was read before:
a custom plan, so a planning pass, on every call), and the bare echo. The three calls alternate in one
loop, the order rotated and reversed from call to call, so the machine's drift hits them alike. Each
round starts a fresh cluster; prints per round the p50s, both `history_page_p50_ratio`s and A/B, then
the median and range of A/B. `--aa` serves A twice (the spread the A/B figure is read against).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_history  # (run as bench/ab_history.py: bench/ is on the path)
import grpc

from agentrunner.v1 import proxy_service_pb2 as pb
from agentrunner_host.store import transcript_read
from agentrunner_host.store.db import Database
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings
from agentrunner_host.store.migrate import upgrade

#: whether the call being served writes the LIMIT in (set by the method's handler before it reads)
_LITERAL = {"on": True}
_page_statement = transcript_read._page_statement
_driver_rows = Database.driver_rows


def _switchable() -> None:
    """The host's page read with the technique switched per call (`_LITERAL`)."""

    def page_statement(*shape: bool) -> Any:
        *rest, literal_limit = shape
        return _page_statement(*rest, literal_limit and _LITERAL["on"])

    async def driver_rows(
        self: Database, stmt: Any, params: dict[str, Any], literal: tuple[str, ...] = ()
    ) -> list[tuple[Any, ...]]:
        return await _driver_rows(self, stmt, params, literal if _LITERAL["on"] else ())

    transcript_read._page_statement = page_statement  # type: ignore[assignment]
    Database.driver_rows = driver_rows  # type: ignore[method-assign]


async def _round(url: str, iterations: int, aa: bool) -> dict[str, float]:
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    try:
        stores = await FactStores.open(db, FactStoreSettings(artifact_dir=Path(tempfile.mkdtemp())))
        await bench_history._fill(stores)
        read_page = bench_history.run_history_reader(stores)

        def page(literal: bool) -> grpc.RpcMethodHandler:
            async def handle(request: pb.ListHistoryRequest, context: object) -> pb.ListHistoryResponse:
                _LITERAL["on"] = literal
                return await read_page(request)

            return grpc.unary_unary_rpc_method_handler(
                handle,
                request_deserializer=pb.ListHistoryRequest.FromString,
                response_serializer=pb.ListHistoryResponse.SerializeToString,
            )

        async def echo(request: bytes, context: object) -> bytes:
            return request

        methods = {"Echo": grpc.unary_unary_rpc_method_handler(echo), "A": page(True), "B": page(aa)}
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Bench", methods),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            return await _measure(
                port, stores.transcript.cursor("bench", bench_history.ITEMS // 2), iterations
            )
        finally:
            await server.stop(0)
    finally:
        await db.dispose()


async def _measure(port: int, cursor: str, iterations: int) -> dict[str, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = pb.ListHistoryRequest(before_cursor=cursor, limit=bench_history.PAGE)
        pages = {
            name: channel.unary_unary(
                f"/bench.Bench/{name}",
                request_serializer=pb.ListHistoryRequest.SerializeToString,
                response_deserializer=pb.ListHistoryResponse.FromString,
            )
            for name in "AB"
        }
        first_a, first_b = await pages["A"](request, timeout=10), await pages["B"](request, timeout=10)
        assert first_a == first_b and len(first_a.items) == bench_history.PAGE  # the same page either way
        calls: list[tuple[str, Any, Any]] = [
            ("bare", channel.unary_unary("/bench.Bench/Echo"), b"x" * 64),
            ("A", pages["A"], request),
            ("B", pages["B"], request),
        ]
        for _ in range(20):  # warm-up (psycopg prepares a statement on its fifth run)
            for _, call, message in calls:
                await call(message, timeout=10)
        samples: dict[str, list[float]] = {name: [] for name, _, _ in calls}
        for i in range(iterations):
            order = calls[i % 3 :] + calls[: i % 3]
            for name, call, message in order if (i // 3) % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                await call(message, timeout=10)
                samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=900)
    parser.add_argument("--aa", action="store_true", help="serve A twice (calibration)")
    args = parser.parse_args()
    _switchable()
    ratios = []
    for i in range(args.rounds):
        with bench_history.throwaway_postgres() as url:
            p50 = asyncio.run(_round(url, args.iterations, args.aa))
        ratios.append(p50["A"] / p50["B"])
        print(
            f"round {i + 1}: bare {p50['bare']:.3f} ms, A {p50['A']:.3f} ms (ratio {p50['A'] / p50['bare']:.2f}),"
            f" B {p50['B']:.3f} ms (ratio {p50['B'] / p50['bare']:.2f}), A/B x{ratios[-1]:.3f}",
            flush=True,
        )
    what = "A/A" if args.aa else "A/B (LIMIT written in / bound)"
    print(f"{what}: median x{statistics.median(ratios):.3f} range x{min(ratios):.3f}-x{max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
