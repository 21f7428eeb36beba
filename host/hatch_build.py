"""Puts the example configuration into the host's wheel as `agentrunner_host/examples`.

The examples live at the repository's root (`examples/`, what the README and compose.yaml use); the
sdist carries a copy (`force-include` in pyproject.toml), so a wheel built from the checkout or from
the sdist gets the same files. An editable install reads them from the checkout instead
(`agentrunner_host.cli.examples.bundled`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ExamplesHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        root = Path(self.root)
        for candidate in (root / "examples", root.parent / "examples"):
            if (candidate / "host.yaml").is_file():
                build_data["force_include"][str(candidate)] = "agentrunner_host/examples"
                return
        raise FileNotFoundError(f"no examples/host.yaml next to {root} or in its parent")
