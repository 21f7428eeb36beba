"""Where the real tools of `.ci/install-real-tools` live, and what a test does when one is missing.

A test that drives a real CLI or server asks `real_tool(name)` for its install directory. Without the
tool the test is skipped with the command that installs it, unless AGENTRUNNER_REQUIRE_REAL_TOOLS=1
(CI), where a missing tool fails it: CI must never pass by skipping the real-tool suites.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REAL_ROOT = REPO / ".tools" / "real"
VERSIONS_FILE = REPO / ".ci" / "real-tools.env"


def pinned_versions() -> dict[str, str]:
    """The `NAME=VERSION` pairs of `.ci/real-tools.env`."""
    versions: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


def real_tool(name: str) -> Path:
    """The install directory of real tool `name` (claude, codex, ...), or skip / fail without it."""
    directory = REAL_ROOT / name
    if (directory / ".installed").is_file():
        return directory
    reason = f"real tool {name!r} not installed: run .ci/install-real-tools {name}"
    if os.environ.get("AGENTRUNNER_REQUIRE_REAL_TOOLS") == "1":
        pytest.fail(f"AGENTRUNNER_REQUIRE_REAL_TOOLS=1 but {reason}")
    pytest.skip(reason)
