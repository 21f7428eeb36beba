"""Fails on any Python function longer than `LIMIT` lines (`make lint`, and so CI).

    uv run python tools/function_length.py [PATH ...]

A function's length is the lines from its `def` to its last line: what a reader scrolls through,
docstring, comments and blank lines included (a nested function counts within its parent and again on
its own). The team's standard is stated in lines (functions under ~80 lines), and ruff has no rule
for lines: `PLR0915` counts statements, so a function of 80 statements is usually twice
as long on screen, and one long literal (a config dict, a scripted conversation) is one statement.

Checked: `ROOTS` (or the paths given), every `.py` file below them, except `EXCLUDED`: database
migrations (a migration is one function by nature: it lists the schema as it was, and is never edited
after it shipped) and the generated contract.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 80
ROOTS = ("host/src", "sdk_python/src", "runners/src", "tests", "bench", "tools")
#: path fragments (with `/` on both sides) of files the limit does not apply to
EXCLUDED = ("/store/migrations/", "/sdk_python/src/agentrunner/v1/")


def too_long(source: str, limit: int = LIMIT) -> Iterator[tuple[int, str, int]]:
    """`(line, name, length)` of every function in `source` longer than `limit` lines."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                yield node.lineno, node.name, length


def files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if not any(part in file.resolve().as_posix() for part in EXCLUDED):
                yield file


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or [ROOT / r for r in ROOTS]
    found = 0
    for file in files(paths):
        for line, name, length in too_long(file.read_text(encoding="utf-8")):
            found += 1
            shown = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
            print(f"{shown}:{line}: {name} is {length} lines (at most {LIMIT}): split it")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
