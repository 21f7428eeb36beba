"""The official Coze runner (`plugin:langbot/coze-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.coze:CozeRunner --port 0`.
"""

from agentrunner_runners.coze.runner import CozeRunner

__all__ = ["CozeRunner"]
