"""The acp runner's config (`ctx.config`), validated after the SDK's schema check.

`acp-command` is a command line (split like a shell would, no shell runs it) or a JSON list; it is
required for `provider: custom` and replaces the preset's command otherwise.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from agentrunner.config import JsonConfig
from agentrunner.harness.turns import env_names, mcp_servers
from agentrunner_runners.acp.presets import PRESETS, Preset

PERMISSIONS = ("workspace", "allow", "reject", "ask")


def command_line(value: Any) -> list[str]:
    """`acp-command` as argv: a JSON list, or a string split like a shell would."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        else:
            return shlex.split(text)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v]
    raise ValueError("expected a command line or a JSON list of strings")


class AcpConfig(BaseModel):
    """Validated config (README "Config")."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    provider: Literal["claude-code", "codex", "gemini", "qwen-code", "opencode", "custom"] = "claude-code"
    acp_command: list[str] = Field(default_factory=list, alias="acp-command", validate_default=True)
    env: JsonConfig[dict[str, str]] = Field(default_factory=dict, alias="env-json")
    workspace: str = ""
    timeout: float = Field(300, gt=0, le=86400)
    reuse_session: bool = Field(True, alias="reuse-session")
    #: the session mode to set; "" = the preset's, "agent" = keep the agent's own
    session_mode: str = Field("", alias="session-mode", max_length=128)
    permissions: Literal["workspace", "allow", "reject", "ask"] = "workspace"
    approval_timeout: float = Field(300, gt=0, le=86400, alias="approval-timeout")
    #: how long `initialize` and the session requests may take (an agent that never answers)
    rpc_timeout: float = Field(60, gt=0, le=3600, alias="rpc-timeout")
    client_fs: bool = Field(True, alias="client-fs")
    client_terminal: bool = Field(False, alias="client-terminal")
    mcp_servers: JsonConfig[dict[str, dict[str, Any]]] = Field(default_factory=dict, alias="mcp-servers-json")
    enable_langbot_mcp: bool = Field(True, alias="enable-langbot-mcp")
    #: `auto`: HTTP when the agent advertises `mcpCapabilities.http`, else stdio
    mcp_bridge_transport: Literal["auto", "http", "stdio"] = Field("auto", alias="mcp-bridge-transport")
    location: Literal["local", "remote-ssh"] = "local"
    ssh_target: str = Field("", alias="ssh-target", validate_default=True)
    ssh_port: int = Field(22, alias="ssh-port", ge=1, le=65535)
    ssh_command: str = Field("ssh", alias="ssh-command", min_length=1)

    @field_validator("acp_command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> list[str]:
        return command_line(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return env_names(value)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _servers(cls, value: Any) -> dict[str, dict[str, Any]]:
        return mcp_servers(value)

    @field_validator("ssh_target")
    @classmethod
    def _ssh(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("location") == "remote-ssh" and not value:
            raise ValueError("is required when location is remote-ssh")
        if value.startswith("-"):
            raise ValueError("cannot start with '-'")
        return value

    @model_validator(mode="after")
    def _custom_needs_command(self) -> AcpConfig:
        if self.provider == "custom" and not self.acp_command:
            raise ValueError("acp-command is required when provider is custom")
        return self

    @property
    def preset(self) -> Preset:
        return PRESETS[self.provider]

    @property
    def argv(self) -> list[str]:
        """The agent's command line: `acp-command`, else the preset's."""
        return list(self.acp_command or self.preset.command)

    @property
    def mode(self) -> str:
        """The session mode to set ("" = none)."""
        if self.session_mode == "agent":
            return ""
        return self.session_mode or self.preset.mode

    @property
    def label(self) -> str:
        return self.preset.label
