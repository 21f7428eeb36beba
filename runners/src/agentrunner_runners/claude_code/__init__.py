"""The official claude-code runner (`plugin:langbot/claude-code-agent/default`); see `runner.py`.

Serve it: `python -m agentrunner serve agentrunner_runners.claude_code:ClaudeCodeRunner --port 0`.
"""

from agentrunner_runners.claude_code.config import ClaudeCodeConfig
from agentrunner_runners.claude_code.runner import SESSION_KEY, ClaudeCodeRunner

__all__ = ["SESSION_KEY", "ClaudeCodeConfig", "ClaudeCodeRunner"]
