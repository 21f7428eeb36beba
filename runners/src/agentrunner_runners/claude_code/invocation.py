"""How the claude-code runner starts Claude Code: argv, environment, MCP config, and the ssh form.

    <command> <args-json...> -p --verbose --output-format stream-json [--include-partial-messages]
      [--mcp-config FILE --strict-mcp-config] [--settings FILE] (--session-id UUID | --resume ID)
      --permission-mode MODE --max-turns N [--disallowedTools A,B] [--allowedTools RULE...]

The prompt goes on stdin. `remote-ssh` runs the same command on another machine through
`ssh -T -p PORT TARGET bash -lc SCRIPT`: the first stdin line carries (base64) a shell snippet that
writes the context files and the MCP config into the remote workspace and exports the environment;
the rest of stdin is the prompt. Nothing secret is ever in argv.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from agentrunner_runners.claude_code.config import ClaudeCodeConfig

MCP_CONFIG_NAME = "mcp-config.json"
REMOTE_ROOT = "$HOME/.langbot/workspaces"


@dataclasses.dataclass(slots=True)
class Session:
    """`--session-id` for a new session, `--resume` for a stored one."""

    session_id: str
    resume: bool


def langbot_rules(tool_names: Sequence[str]) -> list[str]:
    """Permission rules allowing exactly the LangBot bridge's tools (`mcp__langbot__<tool>`): the host
    authorizes every call against the run's grants, so Claude Code need not ask."""
    return [f"mcp__langbot__{name}" for name in tool_names]


def claude_args(
    config: ClaudeCodeConfig,
    session: Session,
    *,
    mcp_config_path: str | None,
    allowed: Sequence[str] = (),
    settings_path: str | None = None,
) -> list[str]:
    """Claude Code's argv (the command first); `allowed` are permission rules added to the config's."""
    argv = [config.command, *config.args, "-p", "--verbose", "--output-format", "stream-json"]
    if config.streaming and config.include_partial_messages:
        argv.append("--include-partial-messages")
    if mcp_config_path:
        argv += ["--mcp-config", mcp_config_path, "--strict-mcp-config"]
    if settings_path:
        argv += ["--settings", settings_path]
    argv += ["--resume", session.session_id] if session.resume else ["--session-id", session.session_id]
    argv += ["--permission-mode", config.permission_mode, "--max-turns", str(config.max_turns)]
    if config.disallowed_tools:
        argv += ["--disallowedTools", ",".join(config.disallowed_tools)]
    rules = [*config.allowed_tools, *(r for r in allowed if r not in config.allowed_tools)]
    if rules:
        argv += ["--allowedTools", *rules]
    return argv


def mcp_config(
    servers: Mapping[str, Mapping[str, Any]], langbot: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Claude Code's `--mcp-config` document: the configured servers plus the LangBot bridge."""
    entries = {name: dict(entry) for name, entry in servers.items()}
    if langbot is not None:
        entries["langbot"] = dict(langbot)
    return {"mcpServers": entries} if entries else None


def remote_directory(config: ClaudeCodeConfig, directory_name: str) -> str:
    """The remote workspace: `<workspace>/<conversation dir>` (default root `~/.langbot/workspaces`)."""
    root = config.workspace.rstrip("/") or REMOTE_ROOT
    if root == "~" or root.startswith("~/"):
        root = "$HOME" + root[1:]
    return f"{root}/{directory_name}"


def remote_bundle(
    files: Mapping[str, bytes], env: Mapping[str, str], *, private: Sequence[str] = ()
) -> bytes:
    """The first stdin line of a remote run: a base64 shell snippet that writes `files` (relative
    paths; `private` ones with mode 0600) and exports `env`."""
    lines = ["umask 077", "mkdir -p inputs outbox .langbot"]
    for rel, data in files.items():
        quoted = shlex.quote(rel)
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if parent:
            lines.append(f"mkdir -p {shlex.quote(parent)}")
        lines.append(f"printf %s {shlex.quote(base64.b64encode(data).decode())} | base64 -d > {quoted}")
        if rel not in private:
            lines.append(f"chmod 644 {quoted}")
    for key, value in env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    return base64.b64encode("\n".join(lines).encode()) + b"\n"


def remote_script(directory: str, argv: Sequence[str], *, cleanup: Sequence[str] = ()) -> str:
    """The script `bash -lc` runs remotely: enter the workspace, apply the bundle, run Claude Code."""
    cd = (
        f'mkdir -p "{directory}" && cd "{directory}"'
        if directory.startswith("$HOME/")
        else (f"mkdir -p {shlex.quote(directory)} && cd {shlex.quote(directory)}")
    )
    command = " ".join(shlex.quote(a) for a in argv)
    rm = f"rm -f {' '.join(shlex.quote(c) for c in cleanup)}; " if cleanup else ""
    return (
        "set -e; "
        f"{cd}; "
        "IFS= read -r bundle; "
        'eval "$(printf %s "$bundle" | base64 -d)"; '
        "set +e; "
        f"{command}; "
        "status=$?; "
        f"{rm}"
        "exit $status"
    )


def ssh_args(config: ClaudeCodeConfig, script: str, *, tunnel: tuple[int, int] | None = None) -> list[str]:
    """`ssh -T -p PORT [-R remote:127.0.0.1:local] TARGET bash -lc 'SCRIPT'`."""
    argv = [config.ssh_command, "-T", "-o", "BatchMode=yes", "-p", str(config.ssh_port)]
    if tunnel is not None:
        argv += ["-R", f"127.0.0.1:{tunnel[0]}:127.0.0.1:{tunnel[1]}"]
    return [*argv, config.ssh_target, f"bash -lc {shlex.quote(script)}"]


def dumps(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, indent=1).encode()
