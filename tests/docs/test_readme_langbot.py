"""README "LangBot Runner plugins behind the host", executed as a user pastes it: the config block saved
as `langbot.yaml`, then the shell block (db upgrade, config check, serve, runners, a run), then a chat
with the same agent through the console's API, as the section says.

Both blocks are read from the README (not a copy). What changes: the directory (a temp one, where the
README's relative `tests/langbot_bridge/plugins` is a link to this repository's), the ports (free ones
instead of 50051 and 8080, the CLI pointed at the host's with AGENTRUNNER_HOST), the `uv pip install`
line (for installs outside this repository; here `uv sync` brought the extra) and `uv run X`, which a
shim on PATH turns into this environment's `X`. The processes the block starts are stopped with its
process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTION = "## LangBot Runner plugins behind the host"

pytestmark = pytest.mark.timeout(400)


def readme_blocks() -> tuple[str, str]:
    """The section's YAML block (the host config) and its shell block."""
    section = (ROOT / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    config = re.search(r"```yaml\n(# langbot.yaml\n.*?)```", section, re.S)
    script = re.search(r"```sh\n(.*?)```", section, re.S)
    assert config and script, f"no yaml/sh block in README's {SECTION!r}"
    return config.group(1), script.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chat(console: str, text: str) -> list[dict[str, object]]:
    request = urllib.request.Request(
        f"{console}/api/chat",
        data=json.dumps({"text": text, "agent": "echo"}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read().decode()
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


def test_langbot_plugins_behind_the_host_work_as_written(tmp_path: pathlib.Path) -> None:
    config, script = readme_blocks()
    host_port, console_port = _free_port(), _free_port()
    assert "127.0.0.1:50051" in config and "127.0.0.1:8080" in config
    config = config.replace("50051", str(host_port)).replace("8080", str(console_port))
    (tmp_path / "langbot.yaml").write_text(config)
    (tmp_path / "tests" / "langbot_bridge").mkdir(parents=True)
    (tmp_path / "tests" / "langbot_bridge" / "plugins").symlink_to(
        ROOT / "tests" / "langbot_bridge" / "plugins"
    )
    lines = script.splitlines()
    assert lines[0].startswith("uv pip install ")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "uv").write_text('#!/bin/sh\n[ "$1" = run ] && shift\nexec "$@"\n')
    (shim / "uv").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRUNNER_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join([str(shim), str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env |= {"COLUMNS": "200", "AGENTRUNNER_HOST": f"127.0.0.1:{host_port}"}
    log = tmp_path / "walkthrough.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", "-c", "set -euo pipefail\n" + "\n".join(lines[1:])],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=300)
            out = log.read_text()
            assert proc.returncode == 0, out[-6000:]
            events = _chat(f"http://127.0.0.1:{console_port}", "hi from the console")
        finally:  # the host (and the bridge it started) run on in the background: end the whole group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert "Traceback" not in out, out[-4000:]
    assert "langbot.yaml: ok" in out, out[-4000:]  # config check, the bridge started for it
    assert re.search(r"plugin:qa/kit/echo\s.*langbot", out), out[-4000:]  # runners
    assert "echo: hello from the CLI" in out and re.search(r"run run_\w+: completed", out), out[-4000:]
    finished = [e for e in events if e.get("type") == "finished"]
    assert finished and finished[-1]["status"] == "completed", events
    texts = [e["data"] for e in events if e.get("type") == "result" and e.get("payload") == "run_completed"]
    assert texts == [{"finish_reason": "stop", "message": {"content": "echo: hi from the console"}}], events
