"""The official codex runner (`plugin:langbot/codex-agent/default`); see `runner.py`.

Serve it: `python -m agentrunner serve agentrunner_runners.codex:CodexRunner --port 0`.
"""

from agentrunner_runners.codex.config import CodexConfig
from agentrunner_runners.codex.runner import SESSION_KEY, USAGE_KEY, CodexRunner

__all__ = ["SESSION_KEY", "USAGE_KEY", "CodexConfig", "CodexRunner"]
