"""The README's runner, serve command and test actually work as written."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentrunner.testing import HostDouble

README = Path(__file__).resolve().parents[2] / "sdk_python" / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def write_python_blocks(directory: Path) -> dict[str, Path]:
    files = {}
    for block in blocks("python"):
        name = block.splitlines()[0].removeprefix("# ").strip()
        assert name.endswith(".py"), f"README python blocks start with '# <file>.py': {name!r}"
        files[name] = directory / name
        files[name].write_text(block, encoding="utf-8")
    return files


def test_readme_test_passes_under_pytest(tmp_path: Path) -> None:
    files = write_python_blocks(tmp_path)
    assert set(files) == {"echo_runner.py", "test_echo_runner.py"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_echo_runner.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


@pytest.mark.asyncio
async def test_readme_serve_command_serves_the_runner(tmp_path: Path) -> None:
    write_python_blocks(tmp_path)
    (command,) = [line for b in blocks("bash") for line in b.splitlines() if "agentrunner serve" in line]
    argv = shlex.split(command)
    assert argv[:4] == ["python", "-m", "agentrunner", "serve"]
    argv[argv.index("--port") + 1] = "0"  # never a fixed port in tests
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv[1:],
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line.startswith("AGENTRUNNER_LISTENING 127.0.0.1:")
        async with HostDouble() as host:
            out = await host.run(line.split()[1], "hi there", runner_id="plugin:acme/echo/default")
            assert out.text == "echo: hi there"
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
