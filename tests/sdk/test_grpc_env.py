"""The gRPC settings the SDK applies while grpc loads (`agentrunner._grpc_env`): EventEngine off for
client channels and listeners, so the C core polls on grpc.aio's poller thread instead of waking
EventEngine threads for every call (issue 37: wake-ups per run); a user's own value wins; nothing is
left in the environment the process's children inherit. Each case runs in a fresh interpreter (the C
core reads the variables once, when grpc loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc")

PROBE = textwrap.dedent(
    """
    import asyncio, json, os, pathlib
    import agentrunner  # (first: its settings apply while grpc loads)
    import grpc

    def engine_switches():
        total = 0
        for task in pathlib.Path("/proc/self/task").iterdir():
            if (task / "comm").read_text().startswith("event_engine"):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches"):
                        total += int(line.split()[1])
        return total

    async def main():
        handler = grpc.method_handlers_generic_handler(
            "t.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)}
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            echo = channel.unary_unary("/t.Echo/Echo")
            for _ in range(10):
                await echo(b"x")
            before = engine_switches()
            for _ in range(100):
                await echo(b"x")
            after = engine_switches()
        await server.stop(None)
        return (after - before) / 100

    per_call = asyncio.run(main())
    print(json.dumps({"per_call": per_call, "left": os.environ.get("GRPC_EXPERIMENTS")}))
    """
)


def probe(**env: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if k not in ("GRPC_EXPERIMENTS", "GRPC_VERBOSITY")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_event_engine_threads_stay_asleep_and_nothing_leaks_to_children() -> None:
    got = probe()
    # EventEngine threads off for channels and listeners: an echo call wakes none of them (the few
    # that remain serve timers); on, each call wakes them several times (the next test)
    assert got["per_call"] < 0.5, got
    assert got["left"] is None  # set only while grpc loaded


def test_a_value_the_user_set_wins() -> None:
    got = probe(GRPC_EXPERIMENTS="event_engine_client,event_engine_listener")
    assert got["per_call"] >= 1.0, got  # the user's EventEngine is on: its threads wake for the calls
    assert got["left"] == "event_engine_client,event_engine_listener"
