#!/usr/bin/env python3
"""`make release-check`: build every release artifact, install each the way its users do, in a clean
directory outside the checkout, and check what they get.

1. Artifacts (`release_artifacts.py`): the SDK's and the host's wheels and sdists (`uv build`), the npm
   tarball (`npm pack`), the Go module zip in a GOPROXY directory; each one's contents checked.
2. Each kit's README, as written: the blocks marked `<!-- steps: ... -->` (setup, the runner saved to its
   file, the conformance check, the test) run in order by bash in an empty temporary directory. The
   environment only says where the artifacts are, as a registry would: `PIP_FIND_LINKS` (pip finds
   the SDK's wheel, its dependencies come from PyPI; `PIP_CONSTRAINT` holds it to this version),
   `GOPROXY` (the module directory first, then the module cache's own download directory and the Go
   module proxy; a fresh GOMODCACHE), an npm user config pointing the `@langbot` scope at
   `NpmRegistry`. No variable, path or file of the workspace
   is visible to them (PATH loses the workspace's .venv, VIRTUAL_ENV and PYTHONPATH are dropped).
3. The host from its wheel: `uvx --from <wheel> agentrunner-host --version` (core only: a config that
   needs the console is refused, naming the extra), then a fresh virtualenv with every extra:
   `config init`, `db upgrade` and `serve` of examples/host.yaml; then a host on a config that routes an
   agent to each README's runner (one `agentrunner-host run` each, the echo checked), serves the console
   (its page and a static file fetched) and registers the host conformance kit's runner
   (`agentrunner-conformance host`, from the SDK wheel, passes).

Exit status 1 on the first failing step (its log under .gen/release/); timings printed at the end.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import release_artifacts as artifacts
from release_common import OUT, ROOT, VERSION, Failed, free_port, run_logged, timed, timings

#: kit -> README, its runner's port in the README, how to start the runner it built (in echo-runner/)
KITS = {
    "python": (
        ROOT / "sdk_python" / "README.md",
        "50061",
        [".venv/bin/python", "-m", "agentrunner", "serve", "echo_runner:EchoRunner", "--port", "0"],
    ),
    "go": (ROOT / "sdk_go" / "README.md", "50071", ["./echo-runner", "-port", "0"]),
    "ts": (ROOT / "sdk_ts" / "README.md", "50072", ["node", "runner.js", "--port", "0"]),
}
STEP = re.compile(r"<!-- steps: (\w+)(?: (\S+))? -->\n```\w*\n(.*?)```", re.S)


def readme_script(readme: pathlib.Path, port: str) -> str:
    """The README's marked blocks as one bash script, in document order, the runner on a free port."""
    parts = ["set -euo pipefail"]
    for kind, arg, body in STEP.findall(readme.read_text()):
        if kind == "save":
            parts.append(f"cat > {arg} <<'README_BLOCK_EOF'\n{body}README_BLOCK_EOF")
        else:
            parts.append(body.replace(port, str(free_port())))
    if len(parts) < 4:
        raise Failed(f"{readme}: expected setup, save and check steps, found {len(parts) - 1}")
    return "\n".join(parts) + "\n"


def clean_env(tmp: pathlib.Path, extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without the workspace: no venv, no PYTHONPATH, no PATH entry inside it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT")
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(ROOT))]
    env["PATH"] = os.pathsep.join(path)
    env.pop("GOFLAGS", None)  # (the workspace's flags are not the author's)
    return {
        **env,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        **extra,
    }


def check_kit(kit: str, tmp: pathlib.Path, env: dict[str, str]) -> None:
    readme, port, _ = KITS[kit]
    work = tmp / kit
    work.mkdir()
    (work / "steps.sh").write_text(readme_script(readme, port))
    out = run_logged(["bash", "steps.sh"], cwd=work, env=env, log=OUT / f"{kit}-readme.log", timeout=900)
    verdicts = re.findall(r"\(((?:NOT )?conformant[^)]*)\)", out)
    if not verdicts or any(v.startswith("NOT") for v in verdicts):
        raise Failed(f"{kit}: the README's conformance run did not pass: {verdicts}")
    if kit == "python" and not re.search(r"\b1 passed\b", out):
        raise Failed("python: the README's test did not pass (log: .gen/release/python-readme.log)")
    print(f"  {readme.relative_to(ROOT)}: steps pass, conformance verdict {verdicts[-1]!r}")


def check_cjs(tmp: pathlib.Path, env: dict[str, str]) -> None:
    """ESM only, and `require()` from CommonJS works on this Node.js (README's stated choice)."""
    code = "const k = require('@langbot/agentrunner'); if (typeof k.defineRunner !== 'function' || k.VERSION !== process.argv[1]) process.exit(1); console.log('require ok', k.VERSION)"
    out = run_logged(
        ["node", "-e", code, VERSION],
        cwd=tmp / "ts" / "echo-runner",
        env=env,
        log=OUT / "ts-require.log",
        timeout=60,
    )
    print(f"  CommonJS: {out.strip().splitlines()[-1]}")


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    dist = OUT / "dist"
    dist.mkdir(parents=True)
    problems: list[str] = []
    with timed("build: uv build (SDK, host), npm pack (sdk_ts), the Go module zip"):
        py = artifacts.build_python(dist)
        problems += artifacts.check_sdk(py["sdk-wheel"], py["sdk-sdist"], VERSION)
        problems += artifacts.check_host(py["host-wheel"], VERSION)
        tarball, npm_problems = artifacts.build_npm(dist)
        _, go_files = artifacts.go_proxy(dist / "goproxy", VERSION)
        problems += npm_problems + artifacts.check_go(go_files)
        for path in sorted(dist.rglob("*.*")):
            if path.is_file() and "goproxy" not in path.parts and not path.name.startswith("."):
                print(f"  {path.relative_to(ROOT)}  {path.stat().st_size // 1024} KiB")
        print(f"  {artifacts.GO_MODULE}@v{VERSION}  ({len(go_files)} files; tag sdk_go/v{VERSION})")
    if problems:
        print("the artifacts are not what a release ships:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    from release_host import check_host_install  # (after the build: it imports nothing heavy)

    with (
        tempfile.TemporaryDirectory(prefix="release-check-") as tmp_name,
        artifacts.NpmRegistry(tarball).serving() as npm,
    ):
        tmp = pathlib.Path(tmp_name)
        npmrc = tmp / "npmrc"
        npmrc.write_text(f"@langbot:registry={npm}\n")
        pins = tmp / "constraints.txt"  # (pip takes the built SDK even if PyPI has a newer one)
        pins.write_text(f"langbot-agentrunner-sdk=={VERSION}\n")
        gomodcache = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        ).stdout.strip()
        env = clean_env(
            tmp,
            {
                "PIP_FIND_LINKS": str(dist),
                "PIP_CONSTRAINT": str(pins),
                "NPM_CONFIG_USERCONFIG": str(npmrc),
                "GOPROXY": f"file://{dist / 'goproxy'},file://{gomodcache}/cache/download,https://proxy.golang.org",
                "GOMODCACHE": str(tmp / "gomodcache"),
                "GOFLAGS": "-modcacherw",
                "GOSUMDB": "off",  # (the module is ours, built a minute ago; the others were verified into the cache)
                "GOTOOLCHAIN": "local",
            },
        )
        try:
            for kit in KITS:
                with timed(f"{kit} kit: its README's steps in an empty directory"):
                    check_kit(kit, tmp, env)
            check_cjs(tmp, env)
            with timed("host: from its wheel, every README runner and the host conformance kit against it"):
                check_host_install(
                    py, tmp, env, {k: (tmp / k / "echo-runner", v[2]) for k, v in KITS.items()}
                )
        except Failed as exc:
            print(f"\nrelease-check FAILED: {exc}", file=sys.stderr)
            return 1
    print("\n==> release-check passed")
    for name, seconds in timings:
        print(f"  {seconds:6.1f}s  {name}")
    print(f"  {sum(s for _, s in timings):6.1f}s  in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
