"""How the codex runner starts Codex: argv, the per-run `CODEX_HOME`, and TOML for its config.

    <command> exec --json [--model M] [--profile P] --sandbox S --cd WORKSPACE [--skip-git-repo-check]
      -c approval_policy="P" [-c key=value ...] <args-json...> [resume THREAD_ID]

(the order of the public Codex TypeScript SDK: options before `resume`), the prompt on stdin.

`CODEX_HOME` is a private directory per run under the workspace (`.langbot/codex-home-<run>`, mode
0700): `auth.json` and `sessions/` are symlinks into the user's codex home (so the login is reused and
the threads a run starts can be resumed by the next run), `skills/` links to the workspace's
`.codex/skills` (the run's authorized skills, read-only), `config.toml` is the user's copied, plus an
`[mcp_servers.<name>]` table for the LangBot bridge and each `mcp-servers-json` entry (mode 0600). The
directory is removed when the run ends.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrunner_runners.codex.config import CodexConfig

#: variables of the runner's environment Codex gets besides the SDK's base allowlist
CODEX_ENV_ALLOW = ("OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT")
#: the bridge's bearer token reaches Codex in this variable (`bearer_token_env_var`), never in a file
MCP_TOKEN_ENV = "LANGBOT_MCP_TOKEN"
HOME_LINKS = ("auth.json", "sessions")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def codex_args(config: CodexConfig, workspace: Path, thread_id: str) -> list[str]:
    """Codex's argv (the command first); `thread_id` resumes that thread."""
    argv = [config.command, "exec", "--json"]
    if config.model:
        argv += ["--model", config.model]
    if config.profile:
        argv += ["--profile", config.profile]
    argv += ["--sandbox", config.sandbox, "--cd", str(workspace)]
    if config.skip_git_repo_check:
        argv.append("--skip-git-repo-check")
    argv += ["-c", f"approval_policy={toml_value(config.effective_approval_policy)}"]
    for key, value in config.config_overrides.items():
        argv += ["-c", f"{key}={toml_value(value)}"]
    argv += list(config.args)
    if thread_id:
        argv += ["resume", thread_id]
    return argv


def app_server_args(config: CodexConfig) -> list[str]:
    """The app-server's argv: `<command> app-server --listen stdio:// <args-json...>` (per-thread
    settings go in `thread/start` / `thread/resume`, not in argv)."""
    return [config.command, "app-server", "--listen", "stdio://", *config.args]


def thread_params(config: CodexConfig, workspace: Path) -> dict[str, Any]:
    """The settings `thread/start` and `thread/resume` share (v2 wire names; unset ones omitted so
    Codex falls back to the user's config)."""
    params: dict[str, Any] = {
        "cwd": str(workspace),
        "approvalPolicy": config.effective_approval_policy,
        "sandbox": config.sandbox,
    }
    if config.model:
        params["model"] = config.model
    if config.profile:
        params["profile"] = config.profile
    if config.config_overrides:
        params["config"] = dict(config.config_overrides)
    return params


# -- TOML -------------------------------------------------------------------------------------------


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """A TOML value (JSON's string escapes are TOML basic-string escapes when non-ASCII stays raw)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise ValueError(f"cannot write {type(value).__name__} as TOML")


def mcp_table(name: str, server: Mapping[str, Any]) -> str:
    """One `[mcp_servers.<name>]` table from a Claude-style entry (`command`/`args`/`env` or `url`)."""
    lines = [f"[mcp_servers.{toml_key(name)}]"]
    if server.get("url"):
        lines.append(f"url = {toml_value(str(server['url']))}")
        if server.get("bearer_token_env_var"):
            lines.append(f"bearer_token_env_var = {toml_value(str(server['bearer_token_env_var']))}")
        headers = server.get("headers") or server.get("http_headers")
        if headers:
            lines.append(f"http_headers = {toml_value({str(k): str(v) for k, v in headers.items()})}")
    else:
        lines.append(f"command = {toml_value(str(server['command']))}")
        lines.append(f"args = {toml_value([str(a) for a in server.get('args') or []])}")
        if server.get("env"):
            lines.append(f"env = {toml_value({str(k): str(v) for k, v in server['env'].items()})}")
    return "\n".join(lines) + "\n"


# -- CODEX_HOME -------------------------------------------------------------------------------------


class HomeConflict(ValueError):
    """The user's `config.toml` cannot be used as it is (invalid, or defines a server we add)."""


def source_home(config: CodexConfig) -> Path:
    """The user's codex home: the `codex-home` config, else the runner's `CODEX_HOME`, else ~/.codex."""
    chosen = config.codex_home or os.environ.get("CODEX_HOME") or str(Path.home() / ".codex")
    return Path(chosen).expanduser()


def make_home(
    target: Path, source: Path, servers: Mapping[str, Mapping[str, Any]], *, skills: Path | None = None
) -> Path:
    """Creates the per-run `CODEX_HOME` at `target` (module docstring); returns it."""
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    target.chmod(0o700)
    (source / "sessions").mkdir(parents=True, exist_ok=True)
    for name in HOME_LINKS:
        if (source / name).exists():
            (target / name).symlink_to((source / name).resolve())
    if skills is not None and skills.is_dir():
        (target / "skills").symlink_to(skills)
    user = source / "config.toml"
    base = user.read_text(encoding="utf-8") if user.is_file() else ""
    try:
        defined = tomllib.loads(base).get("mcp_servers") or {}
    except tomllib.TOMLDecodeError as exc:
        raise HomeConflict(f"{user} is not valid TOML: {exc}") from None
    clash = sorted(set(defined) & set(servers))
    if clash:
        raise HomeConflict(f"{user} already defines MCP server(s) {', '.join(clash)}")
    tables = "\n".join(mcp_table(name, server) for name, server in servers.items())
    text = base.rstrip("\n") + ("\n\n" if base.strip() else "") + tables
    fd = os.open(target / "config.toml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return target


def remove_home(target: Path) -> None:
    """Removes the per-run home; the symlinked login and sessions stay where they are."""
    shutil.rmtree(target, ignore_errors=True)
