"""Claude Code's environment, and its API key kept out of it.

The rule (README, *Environment*): Claude Code gets the SDK's base allowlist (`PATH HOME USER LOGNAME
SHELL LANG LANGUAGE TERM TMPDIR TZ SSL_CERT_FILE SSL_CERT_DIR LC_*`), **every** `ANTHROPIC_*` and
`CLAUDE_*` variable of the runner's environment, the names in `AGENTRUNNER_HARNESS_ENV_PASSTHROUGH`,
then the config's `env-json` (which wins). `CLAUDE_CODE_MAX_RETRIES` defaults to 2 (the Anthropic SDKs'
own default; Claude Code's is 10, which keeps a failing request retrying for minutes).

The API key (`ANTHROPIC_API_KEY`, else `ANTHROPIC_AUTH_TOKEN`) is **not** put in that environment:
every command the model runs (Claude Code's Bash tool, hooks) inherits Claude Code's environment, so
`env` would show it. Instead the runner writes it to a file of its own (mode 0600, in a private
directory outside the workspace, removed when the run ends) and gives Claude Code a settings file
whose `apiKeyHelper` prints it (`--settings`); Claude Code sends the helper's output as `x-api-key`
and `Authorization: Bearer`. Verified against Claude Code 2.1.328 (`tests/real`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from agentrunner.harness import harness_env

PREFIXES = ("ANTHROPIC_", "CLAUDE_")
#: the credentials moved from the environment into the key helper, in order of preference
CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
DEFAULTS = {"CLAUDE_CODE_MAX_RETRIES": "2"}


def claude_env(
    config_env: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Claude Code's environment without the credentials, and the credentials taken out of it."""
    source = os.environ if environ is None else environ
    allow = [name for name in source if name.startswith(PREFIXES)]
    env = {**DEFAULTS, **harness_env(config_env, allow=allow, environ=source)}
    credentials = {name: env.pop(name) for name in CREDENTIALS if name in env}
    return env, {name: value for name, value in credentials.items() if value}


def api_key(credentials: Mapping[str, str]) -> str:
    """The key the helper prints: `ANTHROPIC_API_KEY`, else `ANTHROPIC_AUTH_TOKEN` ("" when neither)."""
    return next((credentials[name] for name in CREDENTIALS if credentials.get(name)), "")


class KeyHelper:
    """The API key in a private file and the `--settings` file whose `apiKeyHelper` prints it.

    `with KeyHelper(key) as helper: ... helper.settings` — both files and their directory are removed
    on exit.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.directory: Path | None = None
        self.settings = ""

    def __enter__(self) -> KeyHelper:
        self.directory = Path(tempfile.mkdtemp(prefix="agentrunner-claude-key-"))  # mode 0700
        key_file = self.directory / "key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(self.key)
        settings = self.directory / "settings.json"
        settings.write_text(
            json.dumps({"apiKeyHelper": f"cat {shlex.quote(str(key_file))}"}), encoding="utf-8"
        )
        settings.chmod(0o600)
        self.settings = str(settings)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
