"""`buf breaking` against the released baseline catches breaking edits and lets additive ones through."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASELINE = ROOT / "proto" / "baseline" / "agentrunner-v1.0.0.binpb"
BUF = shutil.which("buf", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("buf")

pytestmark = pytest.mark.skipif(BUF is None, reason="buf (PyPI buf-bin) is not installed")


def _workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    work = tmp_path / "ws"
    shutil.copytree(ROOT / "proto", work / "proto", ignore=shutil.ignore_patterns("baseline"))
    shutil.copy(ROOT / "buf.yaml", work / "buf.yaml")
    return work


def _breaking(work: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUF), "breaking", "--against", str(BASELINE)],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _edit(work: pathlib.Path, name: str, old: str, new: str) -> None:
    path = work / "proto" / "agentrunner" / "v1" / name
    text = path.read_text()
    assert old in text, f"edit anchor missing in {name}: {old!r}"
    path.write_text(text.replace(old, new, 1))


def test_current_contract_is_compatible_with_the_baseline(tmp_path: pathlib.Path) -> None:
    proc = _breaking(_workspace(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_changed_field_type_is_caught(tmp_path: pathlib.Path) -> None:
    work = _workspace(tmp_path)
    _edit(work, "result.proto", "  uint64 sequence = 2;", "  string sequence = 2;")
    proc = _breaking(work)
    assert proc.returncode == 100, proc.stdout + proc.stderr
    assert re.search(r'Field "2" with name "sequence" on message "RunResult" changed type', proc.stdout)


def test_removed_field_is_caught(tmp_path: pathlib.Path) -> None:
    work = _workspace(tmp_path)
    _edit(work, "result.proto", "  string approval_hint = 5;\n", "")
    proc = _breaking(work)
    assert proc.returncode == 100, proc.stdout + proc.stderr
    assert (
        'Previously present field "5" with name "approval_hint" on message "ActionRequested"' in proc.stdout
    )


def test_additive_field_passes(tmp_path: pathlib.Path) -> None:
    work = _workspace(tmp_path)
    _edit(
        work,
        "result.proto",
        "  string approval_hint = 5;\n",
        "  string approval_hint = 5;\n  // A new optional field.\n  string reviewer = 6;\n",
    )
    proc = _breaking(work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
