"""The LangBot peer of `bench_peers.py`: the public plugin runtime (`langbot-plugin==0.7.18`, the
workspace's dev dependency), a Runner plugin over stdio.

`measure` starts a fresh runtime (`python -m langbot_plugin.cli.__init__ rt -s`) over
`langbot_plugins/` (the `peers/echo` plugin: `burst:N:B` streams N deltas of B bytes, increments only)
and drives it as LangBot drives a local runtime: stdio JSON lines, the `set_runtime_config` handshake,
the installation binding on every action, `run_runner` with flow control (window 8, acks every 4), the
run's `deadline_at` 120 s ahead. The client side is the bridge's runtime peer
(`agentrunner_runners.langbot_bridge.runtime.PluginRuntime`), which speaks that protocol and answers
the runtime's `get_plugin_settings`. Serving processes counted for CPU: the runtime and the plugin
worker it starts (the runtime's process tree). Prints `common.measure`'s JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
import tempfile
import time
import uuid
from typing import Any

import psutil
from common import DEADLINE, add_args, measure

from agentrunner_runners.langbot_bridge.kinds import RUNNER
from agentrunner_runners.langbot_bridge.plugins import find_plugins
from agentrunner_runners.langbot_bridge.runtime import PluginRuntime

HERE = pathlib.Path(__file__).parent


async def settings(action: str, data: dict[str, Any], context: dict[str, Any] | None) -> Any:
    """The runtime's calls to LangBot: only `get_plugin_settings` is asked for by this workload."""
    if action == "get_plugin_settings":
        return {
            "enabled": True,
            "priority": 0,
            "plugin_config": {},
            "installation_uuid": "peers-bench",
            "install_source": "local",
            "install_info": {},
        }
    if action == "get_langbot_version":
        return {"version": "4.0.0"}
    raise RuntimeError(f"{action} is not offered by the benchmark")


def context(text: str) -> dict[str, Any]:
    run_id = f"run-{uuid.uuid4().hex}"
    return {
        "run_id": run_id,
        "trigger": {"type": "message.received", "source": "api"},
        "event": {"event_id": f"evt-{run_id}", "event_type": "message.received", "source": "api", "data": {}},
        "input": {"text": text},
        "delivery": {"surface": "api", "supports_streaming": True},
        "resources": {},
        "runtime": {
            "trace_id": run_id,
            "deadline_at": time.time() + DEADLINE,
            "metadata": {"component_kind": RUNNER.name},
        },
        "config": {},
    }


async def drive(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        plugins = find_plugins(HERE / "langbot_plugins")
        runtime = PluginRuntime(plugins, pathlib.Path(tmp), settings, skip_deps_check=True)
        await runtime.start(60.0)
        try:
            if not await runtime.wait_registered(60.0):
                raise RuntimeError("the echo plugin did not register with the runtime")

            async def run(text: str) -> tuple[float, int]:
                started = time.perf_counter()
                first = 0.0
                deltas = 0
                async for envelope in runtime.run(RUNNER, "peers", "echo", "echo", context(text)):
                    if envelope.get("type") == "message.delta":
                        deltas += 1
                        if not first:
                            first = time.perf_counter() - started
                    elif envelope.get("type") == "run.failed":
                        raise RuntimeError(f"run failed: {envelope.get('data')}")
                return first, deltas

            def pids() -> list[int]:
                assert runtime.process is not None
                root = psutil.Process(runtime.process.pid)
                return [root.pid, *(p.pid for p in root.children(recursive=True))]

            return await measure(run, pids, args)
        finally:
            await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["measure"])
    add_args(parser)
    print(json.dumps(asyncio.run(drive(parser.parse_args()))))


if __name__ == "__main__":
    sys.exit(main())
