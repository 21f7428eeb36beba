"""Real processes for the runtime suites: a host started through its CLI and runtimes started with
`python -m agentrunner connect` (the SDK's CLI), on real sockets."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = "agentrunner_runners.reference:ReferenceRunner"
CONNECTED = "AGENTRUNNER_RUNTIME_CONNECTED"


class LineProc:
    """A child process whose stdout lines are collected by a thread."""

    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, prefix: list[str] | None = None
    ) -> None:
        self.args = args
        self.popen = subprocess.Popen(
            [*(prefix or []), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.popen.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.popen.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _pump(stream: Any, put: Any) -> None:
        for line in iter(stream.readline, ""):
            put(line.rstrip("\n"))

    def expect(self, prefix: str, timeout: float = 60.0) -> str:
        """The next stdout line starting with `prefix` (others are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.popen.poll() is not None and self.lines.empty()):
                raise AssertionError(f"no {prefix!r} line from {self.args[:4]}: stderr {self.stderr[-5:]}")
            with contextlib.suppress(queue.Empty):
                line = self.lines.get(timeout=min(left, 0.2))
                if line.startswith(prefix):
                    return line

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of the whole group (nothing it started outlives it)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def host_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrunner_host", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_host(config: Path, env: dict[str, str] | None = None) -> tuple[LineProc, str]:
    proc = LineProc(
        [
            sys.executable,
            "-m",
            "agentrunner_host",
            "serve",
            "--config",
            str(config),
            "--log-level",
            "WARNING",
        ],
        env,
    )
    return proc, proc.expect("AGENTRUNNER_HOST_LISTENING").split()[1]


def start_runtime(
    address: str,
    runtime_id: str,
    *,
    key: str = "",
    extra: list[str] | None = None,
    target: str = REFERENCE,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
    wait: bool = True,
    command: list[str] | None = None,
) -> LineProc:
    """`python -m agentrunner connect ADDRESS TARGET ...` (or `command`, another kit's runtime), waiting for
    its connected line unless `wait` is false; `prefix` runs it under another command (`ip netns exec`)."""
    args = command or [
        sys.executable,
        "-m",
        "agentrunner",
        "connect",
        address,
        target,
        "--runtime-id",
        runtime_id,
        "--detect",
        "",
        *(extra or []),
    ]
    proc = LineProc(args, {"AGENTRUNNER_RUNTIME_KEY": key, **(env or {})}, prefix)
    if wait:
        proc.expect(CONNECTED)
    return proc
