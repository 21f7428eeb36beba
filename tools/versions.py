#!/usr/bin/env python3
"""One version number for the contract and the three kits: `VERSION` at the repository's root.

Every manifest and module that has to state it again (pyproject.toml, package.json, the Go constant,
`__version__`, the changelog's newest section, the READMEs' `go get`) is listed in `PLACES`;
`python tools/versions.py check` fails when one of them differs from VERSION (tests/release runs it),
`python tools/versions.py set X.Y.Z` rewrites VERSION and every copy.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERSION_FILE = ROOT / "VERSION"
SEMVER = r"\d+\.\d+\.\d+"


@dataclasses.dataclass(frozen=True)
class Place:
    """A file that states the version: `pattern`'s group `v` is the version; `count` matches expected."""

    path: str
    pattern: str
    count: int = 1
    #: `set` rewrites it (the changelog is not rewritten: a release writes its own section)
    rewrite: bool = True

    def found(self, text: str) -> list[str]:
        return [m.group("v") for m in re.finditer(self.pattern, text, re.M)]


V = rf"(?P<v>{SEMVER})"
PLACES = [
    Place("sdk_python/pyproject.toml", rf'^version = "{V}"'),
    Place("sdk_python/src/agentrunner/__init__.py", rf'^__version__ = "{V}"'),
    Place("host/pyproject.toml", rf'^version = "{V}"'),
    # the host needs the SDK of its own release (the dependency and the otlp extra)
    Place("host/pyproject.toml", rf'"langbot-agentrunner-sdk(?:\[otlp\])?=={V}"', count=2),
    Place("host/src/agentrunner_host/__init__.py", rf'^__version__ = "{V}"'),
    Place("runners/pyproject.toml", rf'^version = "{V}"'),
    Place("sdk_go/agentrunner/version.go", rf'^const Version = "{V}"'),
    Place("sdk_go/README.md", rf"sdk_go@v{V}", count=2),
    Place("README.md", rf"sdk_go@v{V}"),
    Place("sdk_ts/package.json", rf'^  "version": "{V}"'),
    Place("sdk_ts/package-lock.json", rf'^  "name": "@langbot/agentrunner",\n  "version": "{V}"'),
    Place(
        "sdk_ts/package-lock.json",
        rf'^    "": {{\n      "name": "@langbot/agentrunner",\n      "version": "{V}"',
    ),
    Place("sdk_ts/src/version.ts", rf'^export const VERSION = "{V}"'),
    Place("CHANGELOG.md", rf"^## {V}", rewrite=False),
]


def version() -> str:
    return VERSION_FILE.read_text().strip()


def check(root: pathlib.Path = ROOT) -> list[str]:
    """Every place states VERSION (problems as `path: ...` lines; empty when all agree)."""
    want = (root / "VERSION").read_text().strip()
    problems = [] if re.fullmatch(SEMVER, want) else [f"VERSION: {want!r} is not MAJOR.MINOR.PATCH"]
    for place in PLACES:
        got = place.found((root / place.path).read_text())
        if place.path == "CHANGELOG.md":
            got = got[:1]  # the newest section
        if len(got) != place.count:
            problems.append(f"{place.path}: {len(got)} matches of {place.pattern!r}, expected {place.count}")
        problems += [f"{place.path}: states {v}, VERSION is {want}" for v in got if v != want]
    return problems


def set_version(new: str, root: pathlib.Path = ROOT) -> None:
    """Rewrites VERSION and every place but the changelog to `new`."""
    if not re.fullmatch(SEMVER, new):
        raise ValueError(f"{new!r} is not MAJOR.MINOR.PATCH")
    for place in PLACES:
        if not place.rewrite:
            continue
        path = root / place.path

        def swap(m: re.Match[str]) -> str:
            start, end = m.span("v")
            return m.group(0)[: start - m.start()] + new + m.group(0)[end - m.start() :]

        path.write_text(re.sub(place.pattern, swap, path.read_text(), flags=re.M))
    (root / "VERSION").write_text(new + "\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["set"] and len(argv) == 2:
        set_version(argv[1])
        print(f"version {argv[1]}: VERSION and {len({p.path for p in PLACES})} files rewritten")
        print(f"then: uv lock (the workspace members' versions) and a '## {argv[1]}' section in CHANGELOG.md")
        return 0
    if argv in ([], ["check"]):
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if not problems:
            print(f"version {version()}: every place agrees")
        return 1 if problems else 0
    print("usage: tools/versions.py [check | set X.Y.Z]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
