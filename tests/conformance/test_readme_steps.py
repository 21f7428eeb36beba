"""A runner author follows sdk_go/README.md (or sdk_ts/README.md) from an empty directory to a passing
conformance run.

The test runs the README's own blocks: the `steps: setup` shell block, the runner's code block saved
as the file the README names, and the `steps: check` shell block (with a free port instead of the
README's), in a fresh directory with the clone at `$AGENTRUNNER_REPO`. Go modules come from the Go
module proxy, npm packages from the npm registry and the kit's Python packages from PyPI, as they
would for the author.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: README, code block language, the file the README saves it as, the README's port, the tool it needs.
READMES = [
    pytest.param(ROOT / "sdk_go" / "README.md", "go", "main.go", "50071", "go", id="go"),
    pytest.param(ROOT / "sdk_ts" / "README.md", "ts", "runner.ts", "50072", "npm", id="ts"),
]


def block(text: str, marker: str | None, lang: str, readme: pathlib.Path) -> str:
    """The first fenced block of `lang`, after the `<!-- steps: marker -->` comment when given."""
    if marker is not None:
        text = text.split(f"<!-- steps: {marker} -->", 1)[1]
    match = re.search(rf"```{lang}\n(.*?)```", text, re.S)
    assert match, f"no {lang} block after {marker!r} in {readme}"
    return match.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("readme", "lang", "filename", "port", "tool"), READMES)
def test_a_readme_reaches_a_passing_conformance_run(
    tmp_path: pathlib.Path, readme: pathlib.Path, lang: str, filename: str, port: str, tool: str
) -> None:
    if shutil.which(tool) is None or shutil.which("uvx") is None:
        pytest.skip(f"needs {tool} and uvx on PATH")
    text = readme.read_text()
    setup = block(text, "setup", "sh", readme).replace("/path/to/your/clone", str(ROOT))
    check = block(text, "check", "sh", readme).replace(port, str(free_port()))
    code = block(text, None, lang, readme)
    assert len(code.splitlines()) <= 40, "the README's runner is meant to stay short"
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    env.pop("VIRTUAL_ENV", None)
    script = f"set -euo pipefail\n{setup}\ncat > {filename} <<'CODE_EOF'\n{code}CODE_EOF\n{check}"
    log = tmp_path / "steps.log"
    with log.open("w") as sink:
        # Output goes to a file: the runner the README backgrounds would keep a pipe open.
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=840)
        finally:
            # A failed step leaves the backgrounded runner running: end the whole group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text()
    assert proc.returncode == 0, out[-4000:]
    assert "conformant" in out and "NOT conformant" not in out, out[-4000:]
    assert re.search(r"\d+ passed, 0 failed", out), out[-4000:]
    assert (tmp_path / "echo-runner" / filename).is_file()
