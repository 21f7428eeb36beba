"""The claude-code runner's config (`ctx.config`), validated after the SDK's schema check.

Keys keep the public runner's names so `migrate-pipeline` copies them; JSON keys (`args-json`,
`env-json`, `mcp-servers-json`) take a JSON text or the native value.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from agentrunner.config import JsonConfig
from agentrunner.harness.settings import HarnessConfig, RemoteSshConfig

PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk")
#: what the model may do without asking by default (Claude Code permission rules): write into the
#: workspace's `outbox/` (the files it sends back). The LangBot MCP tools are added by the runner.
DEFAULT_ALLOWED_TOOLS = ("Edit(./outbox/**)",)
_RULE = re.compile(r"[^,\s(]+(?:\([^)]*\))?")


def _names(value: Any) -> list[str]:
    """A tool-name list from `"A,B C"` or `["A", "B"]`."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v for v in re.split(r"[,\s]+", value) if v]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v]
    raise ValueError("expected tool names, comma separated or as a list")


def _rules(value: Any) -> list[str]:
    """Permission rules from `"A, Bash(git log *) C"` or a list: separated by commas or spaces outside
    parentheses (a rule's content, e.g. `Bash(npm run test *)`, keeps its spaces)."""
    if value is None or value == "":
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ValueError("expected permission rules, comma separated or as a list")
    rules = _RULE.findall(value)
    if _RULE.sub("", value).strip(", \t\n"):
        raise ValueError(f"cannot read permission rules from {value!r} (unbalanced parentheses?)")
    return rules


class ClaudeCodeConfig(HarnessConfig, RemoteSshConfig):
    """Validated config."""

    command: str = Field("claude", min_length=1)
    args: JsonConfig[list[str]] = Field(default_factory=list, alias="args-json")
    streaming: bool = True
    permission_mode: str = Field("dontAsk", alias="permission-mode")
    max_turns: int = Field(10, alias="max-turns", ge=1, le=1000)
    allowed_tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOWED_TOOLS), alias="allowed-tools"
    )
    disallowed_tools: list[str] = Field(default_factory=lambda: ["AskUserQuestion"], alias="disallowed-tools")
    include_partial_messages: bool = Field(True, alias="include-partial-messages")

    @field_validator("disallowed_tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> list[str]:
        return _names(value)

    @field_validator("allowed_tools", mode="before")
    @classmethod
    def _allowed(cls, value: Any) -> list[str]:
        return _rules(value)

    @field_validator("permission_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if value not in PERMISSION_MODES:
            raise ValueError(f"must be one of {', '.join(PERMISSION_MODES)}")
        return value
