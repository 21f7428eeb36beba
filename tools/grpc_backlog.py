"""The minimal reproduction of issue 16 item 17, with no host code: a bare grpc.aio server (one
server-streaming method that waits `--hold` seconds) and one client channel opening `--calls` calls at
once. It prints how the calls ended, and how many the server's handler saw, once with gRPC's defaults
and once with the pending-call options the host sets (`agentrunner_host.server.listener.server_options`).

    uv run python tools/grpc_backlog.py --calls 3000

Why calls are dropped: gRPC core queues a call that arrived on the transport until the application
asks for the next one, and grpc.aio asks for one call per event-loop turn. Past
`grpc.server.max_pending_requests` (default 1,000) queued calls core cancels new ones at random (random
early detection, certain at `grpc.server.max_pending_requests_hard_limit`, default 3,000): the client
sees CANCELLED without details and the handler never runs. A call queued longer than
`grpc.server_max_unrequested_time_in_server` (default 30 s) is cancelled the same way."""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import time
from typing import Any

import grpc

METHOD = "/backlog.Backlog/Hold"


def _serve(options: list[tuple[str, Any]], hold: float, port: Any, seen: Any, stop: Any) -> None:
    async def handler(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> Any:
        with seen.get_lock():
            seen.value += 1
        await asyncio.sleep(hold)
        yield b"done"

    async def main() -> None:
        server = grpc.aio.server(options=options)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "backlog.Backlog", {"Hold": grpc.unary_stream_rpc_method_handler(handler)}
                ),
            )
        )
        port.value = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        await server.stop(0)

    asyncio.run(main())


async def _burst(port: int, calls: int) -> tuple[collections.Counter[str], float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await channel.channel_ready()
        method = channel.unary_stream(METHOD)

        async def one() -> str:
            try:
                async for _ in method(b"", timeout=300):
                    pass
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return "OK"

        started = time.monotonic()
        outcomes = await asyncio.gather(*(one() for _ in range(calls)))
        return collections.Counter(outcomes), time.monotonic() - started


def measure(options: list[tuple[str, Any]], calls: int, hold: float) -> str:
    ctx = multiprocessing.get_context("spawn")
    port, seen, stop = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Event()
    server = ctx.Process(target=_serve, args=(options, hold, port, seen, stop))
    server.start()
    try:
        while port.value == 0:
            time.sleep(0.05)
        counts, seconds = asyncio.run(_burst(port.value, calls))
    finally:
        stop.set()
        server.join(10)
        if server.is_alive():
            server.kill()
    return f"{dict(counts)} in {seconds:.1f} s; the handler saw {seen.value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--hold", type=float, default=0.3, help="seconds each call stays open")
    parser.add_argument("--pending", type=int, default=10_000, help="the host's limits.max_pending_calls")
    args = parser.parse_args()
    host = [
        ("grpc.server.max_pending_requests", args.pending),
        ("grpc.server.max_pending_requests_hard_limit", args.pending),
        ("grpc.server_max_unrequested_time_in_server", 120),
    ]
    print(f"grpcio {grpc.__version__}, {os.cpu_count()} cores, {args.calls} calls on one channel")
    print(f"  gRPC defaults:             {measure([], args.calls, args.hold)}")
    print(f"  the host's pending limits: {measure(host, args.calls, args.hold)}")


if __name__ == "__main__":
    main()
