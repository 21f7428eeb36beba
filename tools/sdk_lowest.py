#!/usr/bin/env python3
"""`make sdk-lowest`: the Python SDK's tests against the lowest versions its dependencies allow.

`make test` runs every test against uv.lock (the newest versions we tried). This runs the SDK's own
suites once more in a fresh virtualenv where each direct dependency of the SDK (every extra included)
is at the lowest version its specifier allows, as uv's `--resolution lowest-direct` picks them, on the
lowest Python the SDK supports. It first checks that each declared lower bound is exactly what that
resolution installs: a bound that cannot be installed (another dependency lifts it) is a bound nobody
tested, and the script says which to raise.

The SDK and the official runners (the reference runner drives several SDK tests) are installed from
wheels built by `uv build`, without their dependencies; the test tools at their locked versions.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
SDK = ROOT / "sdk_python" / "pyproject.toml"
#: the suites that exercise only the SDK (and the reference runner, an SDK user)
SUITES = [
    "tests/sdk",
    "tests/services",
    "tests/harness",
    "tests/contract/test_roundtrip.py",
    "tests/contract/test_fixtures.py",
    "tests/conformance/test_levels.py",
]
TEST_TOOLS = ["pytest", "pytest-asyncio", "pytest-timeout", "pytest-xdist", "psutil"]


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def uv() -> str:
    return os.environ.get("UV", "uv")


def run(*argv: str | pathlib.Path, cwd: pathlib.Path | None = None) -> None:
    subprocess.run([str(a) for a in argv], check=True, cwd=cwd)


def declared() -> tuple[str, dict[str, Requirement]]:
    """The SDK's lowest Python and its direct requirements (extras included), by normalized name."""
    project = tomllib.loads(SDK.read_text())["project"]
    python = re.sub(r"^>=\s*", "", project["requires-python"])
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    reqs = [Requirement(s) for s in specs]
    return python, {normalize(r.name): r for r in reqs}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, Version]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if match:
            found[normalize(match.group(1))] = Version(match.group(2))
    return found


def lower_bound(req: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def check_bounds(requirements: dict[str, Requirement], resolved: dict[str, Version]) -> list[str]:
    """Every declared lower bound is what the lowest resolution installs; every requirement has one."""
    problems = []
    for name, req in sorted(requirements.items()):
        bound, got = lower_bound(req), resolved.get(name)
        if bound is None:
            problems.append(f"{req}: no lower bound (add the lowest version the tests pass with)")
        elif got is None:
            problems.append(f"{req}: not in the lowest resolution")
        elif got != bound:
            problems.append(f"{req}: the lowest installable version is {got}; raise the bound to >={got}")
    return problems


def locked(names: list[str]) -> list[str]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {normalize(p["name"]): p["version"] for p in lock["package"]}
    return [f"{name}=={versions[normalize(name)]}" for name in names]


def main() -> int:
    started = time.monotonic()
    python, requirements = declared()
    with tempfile.TemporaryDirectory(prefix="sdk-lowest-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        step(f"lowest-direct resolution of the SDK with every extra, Python {python}")
        lowest = tmp / "lowest.txt"
        run(
            uv(),
            "pip",
            "compile",
            SDK,
            "--all-extras",
            "--resolution",
            "lowest-direct",
            "--python-version",
            python,
            "--quiet",
            "--no-header",
            "--no-annotate",
            "-o",
            lowest,
        )
        resolved = pins(lowest.read_text())
        problems = check_bounds(requirements, resolved)
        for name in sorted(requirements):
            print(f"  {name:<40} {resolved.get(name, '?')}")
        if problems:
            print("declared lower bounds that are not what the lowest resolution installs:", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return 1
        step("wheels of the SDK and the official runners (uv build)")
        dist = tmp / "dist"
        for package in ("langbot-agentrunner-sdk", "langbot-agentrunner-runners"):
            run(uv(), "build", "--package", package, "--wheel", "--quiet", "-o", dist, cwd=ROOT)
        step("a fresh virtualenv with them")
        venv = tmp / "venv"
        run(uv(), "venv", "--quiet", "--python", python, venv)
        env_python = venv / "bin" / "python"
        run(uv(), "pip", "install", "--quiet", "--python", env_python, "-r", lowest, *locked(TEST_TOOLS))
        run(
            uv(),
            "pip",
            "install",
            "--quiet",
            "--python",
            env_python,
            "--no-deps",
            *sorted(dist.glob("*.whl")),
        )
        step(f"the SDK's suites against the lowest versions: {' '.join(SUITES)}")
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        proc = subprocess.run(
            [
                str(env_python),
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "-n",
                "2",
                "--dist",
                "loadfile",
                *SUITES,
            ],
            cwd=ROOT,
            env=env,
        )
    print(
        f"\nsdk-lowest: {'passed' if proc.returncode == 0 else 'FAILED'} in {time.monotonic() - started:.0f}s"
    )
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
