"""`location: remote-ssh`: the agent runs on another machine, its stdio carried by ssh.

    ssh -T -o BatchMode=yes -p PORT TARGET bash -lc SCRIPT

The script enters the remote workspace (`<workspace>/<conversation dir>`, default root
`~/.langbot/workspaces`), reads one base64 line from stdin that exports the agent's environment (its
API keys never appear in argv, which every user of either machine can read), prints the workspace's
absolute path as one JSON line (the session's `cwd`), then `exec`s the agent, whose stdin and stdout
are from then on the ACP connection.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping, Sequence

from agentrunner_runners.acp.config import AcpConfig
from agentrunner_runners.acp.transport import REMOTE_CWD

REMOTE_ROOT = "$HOME/.langbot/workspaces"


def remote_directory(config: AcpConfig, directory_name: str) -> str:
    root = config.workspace.rstrip("/") or REMOTE_ROOT
    if root == "~" or root.startswith("~/"):
        root = "$HOME" + root[1:]
    return f"{root}/{directory_name}"


def bundle(env: Mapping[str, str]) -> bytes:
    """The first stdin line: base64 of `export NAME='value'` lines."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return base64.b64encode("\n".join(lines).encode()) + b"\n"


def script(directory: str, argv: Sequence[str]) -> str:
    if directory.startswith("$HOME/"):
        cd = f'mkdir -p "{directory}" && cd "{directory}"'
    else:
        cd = f"mkdir -p {shlex.quote(directory)} && cd {shlex.quote(directory)}"
    marker = '{"' + REMOTE_CWD + '": "%s"}\\n'
    return (
        f"set -e; {cd}; "
        "IFS= read -r bundle; "
        'eval "$(printf %s "$bundle" | base64 -d)"; '
        f"printf '{marker}' \"$PWD\"; "
        "exec " + " ".join(shlex.quote(a) for a in argv)
    )


def ssh_args(config: AcpConfig, remote_script: str) -> list[str]:
    argv = [config.ssh_command, "-T", "-o", "BatchMode=yes", "-p", str(config.ssh_port)]
    return [*argv, config.ssh_target, f"bash -lc {shlex.quote(remote_script)}"]
