"""What a runtime reports about the harness CLIs of its machine, with the real `claude` and `codex` from
npm (`.ci/install-real-tools`): presence, path and version from their own `--version`, login status from
their own status commands (`claude auth status`, `codex login status`), in a private HOME. Nothing of a
key reaches the report: only whether one exists and where it came from."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agentrunner.detect import detect_harnesses
from agentrunner.v1 import runtime_pb2
from tests.real.tools import pinned_versions, real_tool

pytestmark = pytest.mark.asyncio(loop_scope="function")

SECRET = "sk-runtime-detect-test-0123456789"


def environment(home: Path, *tools: Path) -> dict[str, str]:
    node = Path(shutil.which("node") or "/usr/bin/node").parent
    path = os.pathsep.join(
        [*(str(t / "node_modules" / ".bin") for t in tools), str(node), "/usr/bin", "/bin"]
    )
    return {
        "PATH": path,
        "HOME": str(home),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


async def test_presence_version_and_logged_out_status_of_both_clis(tmp_path: Path) -> None:
    claude, codex = real_tool("claude"), real_tool("codex")
    versions = pinned_versions()
    found = await detect_harnesses(["claude", "codex", "gemini"], env=environment(tmp_path, claude, codex))
    by_name = {c.name: c for c in found}
    assert by_name["claude"].present and by_name["claude"].version == versions["CLAUDE_CODE_VERSION"]
    assert by_name["codex"].present and by_name["codex"].version == versions["CODEX_VERSION"]
    assert by_name["claude"].path.endswith("/claude") and by_name["codex"].path.endswith("/codex")
    for name in ("claude", "codex"):
        assert by_name[name].login_status == runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_OUT, by_name[name]
    assert not by_name["gemini"].present and by_name["gemini"].login_status == 0


async def test_logged_in_status_without_any_of_the_key(tmp_path: Path) -> None:
    claude, codex = real_tool("claude"), real_tool("codex")
    env = environment(tmp_path, claude, codex)
    import asyncio

    login = await asyncio.create_subprocess_exec(
        str(codex / "node_modules" / ".bin" / "codex"),
        "login",
        "--with-api-key",
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await login.communicate(SECRET.encode())
    assert login.returncode == 0
    found = await detect_harnesses(["claude", "codex"], env={**env, "ANTHROPIC_API_KEY": SECRET})
    by_name = {c.name: c for c in found}
    assert by_name["claude"].login_status == runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_IN
    assert by_name["claude"].login_detail == "logged in, auth method api_key from ANTHROPIC_API_KEY"
    assert by_name["codex"].login_status == runtime_pb2.HARNESS_LOGIN_STATUS_LOGGED_IN
    assert by_name["codex"].login_detail == "API key configured"
    report = b"".join(c.SerializeToString() for c in found)
    for piece in (SECRET, SECRET[-5:], SECRET[:8]):  # codex prints the key's first and last characters
        assert piece.encode() not in report
