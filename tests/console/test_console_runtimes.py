"""The console's Runtimes page in a real headless Chromium: a runtime started with `python -m agentrunner
connect` (the real `claude` and `codex` from npm on its PATH) shows up with its status, labels, slots and
detected CLIs; a chat turn runs on it and its page lists the run; SIGKILLed, it shows offline."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.tools import pinned_versions, real_tool
from tests.runtimes.processes import LineProc, host_cli, start_runtime, write_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "console"
CHROMIUM = os.environ.get("AGENTRUNNER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not shutil.which(CHROMIUM):
    if os.environ.get("AGENTRUNNER_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"{CHROMIUM} is missing (install Debian's chromium: apt-get install chromium)")
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.timeout(300)
expect.set_options(timeout=30_000)


@pytest.fixture
def setup(tmp_path: pathlib.Path) -> Iterator[dict[str, Any]]:
    claude, codex = real_tool("claude"), real_tool("codex")
    config = {
        "instance_id": "console-runtimes",
        "listen": {"address": "127.0.0.1:0"},
        "console": {"address": "127.0.0.1:0"},
        "database": {
            "url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}",
            "artifact_dir": str(tmp_path / "a"),
        },
        "agents": [{"id": "echo", "runner_id": "plugin:langbot/reference/default"}],
        "bindings": [{"id": "everything", "event": "message.*", "target": {"agent": "echo"}}],
    }
    path = write_config(tmp_path / "host.yaml", config)
    assert host_cli("db", "upgrade", "--config", str(path)).returncode == 0
    host = LineProc(
        [sys.executable, "-m", "agentrunner_host", "serve", "--config", str(path), "--log-level", "WARNING"]
    )
    address = host.expect("AGENTRUNNER_HOST_LISTENING").split()[1]
    url = host.expect("AGENTRUNNER_CONSOLE").split()[1]
    home = tmp_path / "home"
    home.mkdir()
    node = pathlib.Path(shutil.which("node") or "/usr/bin/node").parent
    path_var = os.pathsep.join(
        [
            str(claude / "node_modules" / ".bin"),
            str(codex / "node_modules" / ".bin"),
            str(node),
            os.environ.get("PATH", ""),
        ]
    )
    runtime = start_runtime(
        address,
        "laptop",
        extra=["--slots", "2", "--label", "workspace=team-a", "--detect", "claude,codex"],
        env={"PATH": path_var, "HOME": str(home)},
    )
    try:
        yield {"url": url, "runtime": runtime, "versions": pinned_versions()}
    finally:
        runtime.stop()
        host.stop()


def test_the_runtimes_page_shows_the_runtime_its_clis_its_runs_and_its_end(setup: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    versions = setup["versions"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page: Page = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
        page.goto(setup["url"] + "#/runtimes")
        row = page.locator("tr[data-runtime=laptop]")
        expect(row.get_by_test_id("status")).to_have_text("online")
        expect(row.get_by_test_id("slots")).to_have_text("0/2")
        expect(row.get_by_test_id("replica")).to_have_text("console-runtimes")  # the replica it is on
        expect(row).to_contain_text("workspace=team-a")
        expect(row.get_by_test_id("clis")).to_have_text(
            f"claude {versions['CLAUDE_CODE_VERSION']} (logged out), codex {versions['CODEX_VERSION']} (logged out)"
        )
        page.screenshot(path=str(ARTIFACTS / "runtimes.png"), full_page=True)

        page.goto(setup["url"] + "#/chat")
        page.select_option("#agent", "echo")
        page.fill("#chat-input", "hello from the console")
        page.click("#send")
        turn = page.locator(".turn").last
        expect(turn.get_by_test_id("bot-message")).to_have_text("echo: hello from the console")
        run_id = turn.get_by_test_id("run-link").inner_text()

        page.goto(setup["url"] + "#/runtimes/laptop")
        expect(page.get_by_test_id("runtime-runs")).to_contain_text(run_id)
        expect(page.get_by_test_id("runtime-events")).to_contain_text("run_ended")
        page.screenshot(path=str(ARTIFACTS / "runtime.png"), full_page=True)
        page.goto(setup["url"] + f"#/runs/{run_id}")
        expect(page.locator("dl.record")).to_contain_text("laptop")

        setup["runtime"].signal(signal.SIGKILL)
        page.goto(setup["url"] + "#/runtimes")
        expect(page.locator("tr[data-runtime=laptop]").get_by_test_id("status")).to_have_text("offline")
        # its last heartbeat is not shown as if it were current
        expect(page.locator("tr[data-runtime=laptop]").get_by_test_id("last-seen")).to_contain_text(
            "offline (last heartbeat"
        )
        page.screenshot(path=str(ARTIFACTS / "runtimes-offline.png"), full_page=True)
        browser.close()
