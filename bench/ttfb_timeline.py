"""Where one sequential run's time goes, stage by stage, host vs the bare relay (not part of `make bench`).

    uv run python bench/ttfb_timeline.py [--runs N] [--conversations]

Copies `host/src` and the SDK to a temp dir and inserts a timestamp mark (`time.perf_counter_ns`:
CLOCK_MONOTONIC, the same clock in every process) before each line of `MARKS`; the benchmark client,
the relay of `bench_host.py` and the bench runner get marks of their own. Then it runs N sequential
one-delta runs per path, alternated run by run (the `ttfb_p50_ratio` workload), joins every process's
marks by the client's start mark of each run and prints, per path, the median time of each mark from
the client's `Run` call and the step from the mark before. `--conversations`: the host only, every other
run in one shared conversation and the others each in a new one (issue 37's shared-conversation
latency), reported per kind. A mark whose anchor line is gone is reported
and skipped (update `MARKS` when the run path moves).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent

PROBE = """import os, time
_ev = []
_n = 0
_OUT = os.path.join(os.environ["TTFB_TIMELINE_DIR"], f"{os.getpid()}.txt")
def flush():
    with open(_OUT, "w") as f:
        f.writelines(f"{t} {n}\\n" for t, n in _ev)
def _wrap_send():
    # grpc.aio's task that sends a unary-stream request: when it starts and when the send completed
    import sys
    from grpc.aio import _call
    who = os.path.basename(os.path.dirname(sys.argv[0])) if sys.argv[0].endswith("__main__.py") else os.path.basename(sys.argv[0])
    send = _call.UnaryStreamCall._send_unary_request
    async def wrapped(self):
        mark(f"g0.{who}.send_task")
        try:
            return await send(self)
        finally:
            mark(f"g1.{who}.sent")
    _call.UnaryStreamCall._send_unary_request = wrapped
def mark(name, first=False):
    global _n
    _ev.append((time.perf_counter_ns(), name))
    if first:
        _n += 1
        if _n % 50 == 0:
            flush()
if os.environ.get("TTFB_TIMELINE_GRPC"):
    _wrap_send()
"""

#: (file under the copied tree, the line a mark goes before, mark name; `!` first: a run's first mark)
MARKS: list[tuple[str, str, str]] = [
    (
        "agentrunner_host/services/host_service.py",
        'caller = await self._admit(context, "Run", "run")',
        "!h0.handler",
    ),
    ("agentrunner_host/services/host_service.py", "request = admit(request)\n        resolution", "h1.gate"),
    (
        "agentrunner_host/services/host_service.py",
        "return await self.runs.open(request, context.invocation_metadata()",
        "h2.authorized",
    ),
    ("agentrunner_host/run/service.py", "steered_into = await self._steer_into_open_run(", "h2s.resolved"),
    ("agentrunner_host/run/service.py", "if steered_into is not None:", "h2t.steering_looked_up"),
    (
        "agentrunner_host/run/start.py",
        "start = RunStart(record=record, event=event, agent=agent)",
        "h3.open_prepared",
    ),
    ("agentrunner_host/run/start.py", "state_of = start.snapshot if", "h4.snapshot_frozen"),
    (
        "agentrunner_host/store/incoming.py",
        "written, held = await self.db.run_write_held(write, then=write_later)",
        "h5.transaction",
    ),
    ("agentrunner_host/run/start.py", "start.record = start.started.record", "h6.recorded"),
    ("agentrunner_host/run/execution.py", "validator = self.validator = ResultValidator(", "h7.call_stage"),
    (
        "agentrunner_host/run/execution.py",
        "self.channel = host.deliveries.open(self, ctx.delivery)",
        "h8.context_built",
    ),
    ("agentrunner_host/run/execution.py", "self.phase = Phase.RUNNING", "h9.call_created"),
    (
        "agentrunner_host/run/runner_call.py",
        "self.outbox.put_nowait(message)\n            if message is grpc.aio.EOF",
        "hb.first_read",
    ),
    ("agentrunner/server.py", "if self.draining:\n            await abort_with", "!r0.runner_handler"),
    ("agentrunner/server.py", "yield runner_service_pb2.RunResponse(result=result)", "r1.runner_yields"),
]


def _instrument(tmp: pathlib.Path) -> pathlib.Path:
    out = tmp / "src"
    shutil.copytree(ROOT / "host" / "src", out, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "sdk_python" / "src" / "agentrunner",
        out / "agentrunner",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (out / "_ttfb_probe.py").write_text(PROBE)
    touched: set[pathlib.Path] = set()
    for rel, anchor, name in MARKS:
        path = out / rel
        text = path.read_text()
        if text.count(anchor) != 1:
            print(f"skipped {name}: {rel} does not contain its anchor once", file=sys.stderr)
            continue
        at = text.index(anchor)
        line_start = text.rindex("\n", 0, at) + 1
        indent = text[line_start:at]
        first = name.startswith("!")
        call = f"{indent}_ttfb_probe.mark({name.lstrip('!')!r}{', True' if first else ''})\n"
        path.write_text(text[:line_start] + call + text[line_start:])
        touched.add(path)
    for path in touched:
        path.write_text(
            path.read_text().replace(
                "from __future__ import annotations\n",
                "from __future__ import annotations\nimport _ttfb_probe\n",
                1,
            )
        )
    return out


def _report(directory: pathlib.Path, warmup: int, conversations: bool = False) -> None:
    events: list[tuple[int, str]] = []
    for name in glob.glob(str(directory / "*.txt")):
        for line in pathlib.Path(name).read_text().splitlines():
            t, n = line.split()
            events.append((int(t), n))
    events.sort()
    runs: list[list[tuple[int, str]]] = []
    for t, n in events:
        if n == "c0.start":
            runs.append([])
        if runs:
            runs[-1].append((t, n))
    runs = runs[warmup:]
    paths = (
        (("host, shared conversation", "c0.shared"), ("host, new conversation", "c0.fresh"))
        if conversations
        else (("host", "h0.handler"), ("relay", "R0.handler"))
    )
    for path, key in paths:
        at: dict[str, list[float]] = collections.defaultdict(list)
        for run in runs:
            if key not in (n for _, n in run):
                continue
            t0, seen = run[0][0], set()
            for t, n in run:
                if n not in seen:
                    seen.add(n)
                    at[n].append((t - t0) / 1000)
        print(
            f"{path}: {len(at['c0.start'])} runs (median µs from the client's Run call; step from the mark before)"
        )
        before = 0.0
        for n, values in sorted(at.items(), key=lambda kv: statistics.median(kv[1])):
            m = statistics.median(values)
            print(f"  {n:24s} {m:9.1f}  (+{m - before:7.1f})")
            before = m


CLIENT = """
import asyncio, sys, time
sys.path.insert(0, sys.argv[1])
import _ttfb_probe, grpc
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc

def request(conversation="bench"):
    req = host_service_pb2.HostServiceRunRequest()
    req.event.event_type = "message.received"
    req.event.conversation.conversation_id = conversation
    req.event.input.text = "hello"
    req.event.delivery.supports_streaming = True
    return req

async def one(stub, conversation="bench", tag=""):
    _ttfb_probe.mark("c0.start", True)
    if tag:
        _ttfb_probe.mark(tag)
    async for update in stub.Run(request(conversation), timeout=30):
        _ttfb_probe.mark("c1.got_" + update.WhichOneof("update"))

async def main(host, relay, runs, conversations):
    if conversations:  # the host only: one conversation for every run vs a new one per run, alternated
        stub = host_service_pb2_grpc.HostServiceStub(grpc.aio.insecure_channel(host))
        for i in range(runs):
            for mode in ("shared", "fresh") if i % 2 == 0 else ("fresh", "shared"):
                conv = "bench" if mode == "shared" else f"fresh-{i}"
                await one(stub, conv, "c0." + mode)
        _ttfb_probe.flush()
        return
    stubs = [host_service_pb2_grpc.HostServiceStub(grpc.aio.insecure_channel(a)) for a in (host, relay)]
    for i in range(runs):
        for stub in stubs if i % 2 == 0 else stubs[::-1]:
            await one(stub)
    _ttfb_probe.flush()

asyncio.run(main(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "conversations"))
"""

RELAY_MARKS = [
    ("        self.n += 1\n", "!R0.handler"),
    ("        call = self.stub.Run(req,", "R1.accepted_written"),
    (
        "                yield host_service_pb2.HostServiceRunResponse(result=response.result)",
        "R2.first_read",
    ),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument(
        "--conversations",
        action="store_true",
        help="the host only: one conversation for every run vs a new conversation per run, alternated",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import bench_host  # (its process helpers and relay, once the path is set)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        src = _instrument(tmp)
        relay_src = (HERE / "bench_host.py").read_text()
        for anchor, name in RELAY_MARKS:
            indent = anchor[: len(anchor) - len(anchor.lstrip())]
            first = name.startswith("!")
            relay_src = relay_src.replace(
                anchor,
                f"{indent}_ttfb_probe.mark({name.lstrip('!')!r}{', True' if first else ''})\n" + anchor,
                1,
            )
        relay_src = relay_src.replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\nimport _ttfb_probe\n",
            1,
        )
        (src / "bench_host_relay.py").write_text(relay_src)
        (tmp / "client.py").write_text(CLIENT)
        marks = tmp / "marks"
        marks.mkdir()
        os.environ["TTFB_TIMELINE_DIR"] = str(marks)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE)])
        py = sys.executable
        procs: list[subprocess.Popen[str]] = []
        try:
            runner, runner_addr = bench_host.start_runner()
            procs.append(runner)
            relay, relay_addr = bench_host.start(
                [py, str(src / "bench_host_relay.py"), "--relay", "0", runner_addr],
                "AGENTRUNNER_HOST_LISTENING",
            )
            procs.append(relay)
            config = bench_host.host_config(tmp, runner_addr)
            subprocess.run(
                [py, "-m", "agentrunner_host", "db", "upgrade", "--config", str(config)],
                check=True,
                capture_output=True,
            )
            host, host_addr = bench_host.start(
                [py, "-m", "agentrunner_host", "serve", "--config", str(config), "--log-level", "WARNING"],
                "AGENTRUNNER_HOST_LISTENING",
            )
            procs.append(host)
            subprocess.run(
                [
                    py,
                    str(tmp / "client.py"),
                    str(src),
                    host_addr,
                    relay_addr,
                    str(args.runs + 30),
                    "conversations" if args.conversations else "relay",
                ],
                check=True,
            )
        finally:
            bench_host.stop(procs)
        _report(marks, warmup=60, conversations=args.conversations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
