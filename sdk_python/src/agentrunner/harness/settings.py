"""The runner-config keys every CLI-harness runner takes (`acp`, `claude_code`, `codex`), declared and
checked once: a runner's config model subclasses `HarnessConfig` (and `RemoteSshConfig` when it can run
its harness on another machine over SSH) and adds its own keys.

- `env-json`: extra environment variables for the harness (names checked: `env_names`);
- `workspace`, `timeout`, `reuse-session`: where the harness works, how long a turn may take, whether
  a conversation's next run resumes the harness's session;
- `mcp-servers-json`, `enable-langbot-mcp`, `mcp-bridge-transport`: the harness's extra MCP servers
  (`mcp_servers`), the LangBot MCP bridge and its transport (`auto`: each runner's README says which);
- `location`, `ssh-target`, `ssh-port`, `ssh-command`: `remote-ssh` runs the harness on `ssh-target`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from agentrunner.config import JsonConfig
from agentrunner.harness.turns import env_names, mcp_servers

#: a runner config: unknown keys ignored, keys by alias or by name, immutable once validated
CONFIG = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class HarnessConfig(BaseModel):
    """The keys of every harness runner (see the module docstring)."""

    model_config = CONFIG

    env: JsonConfig[dict[str, str]] = Field(default_factory=dict, alias="env-json")
    workspace: str = ""
    timeout: float = Field(300, gt=0, le=86400)
    reuse_session: bool = Field(True, alias="reuse-session")
    mcp_servers: JsonConfig[dict[str, dict[str, Any]]] = Field(default_factory=dict, alias="mcp-servers-json")
    enable_langbot_mcp: bool = Field(True, alias="enable-langbot-mcp")
    mcp_bridge_transport: Literal["auto", "http", "stdio"] = Field("auto", alias="mcp-bridge-transport")

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return env_names(value)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _servers(cls, value: Any) -> dict[str, dict[str, Any]]:
        return mcp_servers(value)


class RemoteSshConfig(BaseModel):
    """`location: remote-ssh` and the SSH keys of a harness that can run on another machine."""

    model_config = CONFIG

    location: Literal["local", "remote-ssh"] = "local"
    ssh_target: str = Field("", alias="ssh-target", validate_default=True)
    ssh_port: int = Field(22, alias="ssh-port", ge=1, le=65535)
    ssh_command: str = Field("ssh", alias="ssh-command", min_length=1)

    @field_validator("ssh_target")
    @classmethod
    def _ssh(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("location") == "remote-ssh" and not value:
            raise ValueError("is required when location is remote-ssh")
        if value.startswith("-"):
            raise ValueError("cannot start with '-'")
        return value
