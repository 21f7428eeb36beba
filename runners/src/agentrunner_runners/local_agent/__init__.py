"""The official local agent (`plugin:langbot/local-agent/default`); see `runner.py` for the run flow.

Serve it: `python -m agentrunner serve agentrunner_runners.local_agent:LocalAgentRunner --port 0`.
"""

from agentrunner_runners.local_agent.config import LocalAgentConfig
from agentrunner_runners.local_agent.runner import LocalAgentRunner

__all__ = ["LocalAgentConfig", "LocalAgentRunner"]
