"""`make bench-peers` runs: its smoke mode drives all three sides (this host, the LangBot plugin runtime
0.7.18 over stdio, the A2A SDK 1.3.0's gRPC binding from `.ci/install-real-tools a2a`) on fresh
processes and prints every figure the issue asks for.

No figure is held to its target here: a few runs on a shared machine say nothing about speed. What a
user of the benchmark would notice is checked: each peer starts, streams every delta it was asked for
(a side that loses one exits non-zero: `bench/peers/common.py`), and the line carries each ratio and
the raw figures behind it, all positive.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.real.tools import REPO, real_tool

pytestmark = pytest.mark.timeout(240)

RATIOS = (
    "ttfr_ratio_langbot",
    "ttfr_ratio_a2a",
    "cpu_per_run_ratio_langbot",
    "deltas_ratio_langbot_single",
    "deltas_ratio_langbot_50",
    "deltas_ratio_a2a_single",
    "deltas_ratio_a2a_50",
    "shared_conversation_ttfr_ratio",
)
RAW = [
    f"{figure}_{side}"
    for figure in ("ttfr_ms", "deltas_per_s_single", "deltas_per_s_50")
    for side in ("ours", "langbot", "a2a")
]
RAW += ["ttfr_ms_ours_shared", "ttfr_ms_ours_fresh", "cpu_us_host", "cpu_us_langbot", "cpu_us_a2a"]


def test_the_peer_benchmark_runs_every_side_and_prints_every_figure(tmp_path: Path) -> None:
    real_tool("a2a")
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_peers.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = dict(pair.split("=", 1) for pair in done.stdout.strip().splitlines()[-1].split())
    for key in [*RATIOS, *RAW]:
        value = float(line[key])
        assert math.isfinite(value) and value > 0, (key, value)
    saved = json.loads(out.read_text())
    assert saved["summary"] == {k: json.loads(v) for k, v in line.items()}
    (rep,) = saved["repetitions"]
    assert rep["langbot"]["serving_processes"] == 2  # the runtime and its plugin worker
    assert rep["a2a"]["serving_processes"] == 1
