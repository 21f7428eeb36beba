"""The `provider` presets: the command line that starts each known ACP agent, which of the runner's
environment variables it gets, and the session mode the runner puts it in.

Commands are unpinned binary names (install the agent yourself, e.g. `npm install -g
@agentclientprotocol/claude-agent-acp`); `acp-command` replaces the preset's command (`npx -y
@agentclientprotocol/claude-agent-acp` works too, at the price of npx's start-up on every turn).

The mode: the `@agentclientprotocol/*` agents start in modes that decide permissions themselves
(Claude's `auto` asks a model-side classifier, Codex's `agent` a "guardian" reviewer) and never send
`session/request_permission`; the runner applies its own policy (`permissions`), so it sets a mode in
which the agent asks: Claude's `default` ("always ask before making changes"), Codex's
`workspace-write` (edits in the workspace without asking, anything else asks). For the other agents the
runner keeps the mode the agent starts in unless `session-mode` names one.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Preset:
    """One known ACP agent."""

    #: the default command line (argv)
    command: tuple[str, ...]
    #: runner environment variables it gets, by prefix (its API keys, base URLs, settings)
    env_prefixes: tuple[str, ...] = ()
    #: the session mode the runner sets ("" keeps the agent's own)
    mode: str = ""
    label: str = ""


PRESETS: dict[str, Preset] = {
    "claude-code": Preset(
        ("claude-agent-acp",), ("ANTHROPIC_", "CLAUDE_"), mode="default", label="Claude Code"
    ),
    "codex": Preset(("codex-acp",), ("OPENAI_", "CODEX_"), mode="workspace-write", label="Codex"),
    "gemini": Preset(("gemini", "--acp"), ("GEMINI_", "GOOGLE_"), label="Gemini CLI"),
    "qwen-code": Preset(("qwen", "--acp"), ("QWEN_", "OPENAI_", "DASHSCOPE_"), label="Qwen Code"),
    "opencode": Preset(("opencode", "acp"), ("OPENCODE_", "ANTHROPIC_", "OPENAI_"), label="OpenCode"),
    "custom": Preset((), label="the ACP agent"),
}
PROVIDERS = tuple(PRESETS)
