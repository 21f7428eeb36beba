"""The release artifacts `make release-check` builds, what each must (and must not) contain, and the two
local registries that serve them to clean environments the way the public ones would.

- Python: `uv build` of the SDK and the host (wheel and sdist each).
- npm: `npm pack` of sdk_ts (its `prepack` cleans dist/ and compiles).
- Go: the module zip of sdk_go at vVERSION in a GOPROXY directory (`@v/list`, `.info`, `.mod`, `.zip`),
  laid out as the Go module proxy serves a module tagged `sdk_go/vVERSION`.
- `NpmRegistry`: a registry for the `@langbot` scope serving the packed tarball (packument + tarball),
  so that `npm install @langbot/agentrunner` installs it; every other package comes from npm's own.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from email.parser import Parser

ROOT = pathlib.Path(__file__).resolve().parent.parent
GO_MODULE = "github.com/langbot-app/langbot-agentrunner/sdk_go"
NPM_NAME = "@langbot/agentrunner"
EXTRAS = {"postgres", "otlp", "console", "harness"}


def uv() -> str:
    return os.environ.get("UV") or shutil.which("uv") or "uv"


def build_python(dist: pathlib.Path) -> dict[str, pathlib.Path]:
    """Wheel and sdist of the SDK and the host; returns them by kind (sdk-wheel, host-sdist, ...)."""
    for package in ("langbot-agentrunner-sdk", "langbot-agentrunner-host"):
        subprocess.run(
            [uv(), "build", "--quiet", "--package", package, "-o", str(dist)], cwd=ROOT, check=True
        )
    found = {}
    for kind, stem in (("sdk", "langbot_agentrunner_sdk"), ("host", "langbot_agentrunner_host")):
        (found[f"{kind}-wheel"],) = dist.glob(f"{stem}-*-py3-none-any.whl")
        (found[f"{kind}-sdist"],) = dist.glob(f"{stem}-*.tar.gz")
    return found


def _metadata(wheel: pathlib.Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(z.read(meta).decode())
    fields: dict[str, list[str]] = {}
    for key, value in headers.items():
        fields.setdefault(key, []).append(value)
    return names, fields


def check_sdk(wheel: pathlib.Path, sdist: pathlib.Path, version: str) -> list[str]:
    """The SDK wheel: the package (typed, the contract, the host double, the kit), no exact pins."""
    names, meta = _metadata(wheel)
    problems = [
        f"{wheel.name}: {n} is outside agentrunner/"
        for n in names
        if not n.startswith(("agentrunner/", "langbot_agentrunner_sdk-"))
    ]
    for need in (
        "py.typed",
        "v1/descriptor_set.binpb",
        "v1/runner_service_pb2_grpc.pyi",
        "testing.py",
        "conformance/cli.py",
    ):
        if f"agentrunner/{need}" not in names:
            problems.append(f"{wheel.name}: no agentrunner/{need}")
    problems += [
        f"{wheel.name}: Requires-Dist {r!r} pins one version"
        for r in meta.get("Requires-Dist", [])
        if "==" in r.split(";")[0]  # (not the markers: `extra == 'otlp'`)
    ]
    if meta.get("Version") != [version]:
        problems.append(f"{wheel.name}: Version {meta.get('Version')}, VERSION is {version}")
    with tarfile.open(sdist) as tar:
        members = [m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name]
    problems += [f"{sdist.name}: has {m}" for m in members if m.startswith("tests/")]
    if "README.md" not in members or "src/agentrunner/py.typed" not in members:
        problems.append(f"{sdist.name}: no README.md or src/agentrunner/py.typed")
    return problems


def check_host(wheel: pathlib.Path, version: str) -> list[str]:
    """The host wheel: examples and console files inside, no demos or test doubles, the four extras."""
    names, meta = _metadata(wheel)
    problems = []
    for need in (
        "examples/host.yaml",
        "examples/knowledge/onboarding.md",
        "console/static/index.html",
        "console/static/app.js",
        "store/migrations/env.py",
    ):
        if f"agentrunner_host/{need}" not in names:
            problems.append(f"{wheel.name}: no agentrunner_host/{need}")
    problems += [
        f"{wheel.name}: ships {n}"
        for n in names
        if n.startswith(("agentrunner_host/demos/", "agentrunner_host/testing/"))
    ]
    extras = set(meta.get("Provides-Extra", []))
    if extras != EXTRAS:
        problems.append(f"{wheel.name}: extras {sorted(extras)}, expected {sorted(EXTRAS)}")
    if f"langbot-agentrunner-sdk=={version}" not in meta.get("Requires-Dist", []):
        problems.append(f"{wheel.name}: does not require langbot-agentrunner-sdk=={version}")
    return problems


def build_npm(dist: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """`npm pack` of sdk_ts and the problems with its contents (the files a consumer gets)."""
    out = subprocess.run(
        ["npm", "pack", "--json", "--pack-destination", str(dist), "--loglevel=error"],
        cwd=ROOT / "sdk_ts",
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    packed = json.loads(out[out.index("[") :])[0]
    files = {f["path"] for f in packed["files"]}
    problems = [
        f"npm pack: {f} is not part of the package"
        for f in sorted(files)
        if not re.match(r"(dist/src/|src/|README\.md$|package\.json$)", f)
    ]
    manifest = json.loads((ROOT / "sdk_ts" / "package.json").read_text())
    targets = {manifest["main"], manifest["types"]}
    for entry in manifest["exports"].values():
        targets |= set(entry.values()) if isinstance(entry, dict) else {entry}
    problems += [
        f"npm pack: exports/main/types name {t}, which is not packed"
        for t in sorted(targets)
        if t.removeprefix("./") not in files
    ]
    problems += [f"npm pack: {f} is a test" for f in files if ".test." in f]
    return dist / packed["filename"], problems


def go_proxy(proxy: pathlib.Path, version: str) -> tuple[pathlib.Path, list[str]]:
    """The module zip of sdk_go at v`version` in a GOPROXY directory; the files it holds, relative."""
    source = ROOT / "sdk_go"
    nested = {p.parent for p in source.rglob("go.mod") if p.parent != source}
    files = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_symlink() or not path.is_file() or any(d in nested for d in path.parents):
            continue
        if any(part in ("vendor", ".git") or part.startswith(".") for part in rel.parts):
            continue
        files.append(rel)
    at = proxy / GO_MODULE / "@v"
    at.mkdir(parents=True, exist_ok=True)
    tag = f"v{version}"
    with zipfile.ZipFile(at / f"{tag}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for rel in files:
            z.write(source / rel, f"{GO_MODULE}@{tag}/{rel.as_posix()}")
    shutil.copy(source / "go.mod", at / f"{tag}.mod")
    (at / f"{tag}.info").write_text(json.dumps({"Version": tag, "Time": "2026-01-01T00:00:00Z"}))
    (at / "list").write_text(tag + "\n")
    return at / f"{tag}.zip", [r.as_posix() for r in files]


def check_go(files: list[str]) -> list[str]:
    problems = [
        f"go module zip: no {need}"
        for need in ("go.mod", "go.sum", "agentrunner/version.go", "agentrunnerv1/runner_service_grpc.pb.go")
        if need not in files
    ]
    problems += [
        f"go module zip: has {f} (the generators' own module)" for f in files if f.startswith("tools/")
    ]
    return problems


class NpmRegistry:
    """Serves one packed package (`npm pack` tarball) as a registry serves it: its packument at
    `/<name>` and the tarball, with its integrity. Point a scope at it with `@scope:registry=URL`."""

    def __init__(self, tarball: pathlib.Path) -> None:
        self.tarball = tarball
        with tarfile.open(tarball) as tar:
            member = tar.extractfile("package/package.json")
            assert member is not None
            self.manifest = json.loads(member.read())
        data = tarball.read_bytes()
        self.integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        self.shasum = hashlib.sha1(data).hexdigest()  # (npm checks the sha512; old clients the sha1)
        self.url = ""

    def packument(self) -> bytes:
        version = self.manifest["version"]
        entry = {
            **self.manifest,
            "_id": f"{self.manifest['name']}@{version}",
            "dist": {
                "tarball": f"{self.url}tarballs/{self.tarball.name}",
                "integrity": self.integrity,
                "shasum": self.shasum,
            },
        }
        doc = {"name": self.manifest["name"], "dist-tags": {"latest": version}, "versions": {version: entry}}
        return json.dumps(doc).encode()

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0].replace("%2f", "/").replace("%2F", "/")
                if path == "/" + registry.manifest["name"]:
                    body, kind = registry.packument(), "application/json"
                elif path == f"/tarballs/{registry.tarball.name}":
                    body, kind = registry.tarball.read_bytes(), "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}/"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self.url
        finally:
            server.shutdown()
            server.server_close()
