"""`agentrunner-host config check` on a config with a `langbot-plugins` entry: the check starts the bridge
the host would start, reads the plugin runners' translated manifests, checks each agent's runner_config
against them (the bridge README's promise), and leaves no bridge, runtime or worker behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from pathlib import Path

import psutil

from tests.integration.conftest import CLI, ROOT, write_config
from tests.langbot_bridge.e2e_stack import KIT, PLUGINS


def _plugin_side(marker: str, work: Path) -> list[psutil.Process]:
    """This test's bridge (its environment carries `marker`, through the entry's `env`), runtime and
    workers (they run in its `--work-dir`), whatever else runs on the machine."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("QA_CHECK_MARKER") == marker or Path(proc.cwd()).is_relative_to(work):
                found.append(proc)
    return found


def test_config_check_reads_the_plugin_manifests_through_the_bridge(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    config = write_config(
        tmp_path / "host.yaml",
        {
            "runners": [
                {
                    "id": "langbot",
                    "kind": "langbot-plugins",
                    "plugins_dir": str(PLUGINS),
                    "args": ["--skip-deps-check", "--work-dir", str(tmp_path / "work")],
                    "env": ["QA_CHECK_MARKER"],
                }
            ],
            "agents": [
                {"id": "good", "runner_id": KIT + "echo", "runner_config": {"prefix": "> "}},
                {"id": "bad", "runner_id": KIT + "echo", "runner_config": {"prefix": 3, "colour": "red"}},
                {"id": "gone", "runner_id": KIT + "missing"},
            ],
        },
    )
    checked = subprocess.run(
        [*CLI, "config", "check", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "QA_CHECK_MARKER": marker},
    )
    out = checked.stdout
    assert checked.returncode == 1, out + checked.stderr
    assert "error: agents.1.runner_config.prefix: expected a string, got int" in out, out
    assert "error: agents.1.runner_config.colour: unknown key; plugin:qa/kit/echo declares" in out, out
    assert "warning: agents.2.runner_id: no runner endpoint serves 'plugin:qa/kit/missing'" in out, out
    assert "agents.0" not in out and "is down" not in out, out
    assert "[INFO]" not in out + checked.stderr  # the runtime's logs are not the check's output
    _, left = psutil.wait_procs(_plugin_side(marker, tmp_path / "work"), timeout=10)
    assert not left, [p.cmdline() for p in left]
