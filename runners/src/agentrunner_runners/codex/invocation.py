"""How the codex runner starts Codex: argv, the conversation's `CODEX_HOME`, and TOML for its config.

    <command> exec --json [--model M] [--profile P] --sandbox S --cd WORKSPACE [--skip-git-repo-check]
      -c approval_policy="P" [-c key=value ...] <args-json...> [resume THREAD_ID]

(the order of the public Codex TypeScript SDK: options before `resume`), the prompt on stdin.

`CODEX_HOME` is a private directory per conversation, `<workspace>/.codex/home` (mode 0700; the same
path every turn, so Codex's instructions that name it, like the skills list, stay the same and are not
sent again on a resumed thread; under `.codex/`, which Codex's `workspace-write` sandbox keeps
read-only for the commands the model runs): `auth.json` and `sessions/` are symlinks into the user's
codex home (so the login is reused and the threads a run starts can be resumed by the next run),
`skills/` links to the workspace's `.codex/skills` (the run's authorized skills, read-only), and
`config.toml` (mode 0600, written for every turn while it holds the conversation's lock, removed
when the turn ends: it names the run's bridge) is the user's copied,
plus the runner's defaults for what the user's file does not set (`DEFAULT_TABLES`: the environment of
the model's commands without secrets, `/tmp` and `$TMPDIR` not writable by them) and an
`[mcp_servers.<name>]` table for the LangBot bridge (its tools callable without asking) and each
`mcp-servers-json` entry.
"""

from __future__ import annotations

import json
import os
import re
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
#: the conversation's CODEX_HOME and its scratch TMPDIR, relative to the workspace
HOME_DIR = ".codex/home"
TMP_DIR = ".tmp"
#: name patterns the model's commands never inherit, on top of the secret names the runner knows
#: (Codex's own default excludes, `*KEY*` `*SECRET*` `*TOKEN*`, and a few more; case-insensitive)
SECRET_PATTERNS = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*")
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
    """One `[mcp_servers.<name>]` table from a Claude-style entry (`command`/`args`/`env` or `url`, and
    Codex's `default_tools_approval_mode` when the entry sets it)."""
    lines = [f"[mcp_servers.{toml_key(name)}]"]
    if server.get("default_tools_approval_mode"):
        lines.append(
            f"default_tools_approval_mode = {toml_value(str(server['default_tools_approval_mode']))}"
        )
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
        if server.get("env_vars"):
            lines.append(f"env_vars = {toml_value([str(v) for v in server['env_vars']])}")
    return "\n".join(lines) + "\n"


# -- CODEX_HOME -------------------------------------------------------------------------------------


class HomeConflict(ValueError):
    """The user's `config.toml` cannot be used as it is (invalid, or defines a server we add)."""


def source_home(config: CodexConfig) -> Path:
    """The user's codex home: the `codex-home` config, else the runner's `CODEX_HOME`, else ~/.codex."""
    chosen = config.codex_home or os.environ.get("CODEX_HOME") or str(Path.home() / ".codex")
    return Path(chosen).expanduser()


def user_config(source: Path) -> tuple[str, dict[str, Any]]:
    """The user's `config.toml`: its text and parsed content ("" and {} without one)."""
    user = source / "config.toml"
    text = user.read_text(encoding="utf-8") if user.is_file() else ""
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HomeConflict(f"{user} is not valid TOML: {exc}") from None


def check_config(source: Path, servers: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The user's `config.toml` (`user_config`), refused when it defines a server the runner adds."""
    base, parsed = user_config(source)
    clash = sorted(set(parsed.get("mcp_servers") or {}) & set(servers))
    if clash:
        raise HomeConflict(f"{source / 'config.toml'} already defines MCP server(s) {', '.join(clash)}")
    return base, parsed


def default_tables(secret_names: list[str]) -> dict[str, dict[str, Any]]:
    """The tables the runner adds when the user's `config.toml` does not define them:

    - `shell_environment_policy`: the model's commands inherit Codex's environment (already the
      runner's allowlist) without the secrets in it (`exclude`: the secret-looking names Codex gets,
      its API key among them, and `SECRET_PATTERNS`);
    - `sandbox_workspace_write`: `/tmp` and `$TMPDIR` are not writable under `workspace-write`
      (otherwise every conversation could write into every other's workspace under `/tmp`); the
      runner points `TMPDIR` into the conversation's workspace instead.
    """
    return {
        "shell_environment_policy": {
            "inherit": "all",
            "ignore_default_excludes": False,
            "exclude": [*sorted(set(secret_names)), *SECRET_PATTERNS],
        },
        "sandbox_workspace_write": {"exclude_slash_tmp": True, "exclude_tmpdir_env_var": True},
    }


def table(name: str, values: Mapping[str, Any]) -> str:
    return f"[{toml_key(name)}]\n" + "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in values.items())


def effective(
    key: str, overrides: Mapping[str, Any], user: Mapping[str, Any], defaults: Mapping[str, Any]
) -> Any:
    """A dotted `table.key` setting as Codex will see it: `config-overrides-json` (dotted or as a
    table), else the user's `config.toml`, else the runner's default table when the user's file has no
    such table; None when nobody sets it (Codex's own default)."""
    name, _, item = key.partition(".")
    if key in overrides:
        return overrides[key]
    if isinstance(overrides.get(name), Mapping) and item in overrides[name]:
        return overrides[name][item]
    if name in user:
        return user[name].get(item) if isinstance(user[name], Mapping) else None
    return defaults.get(name, {}).get(item)


def make_home(
    target: Path,
    source: Path,
    servers: Mapping[str, Mapping[str, Any]],
    *,
    skills: Path | None = None,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Creates or refreshes the conversation's `CODEX_HOME` at `target` (module docstring); returns it.
    Called by each turn while it holds the conversation's lock, so links and config are the turn's own."""
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    target.chmod(0o700)
    (source / "sessions").mkdir(parents=True, exist_ok=True)
    links = {name: (source / name).resolve() for name in HOME_LINKS if (source / name).exists()}
    if skills is not None and skills.is_dir():
        links["skills"] = skills
    for name in (*HOME_LINKS, "skills"):
        link = target / name
        if link.is_symlink():
            link.unlink()
        if name in links and not link.exists():
            link.symlink_to(links[name])
    base, parsed = check_config(source, servers)
    added = [table(name, values) for name, values in (defaults or {}).items() if name not in parsed]
    added += [mcp_table(name, server) for name, server in servers.items()]
    text = base.rstrip("\n") + ("\n\n" if base.strip() else "") + "\n".join(added)
    fd = os.open(target / "config.toml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return target


def remove_config(target: Path) -> None:
    """Removes the home's `config.toml` when the turn ends (it names the run's bridge; the next turn,
    maybe another run's, writes its own); the home itself stays for the conversation's next turn."""
    (target / "config.toml").unlink(missing_ok=True)
