"""The peer benchmark's plugin: one Runner, `echo` (components/runner/)."""

from langbot_plugin.api.definition.plugin import BasePlugin


class EchoPlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
