"""The bridge under failure and load, end to end (`e2e_stack.py`): a crashing plugin worker, a killed
plugin runtime, a killed bridge, more concurrent runs than the runtime takes, no host secret on the
plugin side and nothing of it outliving the host."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path

import grpc
import psutil
import pytest

from agentrunner.v1 import host_service_pb2_grpc
from tests.langbot_bridge.e2e_stack import Outcome, Stack, ask, request_for, start_forever

pytestmark = pytest.mark.asyncio


async def test_a_crashing_plugin_worker_fails_its_run_typed_and_is_restarted(stack: Stack) -> None:
    crashed = await ask(stack, "crash", "crash")
    (failure,) = crashed.of("run_failed")
    assert crashed.status == "RUN_STATUS_FAILED"
    assert failure.code == "langbot.plugin_crashed" and failure.retryable, failure
    assert (await ask(stack, "echo", "other plugin unaffected", conversation="crash-other")).answer.endswith(
        "unaffected"
    )
    started = time.monotonic()
    again = await ask(stack, "crash", "ping", conversation="crash-2")
    assert again.status == "RUN_STATUS_COMPLETED", again.results
    assert again.answer == "alive: ping"
    assert time.monotonic() - started < 40


async def test_200_concurrent_runs_through_one_bridge_all_complete(stack: Stack) -> None:
    """More runs at once than the runtime takes on one connection (128): the bridge queues the rest."""
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)

        async def one(i: int) -> Outcome:
            request = request_for("many", f"wait {i}", f"many-{i}")
            return Outcome([u async for u in stub.Run(request, timeout=120)])

        outs = await asyncio.gather(*(one(i) for i in range(200)))
    statuses = [o.status for o in outs]
    assert statuses.count("RUN_STATUS_COMPLETED") == 200, sorted(set(statuses))
    assert sorted(o.answer for o in outs) == sorted(f"> wait {i}" for i in range(200))
    assert (
        _runs_overlapping(stack.db_file, "many-") > 128
    )  # open at once: the runtime alone refuses the 129th


def _runs_overlapping(db_file: Path, prefix: str) -> int:
    with contextlib.closing(sqlite3.connect(db_file)) as conn:
        rows = conn.execute(
            "SELECT created_at, finished_at FROM runs WHERE conversation_id LIKE ?", (prefix + "%",)
        )
        spans = [(str(a), str(b)) for a, b in rows if a and b]
    return max((sum(1 for a2, b2 in spans if a2 <= a < b2) for a, _ in spans), default=0)


async def test_a_crashing_runtime_fails_its_open_runs_typed_and_is_restarted(stack: Stack) -> None:
    children = psutil.Process(stack.host.popen.pid).children(recursive=True)
    (runtime,) = [p for p in children if " rt " in " ".join(p.cmdline()) + " "]
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call, _ = await start_forever(stub, "forever-runtime-crash")
        runtime.kill()  # SIGKILL the plugin runtime itself, mid-run
        rest = Outcome([u async for u in call])
    (failure,) = rest.of("run_failed")
    assert rest.status == "RUN_STATUS_FAILED"
    assert failure.code == "langbot.runtime_crashed" and failure.retryable, failure
    out = Outcome([])
    for _ in range(120):  # the bridge restarts it (1 s backoff); the run waits for the plugins to register
        out = await ask(stack, "echo", "runtime back", conversation="after-runtime-crash")
        if out.status == "RUN_STATUS_COMPLETED":
            break
        await asyncio.sleep(0.5)
    assert out.answer == "> runtime back", out.results


async def test_a_killed_bridge_takes_its_plugins_along_and_the_host_starts_it_again(stack: Stack) -> None:
    def plugin_side() -> list[psutil.Process]:
        children = psutil.Process(stack.host.popen.pid).children(recursive=True)
        return [p for p in children if "langbot" in " ".join(p.cmdline())]

    before = plugin_side()
    bridge = next(p for p in before if "agentrunner_runners.langbot_bridge" in p.cmdline())
    bridge.kill()  # SIGKILL: the bridge cannot clean up; its runtime is tied to it (PR_SET_PDEATHSIG)
    _, alive = psutil.wait_procs(before, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
    out = Outcome([])
    for _ in range(120):  # the host restarts it (1 s backoff) and it serves again once its plugins registered
        with contextlib.suppress(grpc.RpcError):
            out = await ask(stack, "echo", "back again", conversation="after-kill")
            if out.status == "RUN_STATUS_COMPLETED":
                break
        await asyncio.sleep(0.5)
    assert out.answer == "> back again", out.results


async def test_no_host_secret_reaches_the_bridge_or_the_plugins_and_none_outlives_the_host(
    stack: Stack,
) -> None:
    """Runs last (it kills the module's host): the bridge, the runtime and the plugin workers see no
    secret of the host's environment, and all of them end when the host is SIGKILLed."""
    children = psutil.Process(stack.host.popen.pid).children(recursive=True)
    plugin_side = [p for p in children if "langbot" in " ".join(p.cmdline())]
    assert len(plugin_side) >= 4, [p.cmdline() for p in children]  # bridge, runtime, two workers
    for proc in plugin_side:
        environ = proc.environ()
        assert "OPENAI_API_KEY" not in environ and "sk-host-secret" not in environ.values(), proc.cmdline()
    bridge = next(p for p in plugin_side if "agentrunner_runners.langbot_bridge" in p.cmdline())
    assert bridge.environ()["QA_GREETING"] == "bonjour"  # named in the entry's `env`
    stack.host.kill()
    _, alive = psutil.wait_procs(plugin_side, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
