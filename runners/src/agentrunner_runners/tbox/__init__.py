"""The official Tbox runner (`plugin:langbot/tbox-agent/default`); see `runner.py` and README.md.

Serve it: `python -m agentrunner serve agentrunner_runners.tbox:TboxRunner --port 0`.
"""

from agentrunner_runners.tbox.runner import TboxRunner

__all__ = ["TboxRunner"]
