"""The web console in a real headless Chromium (Debian's `/usr/bin/chromium`, driven by Playwright; no
browser download): a chat turn with each official runner, finding the run in the runs list and its
page, the runners page, a cancel, and an interaction answered through its form.

The host, both runners and the mock model server run as their own processes, as `make demo` runs
them. Screenshots go to `var/test-artifacts/console/` (gitignored), kept for a person to look at.
"""

from __future__ import annotations

import os
import pathlib
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "console"
CHROMIUM = os.environ.get("AGENTRUNNER_CHROMIUM", "/usr/bin/chromium")
#: the flags known to work on these machines (no sandbox as root, no background networking)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

if not shutil.which(CHROMIUM):
    if os.environ.get("AGENTRUNNER_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"{CHROMIUM} is missing (install Debian's chromium: apt-get install chromium)")
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.timeout(240)
expect.set_options(timeout=30_000)  # a loaded 2-core machine: streams take their time


class Proc:
    def __init__(self, args: list[str], marker: str, env: dict[str, str] | None = None) -> None:
        self.popen = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, env={**os.environ, **(env or {})})  # fmt: skip
        self.lines: list[str] = []
        assert self.popen.stdout is not None
        while True:
            ready, _, _ = select.select([self.popen.stdout], [], [], 90)
            line = self.popen.stdout.readline() if ready else ""
            if not line:
                self.stop()
                raise RuntimeError(f"{args[1:4]} did not start")
            self.lines.append(line)
            if line.startswith(marker):
                self.value = line.split()[1]
                return

    def read_line(self, marker: str) -> str:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        assert line.startswith(marker), line
        return line.split()[1]

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("console")
    started: list[Proc] = []
    try:
        mock = Proc([sys.executable, "-m", "agentrunner_host.testing.openai_mock", "--port", "0"],
                    "MOCK_OPENAI_LISTENING")  # fmt: skip
        started.append(mock)
        runners = {}
        for name, target in (("reference", "agentrunner_runners.reference:ReferenceRunner"),
                             ("local-agent", "agentrunner_runners.local_agent:LocalAgentRunner")):  # fmt: skip
            proc = Proc([sys.executable, "-m", "agentrunner", "serve", target], "AGENTRUNNER_LISTENING")
            started.append(proc)
            runners[name] = proc.value
        config: dict[str, Any] = {
            "instance_id": "console-test",
            "listen": {"address": "127.0.0.1:0"},
            "console": {"address": "127.0.0.1:0"},
            "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "a")},
            "runners": [{"id": n, "address": a} for n, a in runners.items()],
            "models": [{"id": "chat", "base_url": f"http://127.0.0.1:{mock.value}/v1", "model": "mock-chat"}],
            "agents": [
                {"id": "echo", "runner_id": "plugin:langbot/reference/default",
                 "event_types": ["message.*", "interaction.submitted"]},
                {"id": "assistant", "runner_id": "plugin:langbot/local-agent/default",
                 "runner_config": {"model": "chat"}},
            ],
            "bindings": [
                {"id": "everything", "event": "message.*", "target": {"agent": "echo"}},
                {"id": "answers", "event": "interaction.submitted", "target": {"agent": "echo"}},
            ],
        }  # fmt: skip
        path = tmp / "host.yaml"
        path.write_text(yaml.safe_dump(config))
        cli = [sys.executable, "-m", "agentrunner_host"]
        assert (
            subprocess.run([*cli, "db", "upgrade", "--config", str(path)], capture_output=True).returncode
            == 0
        )
        host = Proc([*cli, "serve", "--config", str(path)], "AGENTRUNNER_HOST_LISTENING")
        started.append(host)
        yield host.read_line("AGENTRUNNER_CONSOLE")
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser, console_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(console_url)
    yield page
    context.close()


def _send(page: Page, agent: str, text: str) -> None:
    page.select_option("#agent", agent)
    page.fill("#chat-input", text)
    page.click("#send")


def test_chat_with_both_runners_then_find_the_run(page: Page) -> None:
    _send(page, "echo", "hello console")
    turn = page.locator(".turn").last
    expect(turn.get_by_test_id("bot-message")).to_have_text("echo: hello console")
    expect(turn.get_by_test_id("finished")).to_contain_text("completed")
    run_id = turn.get_by_test_id("run-link").inner_text()

    _send(page, "assistant", "What is the capital of France?")
    turn = page.locator(".turn").last
    expect(turn.get_by_test_id("finished")).to_contain_text("completed")
    expect(turn.get_by_test_id("bot-message")).to_contain_text(
        "What is the capital of France?"
    )  # the mock echoes
    page.screenshot(path=str(ARTIFACTS / "chat.png"), full_page=True)

    page.click("[data-nav=runs]")
    page.select_option("select[name=agent]", "echo")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    expect(row).to_be_visible()
    expect(row.get_by_test_id("status")).to_have_text("completed")
    page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)
    row.click()
    timeline = page.get_by_test_id("timeline")
    message = timeline.locator("tr[data-kind=message]")
    expect(message).to_have_count(1)  # three deltas and the completion: one entry
    expect(message).to_contain_text("3 deltas")
    expect(message).to_contain_text("echo: hello console")
    expect(page.get_by_test_id("audit")).to_contain_text("ListHistory")  # the history page it pulled
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)

    page.click("[data-nav=runners]")
    endpoints = page.get_by_test_id("endpoints")
    expect(endpoints.locator("tr")).to_have_count(2)
    expect(endpoints.get_by_test_id("status")).to_have_text(["up", "up"])
    page.screenshot(path=str(ARTIFACTS / "runners.png"), full_page=True)


def test_cancel_a_run_and_answer_an_interaction(page: Page) -> None:
    _send(page, "echo", "slow:300")
    turn = page.locator(".turn").last
    expect(turn.get_by_test_id("bot-message")).to_contain_text("tick 2")
    page.click("#cancel")
    expect(turn.get_by_test_id("finished")).to_contain_text("cancelled", timeout=30_000)
    expect(turn.get_by_test_id("run-failed")).to_contain_text("cancelled")

    _send(page, "echo", "ask:Which colour?")
    form = page.get_by_test_id("interaction")
    expect(form).to_contain_text("Which colour?")
    form.locator("input[name=answer]").fill("teal")
    form.locator("button[data-action=submit]").click()
    answer = page.locator(".turn").last
    expect(answer.get_by_test_id("bot-message")).to_have_text('answer to "Which colour?" (submit): teal')
    expect(answer.get_by_test_id("finished")).to_contain_text("completed")
    page.screenshot(path=str(ARTIFACTS / "cancel-and-interaction.png"), full_page=True)
