"""The QA crashy plugin: its runners live in components/runner/ (one YAML + one module each)."""

from langbot_plugin.api.definition.plugin import BasePlugin


class CrashyPlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
