"""`make release-check`, the host part: the host installed from its wheel outside the checkout, and every
kit README's runner (as the README built it) run through it. See tools/release_check.py."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

from release_artifacts import uv
from release_common import OUT, VERSION, Failed, free_port, run_logged, serving

#: the host's config for the check: an agent per README runner, the conformance kit's two, the console
CHECK_CONFIG = """\
instance_id: release-check
listen: {{address: "127.0.0.1:{port}"}}
database: {{url: "sqlite+aiosqlite:///{dir}/check.db", artifact_dir: "{dir}/artifacts"}}
registry: {{retry_interval_seconds: 0.5}}
console: {{address: "127.0.0.1:{console}"}}
runners:
{endpoints}
  - {{id: conformance-kit, address: "127.0.0.1:{kit}"}}
agents:
{agents}
  - {{id: conformance, runner_id: "plugin:conformance/kit/default", timeout_seconds: 30}}
  - {{id: conformance-deadline, runner_id: "plugin:conformance/kit/default", timeout_seconds: 3}}
bindings:
  - {{id: conformance, event: message.received, target: {{agent: conformance}}}}
"""
#: the runner id each README's runner declares
RUNNER_IDS = {
    "python": "plugin:acme/echo/default",
    "go": "plugin:example/echo-go/default",
    "ts": "plugin:example/echo-ts/default",
}
TEXT = "hello from the release check"


def _uvx_core(py: dict[str, pathlib.Path], tmp: pathlib.Path, env: dict[str, str]) -> None:
    """`uvx --from <wheel>` (no extras): --version, and a config that needs the console is refused."""
    uvx = [uv(), "tool", "run", "--isolated", "--from", str(py["host-wheel"]), "--with", str(py["sdk-wheel"])]
    out = run_logged(
        [*uvx, "agentrunner-host", "--version"], cwd=tmp, env=env, log=OUT / "host-uvx.log", timeout=300
    )
    if f"agentrunner-host {VERSION} " not in out:
        raise Failed(f"uvx --from {py['host-wheel'].name} agentrunner-host --version printed {out.strip()!r}")
    print(f"  uvx --from {py['host-wheel'].name} agentrunner-host --version: {out.strip().splitlines()[-1]}")
    config = tmp / "console.yaml"
    config.write_text(
        f'database: {{url: "sqlite+aiosqlite:///{tmp}/c.db"}}\nconsole: {{address: "127.0.0.1:0"}}\n'
    )
    proc = subprocess.run(
        [*uvx, "agentrunner-host", "serve", "--config", str(config)],
        cwd=tmp,
        env={**env, "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 3 or "pip install 'langbot-agentrunner-host[console]'" not in proc.stderr:
        raise Failed(
            f"without the console extra, serve with console.address: exit {proc.returncode}, {proc.stderr.strip()!r}"
        )
    print(f"  without the console extra: {proc.stderr.strip()}")


def _venv(py: dict[str, pathlib.Path], tmp: pathlib.Path, env: dict[str, str]) -> pathlib.Path:
    venv = tmp / "host-venv"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    run_logged(
        [uv(), "venv", "--quiet", "--python", python, str(venv)],
        cwd=tmp,
        env=env,
        log=OUT / "host-venv.log",
        timeout=300,
    )
    wheel = f"langbot-agentrunner-host[postgres,otlp,console,harness] @ {py['host-wheel'].as_uri()}"
    run_logged(
        [
            uv(),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            wheel,
            str(py["sdk-wheel"]),
        ],
        cwd=tmp,
        env=env,
        log=OUT / "host-install.log",
        timeout=600,
    )
    return venv / "bin"


@contextlib.contextmanager
def _runners(
    runners: dict[str, tuple[pathlib.Path, list[str]]], env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """Each README's runner, as its README built it, served on a free port."""
    with contextlib.ExitStack() as stack:
        addresses = {
            kit: stack.enter_context(
                serving(
                    argv, cwd=where, env=env, log=OUT / f"{kit}-runner.log", ready="AGENTRUNNER_LISTENING"
                )
            )
            for kit, (where, argv) in runners.items()
        }
        yield addresses


def _examples(bin_dir: pathlib.Path, tmp: pathlib.Path, env: dict[str, str]) -> None:
    """`config init`, `db upgrade`, `serve` of the bundled examples/host.yaml, from an empty directory."""
    home = tmp / "host-home"
    home.mkdir()
    host = str(bin_dir / "agentrunner-host")
    run_logged([host, "config", "init"], cwd=home, env=env, log=OUT / "host-init.log", timeout=120)
    run_logged(
        [host, "db", "upgrade", "--config", "examples/host.yaml"],
        cwd=home,
        env=env,
        log=OUT / "host-upgrade.log",
        timeout=300,
    )
    argv = [host, "serve", "--config", "examples/host.yaml", "--address", f"127.0.0.1:{free_port()}"]
    with serving(
        argv, cwd=home, env=env, log=OUT / "host-examples.log", ready="AGENTRUNNER_HOST_LISTENING"
    ) as at:
        print(f"  agentrunner-host serve --config examples/host.yaml: listening on {at}")


def check_host_install(
    py: dict[str, pathlib.Path],
    tmp: pathlib.Path,
    env: dict[str, str],
    runners: dict[str, tuple[pathlib.Path, list[str]]],
) -> None:
    _uvx_core(py, tmp, env)
    bin_dir = _venv(py, tmp, env)
    _examples(bin_dir, tmp, env)
    host = str(bin_dir / "agentrunner-host")
    work = tmp / "host-check"
    work.mkdir()
    with _runners(runners, env) as addresses:
        port, console, kit = free_port(), free_port(), free_port()
        endpoints = "\n".join(f'  - {{id: {k}, address: "{a}"}}' for k, a in addresses.items())
        agents = "\n".join(
            f'  - {{id: echo-{k}, runner_id: "{RUNNER_IDS[k]}", timeout_seconds: 30}}' for k in addresses
        )
        config = work / "check.yaml"
        config.write_text(
            CHECK_CONFIG.format(
                port=port, dir=work, console=console, kit=kit, endpoints=endpoints, agents=agents
            )
        )
        run_logged(
            [host, "db", "upgrade", "--config", str(config)],
            cwd=work,
            env=env,
            log=OUT / "host-check-upgrade.log",
            timeout=300,
        )
        with serving(
            [host, "serve", "--config", str(config)],
            cwd=work,
            env=env,
            log=OUT / "host-check.log",
            ready="AGENTRUNNER_HOST_LISTENING",
        ) as at:
            for k in addresses:
                out = run_logged(
                    [host, "run", "--host", at, "--agent", f"echo-{k}", TEXT],
                    cwd=work,
                    env=env,
                    log=OUT / f"host-run-{k}.log",
                    timeout=120,
                )
                if f"echo: {TEXT}" not in out:
                    raise Failed(f"agentrunner-host run --agent echo-{k}: no echo in {out[-500:]!r}")
                print(f"  {k} README runner through the host: 'echo: {TEXT}'")
            _console(console)
            conformance = str(tmp / "python" / "echo-runner" / ".venv" / "bin" / "agentrunner-conformance")
            argv = [
                conformance,
                "host",
                "--target",
                at,
                "--runner-listen",
                f"127.0.0.1:{kit}",
                "--deadline-agent",
                "conformance-deadline",
            ]
            out = run_logged(
                argv, cwd=work, env={**env, "COLUMNS": "150"}, log=OUT / "host-conformance.log", timeout=300
            )
            print(f"  agentrunner-conformance host: {out.strip().splitlines()[-1]}")


def _console(port: int) -> None:
    """The console's page and one of its static files, served from the wheel's files."""
    for path, marker in (("/", "<html"), ("/static/app.js", "function")):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            body = answer.read().decode()
        if answer.status != 200 or marker not in body:
            raise Failed(f"the console's {path}: HTTP {answer.status}, {len(body)} bytes without {marker!r}")
    print(f"  console on 127.0.0.1:{port}: / and /static/app.js served")
