"""The official DashScope runner (`plugin:langbot/dashscope-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.dashscope:DashScopeRunner --port 0`.
"""

from agentrunner_runners.dashscope.runner import DashScopeRunner

__all__ = ["DashScopeRunner"]
