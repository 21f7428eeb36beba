"""The bridge's open runs: which plugin owns each run id, and the run's host API (with its token).

A plugin's API call names its run (`run_id` in the payload); the runtime adds, from the trusted worker
connection and never from plugin data, the installation the call came from (`context.installation_uuid`,
which the bridge itself handed out per plugin in `get_plugin_settings`). A call is forwarded only when
that installation is the plugin that runs the named run: a plugin cannot spend another plugin's run
token by naming its run id.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from agentrunner.context import RunContext


@dataclass(slots=True)
class BridgedRun:
    """One open run: its SDK context (whose `api` calls the host with the run token) and its owner."""

    ctx: RunContext
    plugin_id: str  # "<author>/<name>"
    runner_id: str


class RunTable:
    """Open runs by run id, and the installation id handed to each plugin."""

    def __init__(self) -> None:
        self._runs: dict[str, BridgedRun] = {}
        self._installations: dict[str, str] = {}  # installation uuid -> plugin id
        self._by_plugin: dict[str, str] = {}

    def installation_for(self, plugin_id: str) -> str:
        """The installation uuid of a plugin (stable for the bridge process; unguessable)."""
        uuid = self._by_plugin.get(plugin_id)
        if uuid is None:
            uuid = f"bridge-{secrets.token_hex(16)}"
            self._by_plugin[plugin_id] = uuid
            self._installations[uuid] = plugin_id
        return uuid

    def plugin_of(self, installation_uuid: str | None) -> str | None:
        return self._installations.get(installation_uuid or "")

    def add(self, run: BridgedRun) -> None:
        self._runs[run.ctx.run_id] = run

    def remove(self, run_id: str) -> None:
        self._runs.pop(run_id, None)

    def get(self, run_id: str) -> BridgedRun | None:
        return self._runs.get(run_id)

    def __len__(self) -> int:
        return len(self._runs)
