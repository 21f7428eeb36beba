"""What a runtime reports about the harness CLIs of its machine (`HarnessCapability`): whether `claude` and
`codex` are on `PATH`, their versions, and whether they are logged in.

Each CLI is asked with its own commands, in the runtime's environment (where the user logged in):
`claude --version` and `claude auth status` (JSON: `loggedIn`, `authMethod`, `apiKeySource`),
`codex --version` and `codex login status` (exit 0 when credentials exist, "Not logged in" otherwise).
Only what identifies no one leaves the machine: presence, path, version, logged in or not and the kind
of login (`api_key`, `oauth`, the name of the variable holding a key). Account names, e-mail addresses
and the masked key `codex login status` prints are dropped here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence

from agentrunner.v1 import runtime_pb2

#: the CLIs a runtime looks for by default
DEFAULT_HARNESSES = ("claude", "codex")
#: how long one command of a CLI may take
COMMAND_TIMEOUT = 20.0
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")
_SAFE = re.compile(r"[^A-Za-z0-9_ .()-]")

LOGGED_IN = runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_IN
LOGGED_OUT = runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_OUT
UNKNOWN = runtime_pb2.HARNESS_LOGIN_STATUS_UNKNOWN


@dataclasses.dataclass(slots=True)
class _Output:
    code: int | None
    text: str


async def _run(argv: Sequence[str], limit: float, env: Mapping[str, str] | None) -> _Output:
    """Runs a command (stdin closed, stdout and stderr read together); code None when it did not end."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env) if env is not None else None,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return _Output(None, type(exc).__name__)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        return _Output(None, "timed out")
    return _Output(proc.returncode, out.decode(errors="replace"))


def _version(text: str) -> str:
    match = _VERSION.search(text)
    return match.group(0) if match else ""


def _safe(text: str, limit: int = 80) -> str:
    return _SAFE.sub("", text)[:limit]


def claude_login(output: _Output) -> tuple[runtime_pb2.HarnessLoginStatus.ValueType, str]:
    """`claude auth status` (JSON by default; exit 1 when logged out)."""
    start = output.text.find("{")
    try:
        status = json.loads(output.text[start:]) if start >= 0 else None
    except ValueError:
        status = None
    if not isinstance(status, dict) or not isinstance(status.get("loggedIn"), bool):
        return (
            UNKNOWN,
            f"`claude auth status` gave no status ({_safe(output.text.strip()[:40]) or 'no output'})",
        )
    method = _safe(str(status.get("authMethod") or ""))
    source = _safe(str(status.get("apiKeySource") or ""))
    if not status["loggedIn"]:
        return LOGGED_OUT, "not logged in (`claude auth login` or ANTHROPIC_API_KEY)"
    detail = f"logged in, auth method {method or 'unknown'}" + (f" from {source}" if source else "")
    return LOGGED_IN, detail


def codex_login(output: _Output) -> tuple[runtime_pb2.HarnessLoginStatus.ValueType, str]:
    """`codex login status`: exit 0 and "Logged in using ..." / "API key configured - sk-***" when
    credentials exist, exit 1 and "Not logged in" otherwise (the key's masked form is dropped)."""
    lines = [
        line.strip() for line in output.text.splitlines() if line.strip() and not line.startswith("WARNING")
    ]
    text = " ".join(lines)
    if "not logged in" in text.lower():
        return LOGGED_OUT, "not logged in (`codex login`)"
    if output.code == 0 and lines:
        first = next((line for line in lines if "log" in line.lower() or "key" in line.lower()), lines[0])
        return LOGGED_IN, _safe(first.split(" - ", 1)[0].split(":", 1)[0]) or "logged in"
    return UNKNOWN, f"`codex login status` exited {output.code}"


_STATUS_COMMANDS = {
    "claude": (("auth", "status", "--json"), claude_login),
    "codex": (("login", "status"), codex_login),
}


async def detect_harness(
    name: str, *, limit: float = COMMAND_TIMEOUT, env: Mapping[str, str] | None = None
) -> runtime_pb2.HarnessCapability:
    """One CLI's presence, version and login status (`env`: the environment to look in and run it with;
    default: this process's)."""
    path = shutil.which(name, path=(env if env is not None else os.environ).get("PATH"))
    capability = runtime_pb2.HarnessCapability(name=name, present=path is not None, path=path or "")
    if path is None:
        return capability
    version, status = await asyncio.gather(
        _run([path, "--version"], limit, env),
        _run([path, *_STATUS_COMMANDS[name][0]], limit, env) if name in _STATUS_COMMANDS else _noop(),
    )
    capability.version = _version(version.text) if version.code == 0 else ""
    if name in _STATUS_COMMANDS:
        login, detail = _STATUS_COMMANDS[name][1](status)
        if status.code is None:
            login, detail = UNKNOWN, f"the status command did not finish ({status.text})"
        capability.login_status, capability.login_detail = login, detail
    else:
        capability.login_status = UNKNOWN
    return capability


async def _noop() -> _Output:
    return _Output(0, "")


async def detect_harnesses(
    names: Sequence[str] = DEFAULT_HARNESSES,
    *,
    limit: float = COMMAND_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> list[runtime_pb2.HarnessCapability]:
    """`detect_harness` for each name, concurrently, in order."""
    return list(await asyncio.gather(*(detect_harness(n, limit=limit, env=env) for n in names)))
