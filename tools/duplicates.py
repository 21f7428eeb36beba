"""Fails when a block of code is written twice in production code (`make lint`, and so CI).

    uv run python tools/duplicates.py [PATH ...]

A block is `STATEMENTS` consecutive statements of one body (a function's, a loop's, a branch's...)
spanning at least `MIN_LINES` lines; two blocks are the same when their syntax trees are (so
formatting, comments and docstrings do not matter, names and literals do). A block written twice is
one that a fix must find twice: it belongs in one function both places call. A block with an import is not one
(two modules may well need the same names).

At 4 statements over 8 lines the tree has no such pair (a pair at 3 statements is usually one
`try`/`except` or one guard clause, which say less than the function that would replace them).

Checked: `ROOTS` (or the paths given), every `.py` file below them except `EXCLUDED`: database
migrations (each keeps the schema as it was) and the generated contract. Tests are not checked:
a test spells out its setup so it reads on its own.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATEMENTS = 4
MIN_LINES = 8
ROOTS = ("host/src", "sdk_python/src", "runners/src")
#: path fragments (with `/` on both sides) of files not checked
EXCLUDED = ("/store/migrations/", "/sdk_python/src/agentrunner/v1/")

Location = tuple[Path, int, int]


def blocks(tree: ast.AST) -> Iterator[tuple[str, int, int]]:
    """`(shape, first line, last line)` of every block of `STATEMENTS` statements in `tree`."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            for i in range(len(body) - STATEMENTS + 1):
                block = body[i : i + STATEMENTS]
                first, last = block[0].lineno, block[-1].end_lineno or block[-1].lineno
                if last - first + 1 < MIN_LINES:
                    continue
                if any(isinstance(s, ast.Import | ast.ImportFrom) for s in block):
                    continue
                yield ast.dump(ast.Module(body=block, type_ignores=[])), first, last


def files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if not any(part in file.resolve().as_posix() for part in EXCLUDED):
                yield file


def duplicates(paths: list[Path]) -> list[list[Location]]:
    """The places of every block found more than once (overlapping windows of one pair merged)."""
    seen: dict[str, list[Location]] = defaultdict(list)
    for file in files(paths):
        for shape, first, last in blocks(ast.parse(file.read_text(encoding="utf-8"))):
            seen[shape].append((file, first, last))
    groups = [places for places in seen.values() if len(places) > 1]
    merged: list[list[Location]] = []
    for places in sorted(groups, key=lambda g: [(str(f), a) for f, a, _ in g]):
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and len(previous) == len(places)
            and all(f == g and a <= b2 + 1 for (f, a, _), (g, _, b2) in zip(places, previous, strict=True))
        ):
            merged[-1] = [
                (f, a0, max(b0, b)) for (f, a0, b0), (_, _, b) in zip(previous, places, strict=True)
            ]
        else:
            merged.append(places)
    return merged


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or [ROOT / r for r in ROOTS]
    found = duplicates(paths)
    for places in found:
        shown = [f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}:{a}-{b}" for f, a, b in places]
        print(f"the same code in {len(places)} places: {', '.join(shown)}: make it one function")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
