"""Test doubles of what the official runners talk to, for the tests and the demos.

- Local mock servers of the external services (Dify, n8n, Langflow, Coze, DashScope, Tbox): they speak
  each service's public wire format and split their writes at awkward byte boundaries, because networks
  do. See `mock_services.py`.
- Fakes of the external harnesses (`claude`, `codex`, `ssh`): `fake_claude.py`, `fake_codex.py`,
  `fake_ssh.py`.

`install_fake(directory, "claude")` writes an executable `directory/claude` that runs the fake with
this interpreter; put `directory` first on the runner's PATH (or use it as the `command` config).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FAKES = {
    "claude": "agentrunner_runners.testing.fake_claude",
    "codex": "agentrunner_runners.testing.fake_codex",
    "ssh": "agentrunner_runners.testing.fake_ssh",
    "acp": "agentrunner_runners.testing.fake_acp",
}


def install_fake(directory: str | os.PathLike[str], name: str, *, as_name: str | None = None) -> Path:
    """Writes an executable that runs the fake `name` (`claude`, `codex`, `ssh`); returns its path."""
    module = FAKES[name]
    path = Path(directory) / (as_name or name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_module({module!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path
