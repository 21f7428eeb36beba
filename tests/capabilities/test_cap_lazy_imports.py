"""A host process that never calls a model, a tool or an HTML parser does not import their libraries:
`openai` alone costs more start-up CPU than the rest of the host, and every host and CLI process
would pay it (the first model call imports it, off the event loop)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("openai", "httpx2", "tenacity", "jsonschema", "lxml", "html_text", "frontmatter", "sqlite_vec")


def test_starting_a_host_or_its_cli_imports_none_of_the_call_time_libraries() -> None:
    script = (
        "import sys\n"
        "import agentrunner_host.server.app, agentrunner_host.cli, agentrunner_host.config.model\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
