"""The official Dify runner (`plugin:langbot/dify-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.dify:DifyRunner --port 0`.
"""

from agentrunner_runners.dify.runner import DifyRunner

__all__ = ["DifyRunner"]
