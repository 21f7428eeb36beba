"""`make demo-claude` with the real Claude Code CLI and no network: the Anthropic API mock in the demo's
process (a thread of its own), scripted for the demo's turns, and the environment the runner gives
Claude Code to use it (`agentrunner_host.demos.harness`'s `real_mock` interface):

    env, config, stop = claude_demo(workdir)   # env for the runner process; stop() when done

The turns (`real_turns` of `agentrunner_host.demos.harness`) are answered deterministically: a streamed
greeting, a LangBot host tool over MCP (Claude Code's `ToolSearch`, then `langbot_call_tool`), a file
read in the workspace, and a turn that shows the resumed session (the mock counts the prompts it sees).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrunner_runners.testing.anthropic_mock import AnthropicMock, serve_in_thread

#: any key: the mock checks none but the rejected ones; it never leaves this machine
DEMO_KEY = "sk-ant-demo-not-a-real-key-0000"

SCRIPTS: dict[str, list[dict[str, object]]] = {
    "time in Tokyo": [
        {"tool_use": {"name": "ToolSearch", "input": {"query": "select:mcp__langbot__langbot_call_tool"}}},
        {
            "text": "Let me ask LangBot for the time.",
            "tool_use": {
                "name": "mcp__langbot__langbot_call_tool",
                "input": {"tool_name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}},
            },
        },
        {"text": "LangBot's current_time tool says: {tool_result}"},
    ],
    "LANGBOT_CONTEXT.md": [
        {"tool_use": {"name": "Read", "input": {"file_path": "{cwd}/LANGBOT_CONTEXT.md"}}},
        {"text": "I read LANGBOT_CONTEXT.md in {cwd}: it describes this LangBot conversation."},
    ],
}


def claude_demo(workdir: Path) -> tuple[dict[str, str], dict[str, Any], Callable[[], None]]:
    """Serves the scripted mock; returns the runner's environment for the real CLI to use it, no extra
    runner config, and the function that stops the mock."""
    home = workdir / "claude-home"
    home.mkdir(parents=True, exist_ok=True)
    mock = AnthropicMock()
    for match, steps in SCRIPTS.items():
        mock.script(match, steps)
    stack = contextlib.ExitStack()
    stack.enter_context(serve_in_thread(mock))
    env = {
        "ANTHROPIC_BASE_URL": mock.url,
        "ANTHROPIC_API_KEY": DEMO_KEY,
        "HOME": str(home),  # Claude Code's sessions and settings stay in the demo's directory
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return env, {}, stack.close
