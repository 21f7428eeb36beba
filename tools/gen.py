#!/usr/bin/env python3
"""`make gen`: regenerate the Python contract from proto/ with buf, offline, into the SDK package.

buf writes into `.gen/python` (cleaned on each run); the `agentrunner/v1` tree is then mirrored into
`sdk_python/src/agentrunner/v1`, stale generated files are removed, and an `__init__.py` is written.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / ".gen" / "python" / "agentrunner" / "v1"
DEST = ROOT / "sdk_python" / "src" / "agentrunner" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def main() -> int:
    env = dict(os.environ)
    # buf runs `python -m grpc_tools.protoc`: make sure it is this interpreter's python.
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run(["buf", "generate"], cwd=ROOT, env=env, check=True)
    DEST.mkdir(parents=True, exist_ok=True)
    for stale in DEST.iterdir():
        if stale.name.endswith(GENERATED_SUFFIXES):
            stale.unlink()
    for src in sorted(OUT.iterdir()):
        if src.name.endswith(GENERATED_SUFFIXES):
            shutil.copyfile(src, DEST / src.name)
    modules = sorted(p.name[: -len(".py")] for p in DEST.glob("*_pb2.py"))
    init = ['"""Generated Protocol v1 contract (do not edit; run `make gen`)."""', ""]
    init += [f"from agentrunner.v1 import {m}" for m in modules]
    init += ["", f"__all__ = {modules!r}", ""]
    (DEST / "__init__.py").write_text("\n".join(init))
    print(f"generated {len(list(DEST.glob('*.py')))} files into {DEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
