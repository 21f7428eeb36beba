"""The bridge: a plugin runtime, its plugins' runners as gRPC runners, and their API calls to the host.

`Bridge.start()` starts the runtime over the plugins directory (`runtime.py`), waits for the plugins to
register, discovers their runners (every kind of `kinds.py`), translates each manifest (`manifest.py`)
and keeps the catalog the gRPC servicer (`server.py`) serves. Discovery runs again every
`refresh_seconds` and after a runtime restart, so a plugin whose worker came up late is served once it
does. Plugin settings asked for by the runtime come from `plugins.py`; plugins' API calls go through
`api.py` with the token of the run they name.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import structlog

from agentrunner.manifest import ManifestError
from agentrunner_runners.langbot_bridge.api import ApiRouter
from agentrunner_runners.langbot_bridge.manifest import translate
from agentrunner_runners.langbot_bridge.plugins import Plugin, find_plugins
from agentrunner_runners.langbot_bridge.runner import PluginRunner, make_runner
from agentrunner_runners.langbot_bridge.runs import RunTable
from agentrunner_runners.langbot_bridge.runtime import MAX_IN_FLIGHT, PluginRuntime

log = structlog.get_logger("agentrunner_runners.langbot_bridge.bridge")


class Bridge:
    """Everything one bridge process runs; `await start()`, serve `catalog()`, `await close()`."""

    def __init__(
        self,
        plugins_dir: Path,
        *,
        work_dir: Path | None = None,
        plugin_config: dict[str, dict[str, Any]] | None = None,
        skip_deps_check: bool = False,
        max_in_flight: int = MAX_IN_FLIGHT,
        refresh_seconds: float = 15.0,
    ) -> None:
        self.plugins: list[Plugin] = find_plugins(plugins_dir)
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="langbot-bridge-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._plugin_config = plugin_config or {}
        self.runs = RunTable()
        self.router = ApiRouter(self.runs, self.plugin_settings)
        self.runtime = PluginRuntime(
            self.plugins,
            self.work_dir,
            self.router.handle,
            skip_deps_check=skip_deps_check,
            max_in_flight=max_in_flight,
        )
        self.runtime.on_restart = self.refresh
        self._runners: dict[str, type[PluginRunner]] = {}
        self._refresh_seconds = refresh_seconds
        self._refresher: asyncio.Task[None] | None = None

    def plugin_settings(self, author: str, name: str) -> dict[str, Any]:
        """The runtime's `get_plugin_settings`: enabled, the plugin's settings, its installation id."""
        plugin_id = f"{author}/{name}"
        defaults = next((p.defaults for p in self.plugins if p.plugin_id == plugin_id), {})
        return {
            "enabled": True,
            "priority": 0,
            "plugin_config": {**defaults, **self._plugin_config.get(plugin_id, {})},
            "installation_uuid": self.runs.installation_for(plugin_id),
            "install_source": "local",
            "install_info": {},
        }

    def catalog(self) -> list[PluginRunner]:
        return [cls() for cls in self._runners.values()]

    async def start(self, startup_timeout: float = 60.0) -> None:
        if not self.plugins:
            log.warning(
                "langbot.no_plugins", hint="a plugin is a directory with a manifest.yaml of kind Plugin"
            )
        await self.runtime.start(startup_timeout)
        await self.refresh()
        self._refresher = asyncio.create_task(self._refresh_loop(), name="langbot-discovery")

    async def refresh(self) -> None:
        """Discovers the runners again; keeps the previous catalog when the runtime cannot answer."""
        try:
            entries = await self.runtime.discover()
        except Exception as exc:
            log.warning("langbot.discovery_unavailable", error=str(exc)[:200])
            return
        fresh: dict[str, type[PluginRunner]] = {}
        for kind, entry in entries:
            try:
                manifest = translate(entry, kind)
            except ManifestError as exc:
                log.warning(
                    "langbot.manifest_skipped", runner=str(entry.get("runner_name"))[:100], reason=str(exc)
                )
                continue
            if manifest.id in fresh:
                continue
            old = self._runners.get(manifest.id)
            same = old is not None and old.get_manifest() == manifest and old.kind == kind
            fresh[manifest.id] = old if same and old is not None else make_runner(self, kind, entry, manifest)
        expected = {p.plugin_id for p in self.plugins}
        for runner_id, cls in self._runners.items():  # a plugin restarting keeps its runners meanwhile
            if runner_id not in fresh and f"{cls.plugin_author}/{cls.plugin_name}" in expected:
                fresh[runner_id] = cls
        if sorted(fresh) != sorted(self._runners):
            log.info("langbot.runners", runners=sorted(fresh))
        self._runners = fresh

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_seconds)
            with contextlib.suppress(Exception):
                await self.refresh()

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await self.runtime.close()
        if self._own_work_dir:
            await asyncio.to_thread(shutil.rmtree, self.work_dir, True)
