"""`make bench`: runs every `bench/bench_*.py` in turn (each prints its own summary line): the host
path (`bench_host.py`), history paging, knowledge, and a LangBot plugin through the bridge next to a
native runner (`bench_bridge.py`), this host against the LangBot runtime and the A2A SDK
(`bench_peers.py`, ~7 min; `FAST=1` for its quick counts) and the footprint at scale (`bench_scale.py`)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent


def main() -> int:
    status = 0
    for script in sorted(HERE.glob("bench_*.py")):
        if script.name == "bench_runner.py":  # the host benchmark's runner, not a benchmark
            continue
        print(f"# {script.name}", flush=True)
        status |= subprocess.call([sys.executable, str(script)])
    return status


if __name__ == "__main__":
    sys.exit(main())
