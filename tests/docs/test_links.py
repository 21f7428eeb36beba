"""The docs are self-contained: every Markdown link points to a file of this repository.

A clone is all a reader has, so a link to another checkout (`../shared/...`) or to the web is a dead
end; rules are stated in the project's own words instead.
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
SKIP = {
    ".git",
    ".venv",
    ".gen",
    "node_modules",
    "dist",
    "third_party",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".tools",  # installed third-party tools (the real Langflow's virtualenv: thousands of files)
}


def _markdown(root: pathlib.Path) -> list[pathlib.Path]:
    """The Markdown files under `root`, not descending into `SKIP` directories at all."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIP]
        found += [pathlib.Path(directory, f) for f in files if f.endswith(".md")]
    return sorted(found)


DOCS = _markdown(ROOT)


def test_the_docs_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/protocol.md", "sdk_go/README.md", "sdk_ts/README.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_stay_inside_the_repository(doc: pathlib.Path) -> None:
    problems = []
    for target in LINK.findall(doc.read_text()):
        path = target.split("#", 1)[0]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            problems.append(f"{target}: points outside the repository")
            continue
        if not path:
            continue
        resolved = (doc.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
    assert not problems, problems


def test_protocol_doc_does_not_send_readers_to_the_spec_checkout() -> None:
    assert "shared/spec" not in (ROOT / "docs" / "protocol.md").read_text()
