"""README "Running a host yourself", command by command, as a new user would run it: the mock model
server, db upgrade, kb ingest, both runners, config check, serve, runners, two runs, runs list/show.

The commands are read from the README's block; only the ports are swapped for free ones (each test
run gets its own) and `uv run` for this interpreter. Background (`&`) commands are waited for by their
ready line and stopped at the end.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
READY = ("MOCK_OPENAI_LISTENING", "AGENTRUNNER_LISTENING", "AGENTRUNNER_HOST_LISTENING")


def _block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Running a host yourself", 1)[1]
    body = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in body.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    if words[:3] == ["uv", "run", "python"]:
        return [sys.executable, *words[3:]]
    if words[:3] == ["uv", "run", "agentrunner-host"]:
        return [sys.executable, "-m", "agentrunner_host", *words[3:]]
    raise AssertionError(f"unexpected README command {command!r}")


def _wait_ready(proc: subprocess.Popen[str], command: str) -> None:
    assert proc.stdout is not None
    for _ in range(200):
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"{command!r} exited before it was ready")
        if line.startswith(READY):
            return
    raise AssertionError(f"{command!r} printed no ready line")


def test_running_a_host_yourself_works_as_written(tmp_path: pathlib.Path) -> None:
    commands = _block()
    ports = {p: str(_free_port()) for p in ("8900", "50051", "50061", "50062")}
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = tmp_path / "examples" / "host.yaml"
    text = config.read_text()
    for old, new in ports.items():
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    config.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRUNNER_", "OPENAI_"))}
    env["AGENTRUNNER_HOST"] = f"127.0.0.1:{ports['50051']}"  # the client commands' default 127.0.0.1:50051
    env["COLUMNS"] = "200"
    background: list[subprocess.Popen[str]] = []
    outputs: dict[str, str] = {}
    run_id = ""
    try:
        for raw in commands:
            command = raw.split("  #", 1)[0].strip()
            for old, new in ports.items():
                command = command.replace(f"--port {old}", f"--port {new}").replace(f":{old}/", f":{new}/")
            if command.startswith("export "):
                for assignment in shlex.split(command)[1:]:
                    key, _, value = assignment.partition("=")
                    env[key] = value
                continue
            command = command.replace("RUN_ID", run_id)
            if command.endswith("&"):
                proc = subprocess.Popen(
                    _argv(command[:-1]), cwd=tmp_path, env=env, text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                background.append(proc)
                _wait_ready(proc, command)
                continue
            done = subprocess.run(
                _argv(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, f"{command!r} failed:\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, done.stderr
            outputs[command] = done.stdout
            found = re.search(r"run (run_[0-9a-f]+):", done.stderr)
            if found:
                run_id = found.group(1)
    finally:
        for proc in background:
            proc.terminate()
        for proc in background:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    by_start = {c.split("  ", 1)[0]: out for c, out in outputs.items()}
    runners = next(out for c, out in by_start.items() if c.endswith("agentrunner-host runners"))
    assert "plugin:langbot/reference/default" in runners and "plugin:langbot/local-agent/default" in runners
    assert "echo: hello" in next(out for c, out in by_start.items() if '"hello"' in c)
    # the mock echoes what reached the model: the question with the handbook passage retrieved for it
    rag = next(out for c, out in by_start.items() if "on-call" in c)
    assert "after the first month" in rag
    listed = next(out for c, out in by_start.items() if c.endswith("runs list"))
    assert listed.count("completed") >= 2 and run_id in listed.replace("\n", "")
    shown = next(out for c, out in by_start.items() if "runs show" in c)
    assert run_id in shown and "assistant" in shown and "message" in shown


pytestmark = pytest.mark.timeout(300)
