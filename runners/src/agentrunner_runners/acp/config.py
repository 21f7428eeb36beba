"""The acp runner's config (`ctx.config`), validated after the SDK's schema check.

`acp-command` is a command line (split like a shell would, no shell runs it) or a JSON list; it is
required for `provider: custom` and replaces the preset's command otherwise.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentrunner.harness.settings import HarnessConfig, RemoteSshConfig
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


class AcpConfig(HarnessConfig, RemoteSshConfig):
    """Validated config (README "Config")."""

    provider: Literal["claude-code", "codex", "gemini", "qwen-code", "opencode", "custom"] = "claude-code"
    acp_command: list[str] = Field(default_factory=list, alias="acp-command", validate_default=True)
    #: the session mode to set; "" = the preset's, "agent" = keep the agent's own
    session_mode: str = Field("", alias="session-mode", max_length=128)
    permissions: Literal["workspace", "allow", "reject", "ask"] = "workspace"
    approval_timeout: float = Field(300, gt=0, le=86400, alias="approval-timeout")
    #: how long `initialize` and the session requests may take (an agent that never answers)
    rpc_timeout: float = Field(60, gt=0, le=3600, alias="rpc-timeout")
    client_fs: bool = Field(True, alias="client-fs")
    client_terminal: bool = Field(False, alias="client-terminal")
    #: `auto`: HTTP when the agent advertises `mcpCapabilities.http`, else stdio

    @field_validator("acp_command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> list[str]:
        return command_line(value)

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
