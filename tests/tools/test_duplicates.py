"""`tools/duplicates.py`, the lint step that finds a block of code written twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "duplicates.py"

BLOCK = """\
    total = 0
    for item in items:
        total += item.size
    if total > limit:
        raise ValueError(
            f"too big: {total}"
        )
    return total
"""


def _check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *map(str, paths)], capture_output=True, text=True)


def test_a_block_written_in_two_modules_fails_lint_naming_both(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def size(items, limit):\n    '''One.'''\n" + BLOCK)
    (tmp_path / "b.py").write_text("import os\n\n\ndef weight(items, limit):  # another name\n" + BLOCK)
    done = _check(tmp_path)
    assert done.returncode == 1
    assert "the same code in 2 places: " in done.stdout
    assert "a.py:3-10" in done.stdout and "b.py:5-12" in done.stdout
    assert done.stdout.count("\n") == 1  # the overlapping windows of one pair are one finding


def test_a_block_that_differs_in_a_name_passes(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def size(items, limit):\n" + BLOCK)
    (tmp_path / "b.py").write_text("def size(items, limit):\n" + BLOCK.replace("item.size", "item.weight"))
    assert _check(tmp_path).returncode == 0


def test_short_repeats_and_imports_pass(tmp_path: Path) -> None:
    short = "    a = 1\n    b = 2\n    c = 3\n    return a + b + c\n"  # 4 statements on 4 lines
    imports = "".join(f"import mod{i}\n" for i in range(10))
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(imports + "\n\ndef f():\n" + short)
    assert _check(tmp_path).returncode == 0
