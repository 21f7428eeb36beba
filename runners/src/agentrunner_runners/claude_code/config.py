"""The claude-code runner's config (`ctx.config`), validated after the SDK's schema check.

Keys keep the public runner's names so `migrate-pipeline` copies them; JSON keys (`args-json`,
`env-json`, `mcp-servers-json`) take a JSON text or the native value.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from agentrunner.config import JsonConfig
from agentrunner.harness.turns import env_names, mcp_servers

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


class ClaudeCodeConfig(BaseModel):
    """Validated config."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    command: str = Field("claude", min_length=1)
    args: JsonConfig[list[str]] = Field(default_factory=list, alias="args-json")
    env: JsonConfig[dict[str, str]] = Field(default_factory=dict, alias="env-json")
    workspace: str = ""
    timeout: float = Field(300, gt=0, le=86400)
    streaming: bool = True
    reuse_session: bool = Field(True, alias="reuse-session")
    permission_mode: str = Field("dontAsk", alias="permission-mode")
    max_turns: int = Field(10, alias="max-turns", ge=1, le=1000)
    allowed_tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOWED_TOOLS), alias="allowed-tools"
    )
    disallowed_tools: list[str] = Field(default_factory=lambda: ["AskUserQuestion"], alias="disallowed-tools")
    mcp_servers: JsonConfig[dict[str, dict[str, Any]]] = Field(default_factory=dict, alias="mcp-servers-json")
    enable_langbot_mcp: bool = Field(True, alias="enable-langbot-mcp")
    mcp_bridge_transport: Literal["auto", "http", "stdio"] = Field("auto", alias="mcp-bridge-transport")
    include_partial_messages: bool = Field(True, alias="include-partial-messages")
    location: Literal["local", "remote-ssh"] = "local"
    ssh_target: str = Field("", alias="ssh-target", validate_default=True)
    ssh_port: int = Field(22, alias="ssh-port", ge=1, le=65535)
    ssh_command: str = Field("ssh", alias="ssh-command", min_length=1)

    @field_validator("disallowed_tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> list[str]:
        return _names(value)

    @field_validator("allowed_tools", mode="before")
    @classmethod
    def _allowed(cls, value: Any) -> list[str]:
        return _rules(value)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _servers(cls, value: Any) -> dict[str, dict[str, Any]]:
        return mcp_servers(value)

    @field_validator("permission_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if value not in PERMISSION_MODES:
            raise ValueError(f"must be one of {', '.join(PERMISSION_MODES)}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return env_names(value)

    @field_validator("ssh_target")
    @classmethod
    def _ssh(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("location") == "remote-ssh" and not value:
            raise ValueError("is required when location is remote-ssh")
        if value.startswith("-"):
            raise ValueError("cannot start with '-'")
        return value
