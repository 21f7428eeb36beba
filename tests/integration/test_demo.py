"""`make demo` as a user runs it: a subprocess with no model endpoint configured (the bundled mock)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from agentrunner_host.demos import conversation as demo
from tests.integration.conftest import ROOT


def test_demo_runs_both_conversations_offline() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUNNER_DEMO_")}
    env["COLUMNS"] = "200"  # keep rich from wrapping the lines asserted below
    done = subprocess.run(
        [sys.executable, "-m", "agentrunner_host.demos.conversation"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    # the reference runner's conversation, streamed, including its controlled failure
    assert "bot > echo: Hello, host!" in out and "tick 0 tick 1 tick 2" in out
    assert "[runner.error] controlled failure requested" in out
    # the local agent against the mock, said so; a tool call; a turn that quotes the first one
    assert f"{demo.ENV_BASE_URL} is not set" in out and "bundled mock model server" in out
    assert "bot > Hello Ada, nice to meet you! I'll remember that." in out
    assert 'tool current_time({"timezone": "Asia/Tokyo"})' in out
    assert "+09:00 in Tokyo." in out
    assert 'bot > You told me earlier: "Hi! I\'m Ada, and my favourite fruit is the tangerine."' in out
    assert "4 earlier message(s) via the history API" in out
    assert "console http://127.0.0.1:" in out  # the web console, on while the demo runs
    assert out.rstrip().endswith("demo finished")


def test_services_demo_runs_one_turn_per_service_against_the_mocks() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "agentrunner_host.demos.services"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "every turn goes to the bundled mock services" in out  # it says it uses mocks
    for heard in ("Dify heard:", "n8n heard:", "Langflow heard:", "Coze heard:", "Tbox heard:"):
        assert f"bot > {heard}" in out, heard
    assert "[1] 售后手册.pdf" in out and "(reasoning, not the answer:" in out
    assert "image in the answer: https://tbox.example/img/cat.png" in out
    assert out.count("(completed, stop;") == 6 and out.rstrip().endswith("services demo finished")


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_demo_harness_runs_against_the_fake_cli_and_says_so(harness: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTRUNNER_HARNESS_ROOTS"}
    env["COLUMNS"] = "250"
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not shutil.which(harness, path=p)
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentrunner_host.demos.harness", harness],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert f"no `{harness}` on PATH, so this demo uses the bundled fake CLI" in out
    heard = "Claude heard" if harness == "claude" else "Codex heard"
    assert f"bot > {heard}: Hello from the AgentRunner demo! (turn 1)" in out
    tool = 'tool Bash({"command": "ls"})' if harness == "claude" else 'tool shell({"command": "bash -lc ls"})'
    assert tool in out and "There are two entries" in out
    assert 'tool current_time({"timezone": "Asia/Tokyo"})' in out and "+09:00" in out
    if harness == "codex":  # the codex demo also shows approvals answered by the runner's policy
        assert "decisions: command=decline, inside=accept, outside=decline" in out
    last = "(turn 4)" if harness == "claude" else "(turn 5)"
    assert last in out and out.rstrip().endswith("demo finished")


def test_demo_acp_runs_against_the_scripted_acp_agent_and_says_so() -> None:
    """`make demo-acp` without `claude-agent-acp` on PATH: the bundled scripted ACP agent, same runner."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTRUNNER_HARNESS_ROOTS"}
    env["COLUMNS"] = "250"
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not shutil.which("claude-agent-acp", path=p)
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentrunner_host.demos.harness", "acp"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "no `claude-agent-acp` on PATH, so this demo uses the bundled fake CLI" in out
    assert "bot > Fake heard: Hello from the AgentRunner demo! (turn 1)" in out
    assert "tool Read(" in out and "The workspace has a README." in out
    assert "decisions: yes,no,no,yes" in out  # permission requests answered by the workspace policy
    assert "(turn 4)" in out and out.rstrip().endswith("demo finished")
