"""One version number for the contract and the three kits, stated in VERSION; every copy agrees.

`tools/versions.py` lists the copies (pyproject.toml files, `__version__`, the Go constant,
package.json and its lock, the Go README's `go get`, the changelog's newest section).
"""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess
import sys
from types import ModuleType

import agentrunner
import agentrunner_host

ROOT = pathlib.Path(__file__).resolve().parents[2]


def versions() -> ModuleType:
    spec = importlib.util.spec_from_file_location("versions", ROOT / "tools" / "versions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["versions"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def test_every_place_states_the_version_of_VERSION() -> None:
    assert versions().check() == []


def test_the_packages_report_it_at_run_time() -> None:
    want = (ROOT / "VERSION").read_text().strip()
    assert agentrunner.__version__ == want
    assert agentrunner_host.__version__ == want
    out = subprocess.run(
        [sys.executable, "-m", "agentrunner_host", "--version"], capture_output=True, text=True, check=True
    )
    assert f"agentrunner-host {want} " in out.stdout


def _copy(tmp: pathlib.Path) -> pathlib.Path:
    v = versions()
    for path in {"VERSION", *(p.path for p in v.PLACES)}:
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp / path)
    return tmp


def test_a_copy_that_drifts_is_named(tmp_path: pathlib.Path) -> None:
    root = _copy(tmp_path)
    go = root / "sdk_go" / "agentrunner" / "version.go"
    go.write_text(go.read_text().replace('const Version = "', 'const Version = "9'))
    problems = versions().check(root)
    assert len(problems) == 1 and problems[0].startswith("sdk_go/agentrunner/version.go: states 9")


def test_set_rewrites_every_copy_but_asks_for_a_changelog_section(tmp_path: pathlib.Path) -> None:
    root = _copy(tmp_path)
    v = versions()
    v.set_version("7.8.9", root)
    assert (root / "VERSION").read_text() == "7.8.9\n"
    problems = v.check(root)
    assert problems == [f"CHANGELOG.md: states {v.version()}, VERSION is 7.8.9"]
