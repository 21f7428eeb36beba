"""This host against its peers on the same echo workload (issue 37; not a test): one `key=value` line.

The peers, from PyPI, each driven by its own client the way its users drive it:

- **LangBot**: the public plugin runtime `langbot-plugin==0.7.18` (the workspace's dev dependency, the
  same the bridge's tests run), a Runner plugin over stdio (`peers/langbot_side.py`);
- **A2A**: the official A2A Python SDK's gRPC binding `a2a-sdk[grpc]==1.3.0` in its own venv
  (`.tools/real/a2a`, `.ci/install-real-tools a2a`, run here when missing), in-memory task store, a
  streaming echo agent, the SDK's own gRPC client (`peers/a2a_side.py`);
- **ours**: this host (CLI, SQLite, defaults) in front of the SDK bench runner (`peers/ours_side.py`).

The workload (`peers/common.py`): 100-byte deltas, a 120 s deadline per run, fresh processes for every
side in every repetition; repetitions interleave the sides (ours, LangBot, A2A, then the reverse, ...)
so the machine's load moves all three alike. Each figure is the median over the repetitions; each
ratio is ours / theirs (lower is better for time and CPU, higher for deltas/s):

- `ttfr_ratio_*`: p50 time to the first result, sequential 1-delta runs (ours in one shared conversation);
- `cpu_per_run_ratio_langbot`: CPU per 1-delta run of the serving processes: our host process alone
  vs the LangBot runtime plus its plugin worker (`cpu_us_runner`: our runner behind the host, apart);
- `deltas_ratio_*_single` / `_50`: deltas/s, one run x 20,000 deltas / 50 runs x 1,000 at once;
- `shared_conversation_ttfr_ratio`: our p50 time to first result with every run in one conversation /
  with a new conversation per run (alternated run by run on one host).

`--fast` (or `FAST=1`): 1 x 2,000 and 50 x 100 deltas, 60 runs for the times; `--smoke`: a few runs of
each, one repetition (the test suite's check that the benchmark runs). Writes bench/results_peers.json
(`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
PEERS = HERE / "peers"
A2A_DIR = ROOT / ".tools" / "real" / "a2a"
SIDES = ("ours", "langbot", "a2a")

COUNTS = {  # warmup, ttfr, cpu, single, conc, each, shared
    "full": ["--warmup", "20", "--ttfr", "200", "--cpu", "200", "--single", "20000", "--each", "1000"],
    "fast": ["--warmup", "10", "--ttfr", "60", "--cpu", "60", "--single", "2000", "--each", "100"],
    "smoke": [
        "--warmup",
        "2",
        "--ttfr",
        "8",
        "--cpu",
        "20",
        "--single",
        "200",
        "--conc",
        "5",
        "--each",
        "20",
    ],
}
SHARED = {"full": "200", "fast": "60", "smoke": "8"}


def a2a_python() -> pathlib.Path:
    """The A2A venv's interpreter, installing the venv first when it is missing (uv, from PyPI)."""
    python = A2A_DIR / "bin" / "python"
    if not (A2A_DIR / ".installed").is_file():
        began = time.perf_counter()
        subprocess.run(["bash", str(ROOT / ".ci" / "install-real-tools"), "a2a"], check=True)
        print(f"# a2a venv installed in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return python


def command(side: str, mode: str) -> list[str]:
    counts = COUNTS[mode]
    if side == "ours":
        return [sys.executable, str(PEERS / "ours_side.py"), "measure", *counts, "--shared", SHARED[mode]]
    if side == "langbot":
        return [sys.executable, str(PEERS / "langbot_side.py"), "measure", *counts]
    return [str(a2a_python()), str(PEERS / "a2a_side.py"), "measure", *counts]


def measure_side(side: str, mode: str) -> dict[str, float]:
    """One side on fresh processes: its figures (`common.measure`) with the load average before it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PEERS), os.environ.get("PYTHONPATH")])),
    }
    load = os.getloadavg()[0]
    began = time.perf_counter()
    done = subprocess.run(command(side, mode), env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"the {side} side failed (exit {done.returncode})")
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    out["load_1min"] = load
    out["seconds"] = time.perf_counter() - began
    return out


def summarize(reps: list[dict[str, dict[str, float]]]) -> dict[str, float]:
    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in reps)

    o_ttfr, l_ttfr, a_ttfr = (med(s, "ttfr_p50_ms") for s in SIDES)
    o_cpu, l_cpu, a_cpu = (med(s, "cpu_us_per_run") for s in SIDES)
    o_1, l_1, a_1 = (med(s, "deltas_per_s_single") for s in SIDES)
    o_50, l_50, a_50 = (med(s, "deltas_per_s_conc") for s in SIDES)
    shared, fresh = med("ours", "ttfr_shared_p50_ms"), med("ours", "ttfr_fresh_p50_ms")
    return {
        "ttfr_ratio_langbot": round(o_ttfr / l_ttfr, 3),
        "ttfr_ratio_a2a": round(o_ttfr / a_ttfr, 3),
        "cpu_per_run_ratio_langbot": round(o_cpu / l_cpu, 3),
        "deltas_ratio_langbot_single": round(o_1 / l_1, 2),
        "deltas_ratio_langbot_50": round(o_50 / l_50, 2),
        "deltas_ratio_a2a_single": round(o_1 / a_1, 2),
        "deltas_ratio_a2a_50": round(o_50 / a_50, 2),
        "shared_conversation_ttfr_ratio": round(shared / fresh, 3),
        "ttfr_ms_ours": round(o_ttfr, 2),
        "ttfr_ms_langbot": round(l_ttfr, 2),
        "ttfr_ms_a2a": round(a_ttfr, 2),
        "ttfr_ms_ours_shared": round(shared, 2),
        "ttfr_ms_ours_fresh": round(fresh, 2),
        "cpu_us_host": round(o_cpu),
        "cpu_us_runner": round(med("ours", "cpu_us_per_run_other")),
        "cpu_us_langbot": round(l_cpu),
        "cpu_us_a2a": round(a_cpu),
        "deltas_per_s_single_ours": round(o_1),
        "deltas_per_s_single_langbot": round(l_1),
        "deltas_per_s_single_a2a": round(a_1),
        "deltas_per_s_50_ours": round(o_50),
        "deltas_per_s_50_langbot": round(l_50),
        "deltas_per_s_50_a2a": round(a_50),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", default=os.environ.get("FAST") == "1")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 2, smoke 1)")
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "results_peers.json")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "fast" if args.fast else "full"
    reps_n = args.reps or (1 if args.smoke else 2)
    a2a_python()  # (installed before anything is timed)
    reps: list[dict[str, dict[str, float]]] = []
    for i in range(reps_n):
        order = SIDES if i % 2 == 0 else SIDES[::-1]
        rep = {side: measure_side(side, mode) for side in order}
        reps.append(rep)
        loads = " ".join(f"{s}:{rep[s]['load_1min']:.1f}" for s in order)
        print(f"# repetition {i + 1}/{reps_n} ({' '.join(order)}), load {loads}", file=sys.stderr, flush=True)
    summary = summarize(reps)
    setup = {
        "mode": mode,
        "counts": COUNTS[mode],
        "repetitions": reps_n,
        "order": "ours, langbot, a2a; then reversed; ... (fresh processes per side per repetition)",
        "cpus": os.cpu_count(),
        "cpu_processes": {
            "ours": "host process (the runner's apart: cpu_us_runner)",
            "langbot": "plugin runtime + its plugin worker",
            "a2a": "the A2A server (one hop)",
        },
        "peers": {"langbot": "langbot-plugin==0.7.18 (stdio)", "a2a": "a2a-sdk[grpc]==1.3.0"},
    }
    out = {"summary": summary, "repetitions": reps, "setup": setup}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
