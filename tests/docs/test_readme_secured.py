"""README "Run a secured host", executed as a user pastes it into a fresh shell: certificates from
openssl, a key from `auth new-key`, a host with mutual TLS and `auth.clients`, a run streamed with the
key, a live run followed and cancelled with the client certificate, the console signed in over HTTPS.

The block is read from the README (not a copy of it) and run by bash from the repository root. Only
three things change: the scratch directory (a temp dir instead of `var/secure`), the ports (free ones
instead of the README's) and `uv run X`, which a shim on PATH turns into this environment's `X`
(`uv run` would sync the workspace first). The background processes the block starts are stopped with
its process group.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README_PORTS = ("50443", "8443", "50461")

pytestmark = pytest.mark.timeout(600)


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Run a secured host", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "no sh block in README's 'Run a secured host'"
    return match.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_a_secured_host_works_as_written(tmp_path: pathlib.Path) -> None:
    for tool in ("openssl", "curl"):
        if shutil.which(tool) is None:
            pytest.fail(f"the walkthrough needs {tool} (Debian: apt-get install {tool})")
    script = readme_block()
    work = tmp_path / "secure"
    assert "var/secure" in script
    script = script.replace("var/secure", str(work))
    for port in README_PORTS:
        assert port in script, port
        script = script.replace(port, str(_free_port()))
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "uv").write_text('#!/bin/sh\n[ "$1" = run ] && shift\nexec "$@"\n')
    (shim / "uv").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRUNNER_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join([str(shim), str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "200"
    log = tmp_path / "walkthrough.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", "-c", f"set -euo pipefail\n{script}"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=540)
        finally:  # a failed step leaves the host and the runner running: end the whole group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text()
    host_log = (work / "host.log").read_text() if (work / "host.log").exists() else ""
    assert proc.returncode == 0, out[-6000:] + "\n--- host.log ---\n" + host_log[-3000:]
    assert "Traceback" not in out + host_log, out[-4000:]
    # a run streamed with the API key (client cli)
    assert "echo: hello" in out and re.search(r"run run_\w+: completed", out), out[-4000:]
    # the long run, followed and cancelled with the client certificate (client ops)
    run_id = re.search(r"cancel requested for run (run_\w+)", out)
    assert run_id, out[-4000:]
    assert f"run {run_id.group(1)}: cancelled" in out, out[-4000:]
    assert "cancelled" in (work / "long.out").read_text()
    # the console: signed in as cli over HTTPS, its API lists the cancelled run
    assert '"client_id":"cli"' in out and '"csrf_token"' in out, out[-3000:]
    listing = out[out.index('"client_id":"cli"') :]
    assert run_id.group(1) in listing and '"status":"cancelled"' in listing, listing[:3000]
    # the key: a file only its owner reads, never in an output or a log
    key_file = work / "cli.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    for text in (out, host_log, (work / "runner.log").read_text()):
        assert key not in text
