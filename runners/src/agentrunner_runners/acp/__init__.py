"""The official ACP runner (`plugin:langbot/acp-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.acp:AcpRunner --port 0`.
"""

from agentrunner_runners.acp.config import AcpConfig
from agentrunner_runners.acp.presets import PRESETS
from agentrunner_runners.acp.runner import COST_KEY, SESSION_KEY, AcpRunner

__all__ = ["COST_KEY", "PRESETS", "SESSION_KEY", "AcpConfig", "AcpRunner"]
