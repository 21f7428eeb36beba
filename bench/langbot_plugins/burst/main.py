"""The bridge benchmark's plugin: one Runner, `burst` (components/runner/)."""

from langbot_plugin.api.definition.plugin import BasePlugin


class BurstPlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
