"""History paging benchmark: a 50-item `ListHistory` page from a 10,000-item transcript on PostgreSQL,
served over loopback gRPC through the real fact handler, against a bare unary gRPC round trip in the
same process and run (the two calls alternate in one loop, so both see the same conditions). Prints `history_page_p50_ratio=…` (target ≤ 3).

Usage: `uv run python bench/bench_history.py [--database-url postgresql+psycopg://…] [--iterations N]`.
Without a URL a throwaway PostgreSQL cluster is started (needs Debian's `postgresql` binaries).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import pwd
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
from sqlalchemy import insert

from agentrunner.v1 import proxy_service_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrunner_host.ports import AuthorizationSnapshot, RunSession, hash_token, utcnow  # noqa: E402
from agentrunner_host.proxy.api import ProxyCall  # noqa: E402
from agentrunner_host.proxy.facts import fact_handlers  # noqa: E402
from agentrunner_host.store.db import Database  # noqa: E402
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings  # noqa: E402
from agentrunner_host.store.migrate import upgrade  # noqa: E402
from agentrunner_host.store.schema import ConversationRow, TranscriptRow  # noqa: E402

ITEMS = 10_000
PAGE = 50


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    from tests.conftest import _find_pg_bin, _free_port, _run

    bin_dir = _find_pg_bin()
    if bin_dir is None:
        raise SystemExit(
            "PostgreSQL binaries not found: apt-get install -y postgresql, or pass --database-url"
        )
    as_user = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="agentrunner-bench-pg-"))
    sock = root / "sock"
    sock.mkdir()
    if as_user:
        entry = pwd.getpwnam(as_user)
        for path in (root, sock):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    data = root / "data"
    _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"], as_user)
    port = _free_port()
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"],
        as_user,
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(Exception):
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], as_user)
        shutil.rmtree(root, ignore_errors=True)


async def _fill(stores: FactStores) -> None:
    now = utcnow()
    rows = [
        {
            "transcript_id": f"tr_{i}",
            "conversation_id": "bench",
            "thread_id": "",
            "seq": i,
            "role": "user" if i % 2 else "assistant",
            "item_type": "message",
            "content": f"message number {i} " + "lorem ipsum dolor sit amet " * 4,
            "contents": [],
            "artifacts": [],
            "event_id": f"evt_{i}",
            "run_id": "",
            "meta": {},
            "created_at": now,
        }
        for i in range(1, ITEMS + 1)
    ]
    async with stores.db.write() as s:
        await s.execute(
            insert(ConversationRow).values(conversation_id="bench", last_seq=ITEMS, created_at=now)
        )
        for start in range(0, ITEMS, 2000):
            await s.execute(insert(TranscriptRow), rows[start : start + 2000])
    async with stores.db.engine.connect() as conn:
        await conn.exec_driver_sql("ANALYZE transcript_items")
        await conn.commit()  # statistics are transactional: without the commit the table had none


async def _interleaved_p50(
    bare: grpc.aio.UnaryUnaryMultiCallable,
    bare_request: object,
    page: grpc.aio.UnaryUnaryMultiCallable,
    page_request: object,
    iterations: int,
) -> tuple[float, float]:
    """p50 of both calls, measured alternately in one loop (same process, channel, server and moment),
    so machine noise hits both sides alike; the order within a pair alternates too."""
    for _ in range(20):  # warm-up
        await bare(bare_request, timeout=10)
        await page(page_request, timeout=10)
    bare_samples: list[float] = []
    page_samples: list[float] = []
    calls = ((bare, bare_request, bare_samples), (page, page_request, page_samples))
    for i in range(iterations):
        for stub, request, samples in calls if i % 2 == 0 else calls[::-1]:
            start = time.perf_counter()
            await stub(request, timeout=10)
            samples.append(time.perf_counter() - start)
    return statistics.median(bare_samples), statistics.median(page_samples)


def run_history_reader(
    stores: FactStores,
) -> Callable[[pb.ListHistoryRequest], Awaitable[pb.ListHistoryResponse]]:
    """The real `ListHistory` fact handler as a run of the benchmark's conversation calls it (its
    session and snapshot granting history pages), without the proxy's transport."""
    snapshot = AuthorizationSnapshot(
        run_id="run_bench",
        runner_id="plugin:bench/agent/default",
        agent_id="a",
        binding_id="b",
        conversation_id="bench",
        history=frozenset({"page"}),
    )
    session = RunSession(
        "run_bench", hash_token("t"), snapshot.runner_id, utcnow() + dt.timedelta(hours=1), snapshot
    )
    list_history = fact_handlers(stores)["ListHistory"]

    async def read_page(request: pb.ListHistoryRequest) -> pb.ListHistoryResponse:
        return await list_history(ProxyCall(session=session, method="ListHistory"), request)

    return read_page


async def bench(url: str, iterations: int) -> float:
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    try:
        stores = await FactStores.open(db, FactStoreSettings(artifact_dir=Path(tempfile.mkdtemp())))
        await _fill(stores)
        read_page = run_history_reader(stores)

        async def history(
            request: pb.ListHistoryRequest, context: grpc.aio.ServicerContext
        ) -> pb.ListHistoryResponse:
            return await read_page(request)

        async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return request

        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "bench.Bench",
                    {
                        "Echo": grpc.unary_unary_rpc_method_handler(echo),
                        "ListHistory": grpc.unary_unary_rpc_method_handler(
                            history,
                            request_deserializer=pb.ListHistoryRequest.FromString,
                            response_serializer=pb.ListHistoryResponse.SerializeToString,
                        ),
                    },
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                bare = channel.unary_unary("/bench.Bench/Echo")
                page = channel.unary_unary(
                    "/bench.Bench/ListHistory",
                    request_serializer=pb.ListHistoryRequest.SerializeToString,
                    response_deserializer=pb.ListHistoryResponse.FromString,
                )
                middle = stores.transcript.cursor("bench", ITEMS // 2)
                request = pb.ListHistoryRequest(before_cursor=middle, limit=PAGE)
                check = await page(request, timeout=10)
                assert len(check.items) == PAGE and check.items[-1].seq == ITEMS // 2 - 1
                bare_p50, page_p50 = await _interleaved_p50(bare, b"x" * 64, page, request, iterations)
        finally:
            await server.stop(0)
    finally:
        await db.dispose()
    print(f"bare_unary_p50_ms={bare_p50 * 1000:.3f}")
    print(f"history_page_p50_ms={page_p50 * 1000:.3f}")
    ratio = page_p50 / bare_p50
    print(f"history_page_p50_ratio={ratio:.2f}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("AGENTRUNNER_BENCH_DATABASE_URL", ""))
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    if args.database_url:
        asyncio.run(bench(args.database_url, args.iterations))
        return
    with throwaway_postgres() as url:
        asyncio.run(bench(url, args.iterations))


if __name__ == "__main__":
    main()
