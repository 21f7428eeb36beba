"""Each kit's README starts a runner author from the published package, not from this checkout.

`make release-check` (tools/release_check.py, in CI) runs the README's marked blocks verbatim in an
empty directory against the artifacts built from this repository, served as the registries would
serve them. This test is its cheap half, run with every `pytest`: the blocks parse into that script,
they install the kit by its published name at the release's version, and nothing in them reaches into
a clone (no `$AGENTRUNNER_REPO`, no `uv run` inside the workspace, no relative path out of the
directory the README creates).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _release_check() -> ModuleType:
    """tools/release_check.py (a script, not a package: it finds its siblings through sys.path)."""
    sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("release_check", ROOT / "tools" / "release_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release_check = _release_check()

VERSION = (ROOT / "VERSION").read_text().strip()
#: kit -> what its setup step must install, as an author types it
INSTALLS = {
    "python": "pip install langbot-agentrunner-sdk",
    "go": f"go get github.com/langbot-app/langbot-agentrunner/sdk_go@v{VERSION}",
    "ts": "npm install @langbot/agentrunner",
}


@pytest.mark.parametrize("kit", sorted(release_check.KITS))
def test_a_kit_readme_installs_the_published_package_and_nothing_from_the_checkout(kit: str) -> None:
    readme, port, _ = release_check.KITS[kit]
    script = release_check.readme_script(readme, port)
    steps = [kind for kind, _, _ in release_check.STEP.findall(readme.read_text())]
    assert steps[0] == "setup" and "save" in steps and "check" in steps, steps
    assert INSTALLS[kit] in script
    assert "agentrunner-conformance runner --target 127.0.0.1:" in script
    assert port not in script, "the README's port is replaced by a free one"
    for clone in ("AGENTRUNNER_REPO", "uv run", "uvx", "../", "--replace", "sdk_python/", "sdk_ts/"):
        assert clone not in script, f"{readme.name} reaches into the checkout: {clone!r}"


@pytest.mark.parametrize("kit", sorted(release_check.KITS))
def test_the_readme_runner_stays_short(kit: str) -> None:
    readme, _, _ = release_check.KITS[kit]
    (code,) = [body for kind, _, body in release_check.STEP.findall(readme.read_text()) if kind == "save"][:1]
    assert len(code.splitlines()) <= 40, "the README's runner is meant to stay short"
