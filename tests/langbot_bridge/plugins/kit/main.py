"""The QA kit plugin: its runners live in components/runner/ (one YAML + one module each)."""

from langbot_plugin.api.definition.plugin import BasePlugin


class KitPlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
