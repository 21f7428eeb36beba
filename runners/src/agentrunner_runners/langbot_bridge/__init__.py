"""LangBot Runner plugins behind the gRPC host: `python -m agentrunner_runners.langbot_bridge --plugins DIR`.

The bridge starts the public plugin runtime (`langbot-plugin`, the `langbot` extra) over a directory of
plugins and serves each of their runner components as a runner of this protocol. See README.md.
"""

from agentrunner_runners.langbot_bridge.bridge import Bridge
from agentrunner_runners.langbot_bridge.kinds import KINDS, ComponentKind

__all__ = ["KINDS", "Bridge", "ComponentKind"]
