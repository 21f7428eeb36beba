"""What the parts of `make release-check` share: where logs go, the version, running and serving
processes with their output in a log. See tools/release_check.py."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / ".gen" / "release"
VERSION = (ROOT / "VERSION").read_text().strip()
timings: list[tuple[str, float]] = []


class Failed(Exception):
    """A step of the check failed; the message says which and where its log is."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    print(f"\n==> {name}", flush=True)
    started = time.monotonic()
    yield
    timings.append((name, time.monotonic() - started))


def run_logged(
    argv: list[str], *, cwd: pathlib.Path, env: dict[str, str], log: pathlib.Path, timeout: float
) -> str:
    """Runs to the end with its output in `log` (a backgrounded child keeps no pipe open); the output."""
    with log.open("w") as sink:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # what a failed step left running in the background
    out = log.read_text()
    if proc.returncode != 0:
        raise Failed(
            f"{' '.join(argv[:3])} exited {proc.returncode} (log: {log.relative_to(ROOT)}):\n{out[-3000:]}"
        )
    return out


@contextlib.contextmanager
def serving(
    argv: list[str], *, cwd: pathlib.Path, env: dict[str, str], log: pathlib.Path, ready: str
) -> Iterator[str]:
    """A server process until the block ends; yields the address from its `ready` line."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
        try:
            assert proc.stdout is not None
            deadline, address = time.monotonic() + 60, ""
            while time.monotonic() < deadline and not address:
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(ready):
                    address = line.split()[1]
            if not address:
                raise Failed(
                    f"{argv[0]} did not print {ready} (log: {log.relative_to(ROOT)}):\n{log.read_text()[-2000:]}"
                )
            yield address
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
