"""The official Langflow runner (`plugin:langbot/langflow-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.langflow:LangflowRunner --port 0`.
"""

from agentrunner_runners.langflow.runner import LangflowRunner

__all__ = ["LangflowRunner"]
