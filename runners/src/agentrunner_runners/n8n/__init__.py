"""The official n8n runner (`plugin:langbot/n8n-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.n8n:N8nRunner --port 0`.
"""

from agentrunner_runners.n8n.runner import N8nRunner

__all__ = ["N8nRunner"]
