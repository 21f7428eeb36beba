#!/usr/bin/env python3
"""`make conformance`: both conformance kits against this repository's runners and host.

The runner kit (`agentrunner-conformance runner`) checks the Python reference runner, the Go example
runner (sdk_go/examples/counter) and the TypeScript example runner (sdk_ts/examples/counter.ts), each
started as its own process, twice: listening (the kit dials it) and as a runtime that dials the kit
(`--connect-listen`; `python -m agentrunner connect`, the Go and TypeScript kits' connect mode); the host kit (`agentrunner-conformance host`) checks our host, started on a
fresh SQLite database with the kit's runner endpoint and two agents routed to it in its config. Each
run prints the kit's table and writes JUnit XML under `.gen/conformance/`; a summary follows. The kits
run with `--strict`: our own runners and host keep every SHOULD rule too. Exit status 1 when any target
is not conformant.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / ".gen" / "conformance"
BIN = pathlib.Path(sys.executable).parent
READY = "AGENTRUNNER_LISTENING"


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(argv: list[str], *, cwd: pathlib.Path, log: pathlib.Path, ready: str = READY) -> Iterator[str]:
    """Starts a server process, yields the address from its ready line, stops it (SIGTERM) afterwards."""
    with log.open("w") as err:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + 90
            address = ""
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(ready):
                    address = line.split()[-1]
                    break
            if not address:
                raise RuntimeError(f"{argv[0]} did not report ready (log: {log.relative_to(ROOT)})")
            yield address
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def kit(args: list[str], junit: pathlib.Path) -> bool:
    proc = subprocess.run(
        [str(BIN / "agentrunner-conformance"), *args, "--strict", "--junit", str(junit)],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": os.environ.get("COLUMNS", "150")},
    )
    return proc.returncode == 0


def connected_kit(name: str, runtime: list[str], cwd: pathlib.Path) -> bool:
    """The runner kit listening for a runtime (`--connect-listen`): starts the kit, then the runtime
    pointed at the address the kit printed, and waits for the kit's verdict."""
    kit_proc = subprocess.Popen(
        [
            str(BIN / "agentrunner-conformance"),
            "runner",
            "--connect-listen",
            "127.0.0.1:0",
            "--wait",
            "90",
            "--junit",
            str(OUT / f"runner-{name}.xml"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": os.environ.get("COLUMNS", "150")},
    )
    assert kit_proc.stdout is not None
    first = kit_proc.stdout.readline()
    if not first.startswith("AGENTRUNNER_CONFORMANCE_LISTENING"):
        kit_proc.kill()
        print(first, end="")
        return False
    address = first.split()[-1]
    with (OUT / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            [part.replace("{address}", address) for part in runtime], cwd=cwd, stdout=log, stderr=log
        )
        try:
            for line in kit_proc.stdout:
                print(line, end="", flush=True)
            return kit_proc.wait() == 0
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def runtime_targets(go_bin: str) -> list[tuple[str, list[str], pathlib.Path]]:
    """The same three runners as runtimes that dial in (`{address}`: where the kit listens)."""
    python = [
        str(BIN / "python"),
        "-m",
        "agentrunner",
        "connect",
        "{address}",
        "agentrunner_runners.reference:ReferenceRunner",
        "--detect",
        "",
    ]
    return [
        ("python-reference-connect", python, ROOT),
        ("go-example-connect", [go_bin, "-connect", "{address}", "-detect", ""], ROOT / "sdk_go"),
        (
            "ts-example-connect",
            ["node", "dist/examples/counter.js", "--connect", "{address}", "--detect", ""],
            ROOT / "sdk_ts",
        ),
    ]


def build() -> tuple[list[str], list[str]]:
    step("building the Go and TypeScript example runners")
    OUT.mkdir(parents=True, exist_ok=True)
    go_bin = OUT / "go-counter"
    subprocess.run(["go", "build", "-o", str(go_bin), "./examples/counter"], cwd=ROOT / "sdk_go", check=True)
    subprocess.run(["npm", "run", "--silent", "build"], cwd=ROOT / "sdk_ts", check=True)
    return [str(go_bin), "-port", "0"], ["node", "dist/examples/counter.js", "--port", "0"]


def runner_targets() -> list[tuple[str, list[str], pathlib.Path]]:
    go, ts = build()
    python = [
        str(BIN / "python"),
        "-m",
        "agentrunner",
        "serve",
        "agentrunner_runners.reference:ReferenceRunner",
    ]
    return [
        ("python-reference", [*python, "--port", "0"], ROOT),
        ("go-example", go, ROOT / "sdk_go"),
        ("ts-example", ts, ROOT / "sdk_ts"),
    ]


HOST_CONFIG = """\
instance_id: conformance
listen:
  address: 127.0.0.1:{host_port}
database:
  url: sqlite+aiosqlite:///{db}
  artifact_dir: {artifacts}
registry:
  retry_interval_seconds: 0.5
runners:
  - id: conformance-kit
    address: 127.0.0.1:{kit_port}
agents:
  - id: conformance
    runner_id: plugin:conformance/kit/default
    timeout_seconds: 30
  - id: conformance-deadline
    runner_id: plugin:conformance/kit/default
    timeout_seconds: 3
bindings:
  - id: conformance
    event: message.received
    target: {{ agent: conformance }}
"""


@contextlib.contextmanager
def host(tmp: pathlib.Path) -> Iterator[tuple[str, str]]:
    """Our host on a fresh SQLite database; yields its address and the kit runner's address."""
    host_port, kit_port = free_port(), free_port()
    config = tmp / "host.yaml"
    config.write_text(
        HOST_CONFIG.format(
            host_port=host_port, kit_port=kit_port, db=tmp / "host.db", artifacts=tmp / "artifacts"
        )
    )
    cli = str(BIN / "agentrunner-host")
    subprocess.run([cli, "db", "upgrade", "--config", str(config)], cwd=ROOT, check=True, capture_output=True)
    address = f"127.0.0.1:{host_port}"
    with (OUT / "host.log").open("w") as log:
        proc = subprocess.Popen([cli, "serve", "--config", str(config)], cwd=ROOT, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", host_port), timeout=1),
                ):
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError("the host did not start (log: .gen/conformance/host.log)")
            yield address, f"127.0.0.1:{kit_port}"
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str]) -> int:
    only = set(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    outcomes: list[tuple[str, str, bool]] = []
    runners = {"python-reference", "go-example", "ts-example"}
    runtimes = {f"{r}-connect" for r in runners}
    targets = runner_targets() if not only or only & (runners | runtimes) else []
    for name, cmd, cwd in targets:
        if only and name not in only:
            continue
        step(f"runner kit against the {name} runner")
        with process(cmd, cwd=cwd, log=OUT / f"{name}.log") as address:
            outcomes.append(
                ("runner", name, kit(["runner", "--target", address], OUT / f"runner-{name}.xml"))
            )
    if targets:
        go_bin = str(OUT / "go-counter")
        for name, cmd, cwd in runtime_targets(go_bin):
            if only and name not in only:
                continue
            step(f"runner kit against the {name.removesuffix('-connect')} runner as a runtime (connect)")
            outcomes.append(("runner", name, connected_kit(name, cmd, cwd)))
    if not only or "host" in only:
        step("host kit against our host (SQLite; the kit's runner registered in its config)")
        with (
            tempfile.TemporaryDirectory(prefix="conformance-") as tmp,
            host(pathlib.Path(tmp)) as (address, kit_at),
        ):
            args = [
                "host",
                "--target",
                address,
                "--runner-listen",
                kit_at,
                "--deadline-agent",
                "conformance-deadline",
            ]
            outcomes.append(("host", "agentrunner-host", kit(args, OUT / "host.xml")))
    step("summary")
    for kind, name, ok in outcomes:
        print(f"  {kind:<7} {name:<26} {'conformant' if ok else 'NOT conformant'}")
    print(f"  JUnit XML: {OUT.relative_to(ROOT)}/")
    return 0 if outcomes and all(ok for _, _, ok in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
