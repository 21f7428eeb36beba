"""`tools/function_length.py`, the lint step that keeps functions at most 80 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "function_length.py"


def _function(name: str, lines: int) -> str:
    """A function of exactly `lines` lines (its `def` line included)."""
    return f"def {name}() -> None:\n" + "    pass\n" * (lines - 1)


def _check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *map(str, paths)], capture_output=True, text=True)


def test_a_function_over_80_lines_fails_lint_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        _function("short", 80) + "\n\nclass C:\n    async " + _function("long", 81).replace("\n", "\n    ")
    )
    done = _check(source)
    assert done.returncode == 1
    assert "mod.py:84: long is 81 lines (at most 80)" in done.stdout
    assert "short" not in done.stdout


def test_80_lines_pass(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(_function("fits", 80))
    assert _check(source).returncode == 0


def test_migrations_are_exempt(tmp_path: Path) -> None:
    migration = tmp_path / "store" / "migrations" / "versions" / "0001_initial.py"
    migration.parent.mkdir(parents=True)
    migration.write_text(_function("upgrade", 200))
    assert _check(tmp_path).returncode == 0
