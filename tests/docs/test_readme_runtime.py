"""README "Claude Code on your workstation, the host on a server", executed as a user pastes it: the two
`auth new-key` lines, `host.yaml` with the entries they printed, `db upgrade` and `serve` over TLS, the
workstation's `connect` with the runtime key, then the operator's commands (`runtimes list`, `run`,
`runs show`, `runtimes drain`), and the section's last promise: a killed runtime's agent fails new runs
`runner.unavailable`.

The blocks are read from the README (not a copy). What changes: the directory (a temp one), the server's
name (`localhost`, with a certificate for it made by openssl: the section's prerequisite), the port (a
free one instead of 50051), the placeholders the section asks the reader to fill (the entries new-key
printed, the run id, the runtime id: the hostname), `uv run X` (a shim on PATH runs this environment's
`X`), and `claude`: the bundled fake on PATH (the real CLI with a mock model API is
`tests/real/test_claude_code_real.py`'s; this test is about the commands). Every process the blocks
start is stopped with its process group.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from agentrunner_runners.testing import install_fake

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTION = "## Claude Code on your workstation, the host on a server"

pytestmark = pytest.mark.timeout(400)


def readme_blocks() -> tuple[list[str], str]:
    """The section's shell blocks, in order, and its YAML block (host.yaml)."""
    section = (ROOT / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    shells = re.findall(r"```sh\n(.*?)```", section, re.S)
    config = re.search(r"```yaml\n(# host.yaml.*?)```", section, re.S)
    assert len(shells) == 4 and config, f"README's {SECTION!r}: expected 4 sh blocks and host.yaml"
    return shells, config.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Shell:
    """Runs README lines with bash in `cwd`, as the reader's shell would (exports carry over)."""

    def __init__(self, cwd: pathlib.Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.started: list[subprocess.Popen[str]] = []
        self.output: dict[subprocess.Popen[str], list[str]] = {}

    def run(self, script: str, timeout: float = 120, ok: bool = True) -> str:
        """Runs `script` (after the exports of the lines before); its output. `ok`: it must succeed,
        else it must fail."""
        done = subprocess.run(
            [
                "bash",
                "-c",
                f"set -euo pipefail\n[ -f .exports ] && . ./.exports\n{script}\nexport -p > .exports",
            ],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        out = done.stdout + done.stderr
        logs = "\n".join(f"--- {str(p.args)[-80:]}:\n{''.join(self.output[p])[-3000:]}" for p in self.started)
        assert (done.returncode == 0) is ok, f"{script}\n{out[-3000:]}\n{logs}"
        return out

    def start(self, script: str, ready: str, timeout: float = 60) -> subprocess.Popen[str]:
        """Starts a long-running line in the background; returns once its output shows `ready`."""
        proc = subprocess.Popen(
            ["bash", "-c", f"set -euo pipefail\n[ -f .exports ] && . ./.exports\n{script}"],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.started.append(proc)
        lines: queue.Queue[str] = queue.Queue()
        self.output[proc] = []

        def pump() -> None:
            for line in proc.stdout or ():
                self.output[proc].append(line)
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        seen, deadline = "", time.monotonic() + timeout
        while ready not in seen:
            try:
                seen += lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"{script!r} did not print {ready!r} in {timeout} s: {seen[-3000:]}"
                ) from None
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.started:
            self.stop(proc)


def _certificate(directory: pathlib.Path) -> None:
    """`host.pem` / `host.key` for `localhost` (the section's prerequisite: a certificate for its name)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", "host.key", "-out", "host.pem"],
        cwd=directory, check=True, capture_output=True,
    )  # fmt: skip


def _host_yaml(config: str, printed: str) -> str:
    """host.yaml with the placeholders filled from what the two new-key lines printed."""
    sha = re.findall(r"api_key_sha256: \[([0-9a-f]{64})\]", printed)
    assert len(sha) == 2, printed
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- id: ops")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    ops = textwrap.dedent("".join(line + "\n" for line in lines[start:end]))
    place = re.search(r"^( *)- <the entry the second new-key printed>\n", config, re.M)
    assert place and "<the sha256 the first new-key printed>" in config, config
    entry = textwrap.indent(ops, place.group(1))
    config = config.replace(place.group(0), entry)
    return config.replace("<the sha256 the first new-key printed>", sha[0])


def test_a_runtime_on_a_workstation_works_as_written(tmp_path: pathlib.Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the walkthrough needs openssl (Debian: apt-get install openssl)")
    (keys, server, workstation, operator), config = readme_blocks()
    port = str(_free_port())
    shim = tmp_path / "bin"
    (shim / "uv").parent.mkdir()
    (shim / "uv").write_text('#!/bin/sh\n[ "$1" = run ] && shift\nexec "$@"\n')
    (shim / "uv").chmod(0o755)
    install_fake(shim, "claude")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRUNNER_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join([str(shim), str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env |= {"COLUMNS": "200", "FAKE_CLAUDE_HOME": str(tmp_path / "claude-home")}
    env["AGENTRUNNER_HARNESS_ENV_PASSTHROUGH"] = "FAKE_CLAUDE_HOME"
    work = tmp_path / "server"
    work.mkdir()
    _certificate(work)
    sh = Shell(work, env)
    try:
        # on the server: keys, host.yaml, database, serve
        printed = sh.run(keys)
        (work / "host.yaml").write_text(_host_yaml(config.replace("50051", port), printed))
        upgrade, serve = server.strip().splitlines()
        sh.run(upgrade)
        sh.start(serve, "AGENTRUNNER_HOST_LISTENING")
        # on the workstation: connect (the server's name is localhost here)
        connect = workstation.replace("server.example.com:50051", f"localhost:{port}")
        assert connect != workstation, workstation
        runtime = sh.start(connect, "AGENTRUNNER_RUNTIME_CONNECTED")
        # the operator
        lines = [line for line in operator.strip().splitlines() if line.strip()]
        exports, listed, run, show, drain = lines
        sh.run(exports.replace("server.example.com:50051", f"localhost:{port}"))
        out = sh.run(listed)
        hostname = socket.gethostname()
        assert re.search(rf"{re.escape(hostname)}\s.*online", out), out
        assert "claude ?" in out, out  # the detected CLI (the fake has no version)
        out = sh.run(run)
        run_id = re.search(r"run (run_\w+): completed", out)
        assert run_id, out
        out = sh.run(show.replace("RUN_ID", run_id.group(1)))
        assert hostname in out, out  # names the runtime that ran it
        drain = drain.replace("alice-laptop", hostname)
        sh.run(drain)
        out = sh.run(run, ok=False)  # no new runs there
        assert "runner.unavailable" in out and "draining" in out, out
        sh.run(drain.replace(hostname, f"{hostname} --resume"))
        # kill the runtime: new runs fail runner.unavailable with the reason
        sh.stop(runtime)
        out = sh.run(run, ok=False)
        assert "runner.unavailable" in out and "is connected" in out, out
    finally:
        sh.stop_all()
