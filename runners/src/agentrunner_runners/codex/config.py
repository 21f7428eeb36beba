"""The codex runner's config (`ctx.config`), validated after the SDK's schema check.

Keys keep the public codex-agent names where it has them (`command`, `args-json`, `env-json`,
`workspace`, `timeout`, `reuse-session`, `mcp-servers-json`) so `migrate-pipeline` copies them; JSON
keys take a JSON text or the native value.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from agentrunner.config import JsonConfig
from agentrunner.harness.settings import HarnessConfig

SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")
APPROVAL_POLICIES = ("never", "on-request", "on-failure", "untrusted")
#: how the runner answers Codex's approval requests (app-server transport); README "Approvals"
APPROVAL_ANSWERS = ("workspace", "decline", "ask", "accept")
_CONFIG_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class CodexConfig(HarnessConfig):
    """Validated config."""

    command: str = Field("codex", min_length=1)
    transport: Literal["app-server", "exec"] = "app-server"
    args: JsonConfig[list[str]] = Field(default_factory=list, alias="args-json")
    model: str = ""
    profile: str = ""
    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] = "workspace-write"
    #: when Codex asks; empty = `on-request` with app-server (the runner answers), `never` with exec
    approval_policy: Literal["", "never", "on-request", "on-failure", "untrusted"] = Field(
        "", alias="approval-policy"
    )
    #: how the runner answers what Codex asks (app-server only; exec declines everything)
    approvals: Literal["workspace", "decline", "ask", "accept"] = "workspace"
    approval_timeout: float = Field(300, gt=0, le=86400, alias="approval-timeout")
    rpc_timeout: float = Field(30, gt=0, le=3600, alias="rpc-timeout")
    config_overrides: JsonConfig[dict[str, Any]] = Field(default_factory=dict, alias="config-overrides-json")
    skip_git_repo_check: bool = Field(True, alias="skip-git-repo-check")
    codex_home: str = Field("", alias="codex-home")
    #: `auto` = `http`: ready in ~0.05 s, before Codex starts its turn (the stdio proxy takes 1.5-3 s)

    @property
    def effective_approval_policy(self) -> str:
        """The policy sent to Codex (the transport's default when the config leaves it empty)."""
        return self.approval_policy or ("on-request" if self.transport == "app-server" else "never")

    @field_validator("config_overrides")
    @classmethod
    def _overrides(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if not _CONFIG_KEY.match(key):
                raise ValueError(f"{key!r} is not a codex config key")
            if key == "approval_policy" or key == "sandbox_mode" or key.startswith("mcp_servers"):
                raise ValueError(
                    f"{key!r} has its own config key (approval-policy, sandbox, mcp-servers-json)"
                )
            if not isinstance(item, str | int | float | bool | list | dict):
                raise ValueError(f"{key!r}: the value must be a string, number, boolean, list or table")
        return value

    @field_validator("model", "profile")
    @classmethod
    def _no_flag(cls, value: str) -> str:
        if value.startswith("-"):
            raise ValueError("cannot start with '-'")
        return value
